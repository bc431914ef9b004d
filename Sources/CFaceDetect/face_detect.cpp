// dlib's HOG frontal-face detector behind a C function (see include/face_detect.h).
//
// dlib is linked statically (Package.swift links libdlib.a), and only for what the detector's
// inline model needs to be read (base64 and dlib's compressed stream). Debian's dlib/config.h asks
// for BLAS and LAPACK, which the detector never calls but its templates would name; config.h has
// no include guard and is read by these two headers only, so the two switches are turned off
// after them and before anything else of dlib is read. The binary then needs no dlib, BLAS or
// LAPACK library at run time.
#include <dlib/assert.h>
#include <dlib/test_for_odr_violations.h>
#undef DLIB_USE_BLAS
#undef DLIB_USE_LAPACK
#undef DLIB_JPEG_SUPPORT
#undef DLIB_PNG_SUPPORT
#include <dlib/image_processing/frontal_face_detector.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "face_detect.h"

namespace {

// The model is read once per process (about 0.2 s: it is compressed inside dlib's header); each
// thread scans with its own copy, since a detector keeps its feature pyramid while it scans.
const dlib::frontal_face_detector &prototype() {
    static std::once_flag once;
    static dlib::frontal_face_detector *made = nullptr;
    std::call_once(once, [] { made = new dlib::frontal_face_detector(dlib::get_frontal_face_detector()); });
    return *made;
}

dlib::frontal_face_detector &detector() {
    thread_local dlib::frontal_face_detector copy = prototype();
    return copy;
}

void copy_message(const char *message, char *error, size_t error_size) {
    if (error == nullptr || error_size == 0) return;
    std::strncpy(error, message, error_size - 1);
    error[error_size - 1] = '\0';
}

}  // namespace

extern "C" void pk_prepare_face_detector(void) {
    try {
        (void)prototype();
    } catch (...) {
        // pk_detect_faces reports the failure when it is called.
    }
}

extern "C" long pk_detect_faces(const uint8_t *gray, long width, long height, double threshold,
                                pk_face *faces, long capacity, char *error, size_t error_size) {
    try {
        dlib::array2d<unsigned char> image(height, width);
        for (long row = 0; row < height; ++row) {
            std::memcpy(&image[row][0], gray + row * width, static_cast<size_t>(width));
        }
        std::vector<dlib::rect_detection> found;
        detector()(image, found, threshold);
        std::sort(found.begin(), found.end(),
                  [](const dlib::rect_detection &a, const dlib::rect_detection &b) {
                      return a.detection_confidence > b.detection_confidence;
                  });
        const long count = static_cast<long>(found.size());
        for (long i = 0; i < std::min(count, capacity); ++i) {
            const dlib::rectangle &box = found[i].rect;
            faces[i] = pk_face{box.left(), box.top(), static_cast<long>(box.width()),
                               static_cast<long>(box.height()), found[i].detection_confidence};
        }
        return count;
    } catch (const std::exception &failure) {
        copy_message(failure.what(), error, error_size);
        return -1;
    } catch (...) {
        copy_message("dlib failed with an unknown exception", error, error_size);
        return -1;
    }
}
