#ifndef PIPELINEKIT_FACE_DETECT_H
#define PIPELINEKIT_FACE_DETECT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// One face found by dlib's HOG frontal-face detector, in the pixels of the image it scanned.
typedef struct {
    long left, top, width, height;
    /// The detector's confidence: how far past its decision threshold the window scored (0 is
    /// the threshold; 1 and more is a clear face).
    double score;
} pk_face;

/// Finds frontal faces in an 8-bit grey image of `width` x `height` pixels (rows of `width`
/// bytes), with dlib 19.24's built-in HOG detector (its model is compiled in: no file is read).
/// It finds faces of about 80 pixels and larger; a caller wanting smaller ones scales the image
/// up first. Writes at most `capacity` faces, highest score first, into `faces`, and returns how
/// many it found in all (which may exceed `capacity`), or -1 when dlib failed (its message is
/// copied into `error`, at most `error_size` bytes with the terminating zero). Thread-safe: the
/// model is read once per process, and each thread scans with its own copy of it.
long pk_detect_faces(const uint8_t *gray, long width, long height, double threshold,
                     pk_face *faces, long capacity, char *error, size_t error_size);

/// Reads the detector's model (about 0.2 s, once per process), so that the first scan does not
/// wait for it. Safe to call from any thread, any number of times.
void pk_prepare_face_detector(void);

#ifdef __cplusplus
}
#endif

#endif
