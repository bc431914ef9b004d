#ifndef PIPELINEKIT_CTIFF_SHIM_H
#define PIPELINEKIT_CTIFF_SHIM_H
// libtiff from memory or from a file descriptor (pread: no shared offset, so several readers may
// read one descriptor at once, and a file cut short is a read error, never a signal), for TIFF shrink-on-load (Plugins/Formats/TIFF/TIFFReducer.swift): the first
// directory read through libtiff's RGBA interface (every photometric and bit depth it supports,
// as premultiplied 8-bit RGBA), reduced in Swift before ImageMagick sees it.
//
// Errors and warnings go to handlers of this reader only (libtiff 4.5's per-handle handlers), never
// to stderr or a process-wide handler; the first error's text is kept in the reader.
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <tiffio.h>
#include <unistd.h>

typedef struct {
    const unsigned char *data;  // NULL when reading `fd`
    int fd;
    uint64_t size, position;
    TIFF *tiff;
    char message[200];
    TIFFRGBAImage image;  // the band reader (pk_tiff_band_begin), when begun
    int image_begun;
} pk_tiff_reader;

static int pk_tiff_on_error(TIFF *tiff, void *user, const char *module, const char *format, va_list args) {
    (void)tiff;
    pk_tiff_reader *reader = (pk_tiff_reader *)user;
    if (reader && reader->message[0] == 0) {
        char text[160];
        vsnprintf(text, sizeof text, format, args);
        snprintf(reader->message, sizeof reader->message, "%s%s%s", module ? module : "", module ? ": " : "", text);
    }
    return 1;
}

static int pk_tiff_on_warning(TIFF *tiff, void *user, const char *module, const char *format, va_list args) {
    (void)tiff; (void)user; (void)module; (void)format; (void)args;
    return 1;
}

static tmsize_t pk_tiff_read(thandle_t handle, void *out, tmsize_t size) {
    pk_tiff_reader *reader = (pk_tiff_reader *)handle;
    if (size < 0 || reader->position >= reader->size) return 0;
    uint64_t n = (uint64_t)size;
    if (n > reader->size - reader->position) n = reader->size - reader->position;
    if (!reader->data) {
        uint64_t done = 0;
        while (done < n) {
            ssize_t got = pread(reader->fd, (unsigned char *)out + done, (size_t)(n - done), (off_t)(reader->position + done));
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) return -1;
            if (got == 0) break;  // the file is shorter than when it was opened
            done += (uint64_t)got;
        }
        reader->position += done;
        return (tmsize_t)done;
    }
    memcpy(out, reader->data + reader->position, (size_t)n);
    reader->position += n;
    return (tmsize_t)n;
}

static tmsize_t pk_tiff_write(thandle_t handle, void *data, tmsize_t size) {
    (void)handle; (void)data; (void)size;
    return -1;
}

static toff_t pk_tiff_seek(thandle_t handle, toff_t offset, int whence) {
    pk_tiff_reader *reader = (pk_tiff_reader *)handle;
    uint64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? reader->position : reader->size;
    if (offset > UINT64_MAX - base) return (toff_t)-1;
    reader->position = base + offset;
    return reader->position;
}

static int pk_tiff_close_proc(thandle_t handle) { (void)handle; return 0; }
static toff_t pk_tiff_size(thandle_t handle) { return ((pk_tiff_reader *)handle)->size; }
static int pk_tiff_map(thandle_t handle, void **base, toff_t *size) {
    pk_tiff_reader *reader = (pk_tiff_reader *)handle;
    if (!reader->data) return 0;
    *base = (void *)reader->data;
    *size = reader->size;
    return 1;
}
static void pk_tiff_unmap(thandle_t handle, void *base, toff_t size) { (void)handle; (void)base; (void)size; }

static inline void pk_tiff_close(pk_tiff_reader *reader) {
    if (!reader) return;
    if (reader->image_begun) TIFFRGBAImageEnd(&reader->image);
    if (reader->tiff) TIFFClose(reader->tiff);
    free(reader);
}

/// Opens `data` (which must outlive the reader), or when `data` is NULL the file open as `fd` (which
/// must stay open while the reader lives; `size` is its size), and reads the first directory; `*ok`
/// is 0 when it cannot (the reader then holds libtiff's message). `max_alloc` caps any single allocation.
static inline pk_tiff_reader *pk_tiff_open(const void *data, int fd, size_t size, int64_t max_alloc, int *ok) {
    *ok = 0;
    pk_tiff_reader *reader = (pk_tiff_reader *)calloc(1, sizeof(pk_tiff_reader));
    if (!reader) return NULL;
    reader->data = (const unsigned char *)data;
    reader->fd = fd;
    reader->size = size;
    TIFFOpenOptions *options = TIFFOpenOptionsAlloc();
    if (!options) return reader;
    TIFFOpenOptionsSetErrorHandlerExtR(options, pk_tiff_on_error, reader);
    TIFFOpenOptionsSetWarningHandlerExtR(options, pk_tiff_on_warning, reader);
    TIFFOpenOptionsSetMaxSingleMemAlloc(options, (tmsize_t)max_alloc);
    reader->tiff = TIFFClientOpenExt("image", "rm", (thandle_t)reader, pk_tiff_read, pk_tiff_write, pk_tiff_seek,
                                     pk_tiff_close_proc, pk_tiff_size, pk_tiff_map, pk_tiff_unmap, options);
    TIFFOpenOptionsFree(options);
    if (reader->tiff) *ok = 1;
    else if (reader->message[0] == 0) strcpy(reader->message, "not a readable TIFF");
    return reader;
}

/// The first directory's facts.
static inline void pk_tiff_info(pk_tiff_reader *reader, uint32_t *width, uint32_t *height, uint16_t *photometric,
                                uint16_t *samples, uint16_t *bits, uint16_t *orientation, int *more_pages) {
    TIFF *t = reader->tiff;
    *width = 0; *height = 0; *photometric = 0; *samples = 1; *bits = 1; *orientation = ORIENTATION_TOPLEFT;
    TIFFGetField(t, TIFFTAG_IMAGEWIDTH, width);
    TIFFGetField(t, TIFFTAG_IMAGELENGTH, height);
    TIFFGetField(t, TIFFTAG_PHOTOMETRIC, photometric);
    TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, samples);
    TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, bits);
    TIFFGetFieldDefaulted(t, TIFFTAG_ORIENTATION, orientation);
    *more_pages = TIFFLastDirectory(t) ? 0 : 1;
}

/// Whether the first directory has an alpha channel (associated or not).
static inline int pk_tiff_has_alpha(pk_tiff_reader *reader) {
    uint16_t count = 0;
    uint16_t *kinds = NULL;
    if (!TIFFGetField(reader->tiff, TIFFTAG_EXTRASAMPLES, &count, &kinds)) return 0;
    for (uint16_t i = 0; i < count; i++)
        if (kinds[i] == EXTRASAMPLE_ASSOCALPHA || kinds[i] == EXTRASAMPLE_UNASSALPHA) return 1;
    return 0;
}

/// The ICC profile (owned by libtiff, valid until the reader is closed), or NULL.
static inline const void *pk_tiff_icc(pk_tiff_reader *reader, uint32_t *length) {
    void *profile = NULL;
    *length = 0;
    if (!TIFFGetField(reader->tiff, TIFFTAG_ICCPROFILE, length, &profile)) return NULL;
    return profile;
}

/// The bytes of a tag stored as a counted blob (XMP packet, Photoshop resources, IPTC), owned by
/// libtiff until the reader is closed, or NULL.
static inline const void *pk_tiff_blob(pk_tiff_reader *reader, uint32_t tag, uint32_t *length) {
    void *bytes = NULL;
    *length = 0;
    if (!TIFFGetField(reader->tiff, tag, length, &bytes)) return NULL;
    return bytes;
}

/// Whether libtiff's RGBA interface reads this directory.
static inline int pk_tiff_rgba_ok(pk_tiff_reader *reader) {
    char message[1024];
    if (TIFFRGBAImageOK(reader->tiff, message)) return 1;
    return 0;
}

/// The whole first directory as premultiplied 8-bit RGBA (R, G, B, A bytes), top row first, into
/// `raster` (width x height x 4 bytes); 0 on failure.
static inline int pk_tiff_read_rgba(pk_tiff_reader *reader, uint32_t *raster, uint32_t width, uint32_t height) {
    return TIFFReadRGBAImageOriented(reader->tiff, width, height, raster, ORIENTATION_TOPLEFT, 1);
}

/// Directories in the file (pages, or a pyramid's levels).
static inline int pk_tiff_directories(pk_tiff_reader *reader) { return (int)TIFFNumberOfDirectories(reader->tiff); }

/// Makes directory `index` the current one; its size and whether it is a reduced-resolution
/// version of the first (a pyramid level: SubfileType has FILETYPE_REDUCEDIMAGE). 0 on failure.
static inline int pk_tiff_select(pk_tiff_reader *reader, int index, uint32_t *width, uint32_t *height, int *reduced) {
    if (!TIFFSetDirectory(reader->tiff, (tdir_t)index)) return 0;
    uint32_t kind = 0;
    *width = 0; *height = 0;
    TIFFGetField(reader->tiff, TIFFTAG_IMAGEWIDTH, width);
    TIFFGetField(reader->tiff, TIFFTAG_IMAGELENGTH, height);
    TIFFGetFieldDefaulted(reader->tiff, TIFFTAG_SUBFILETYPE, &kind);
    *reduced = (kind & FILETYPE_REDUCEDIMAGE) ? 1 : 0;
    return 1;
}

/// The rows one read of the current directory decodes: a strip's or a tile row's (the whole
/// image when it is one strip).
static inline uint32_t pk_tiff_band_rows(pk_tiff_reader *reader) {
    uint32_t rows = 0, height = 0;
    TIFFGetField(reader->tiff, TIFFTAG_IMAGELENGTH, &height);
    if (TIFFIsTiled(reader->tiff)) TIFFGetField(reader->tiff, TIFFTAG_TILELENGTH, &rows);
    else TIFFGetFieldDefaulted(reader->tiff, TIFFTAG_ROWSPERSTRIP, &rows);
    if (rows == 0 || rows > height) rows = height;
    return rows;
}

/// Begins reading the current directory in bands of rows, top row first; 0 on failure.
static inline int pk_tiff_band_begin(pk_tiff_reader *reader) {
    char message[1024] = {0};
    if (!TIFFRGBAImageBegin(&reader->image, reader->tiff, 1, message)) {
        if (reader->message[0] == 0) snprintf(reader->message, sizeof reader->message, "%s", message);
        return 0;
    }
    reader->image.req_orientation = ORIENTATION_TOPLEFT;
    reader->image_begun = 1;
    return 1;
}

/// Reads `rows` rows from `row` on as premultiplied 8-bit RGBA into `raster` (width x rows x 4
/// bytes); 0 on failure. Bands are read in order; each strip or tile is decoded once when the
/// bands follow its rows.
static inline int pk_tiff_band_read(pk_tiff_reader *reader, uint32_t *raster, uint32_t row, uint32_t rows) {
    reader->image.row_offset = (int)row;
    reader->image.col_offset = 0;
    return TIFFRGBAImageGet(&reader->image, raster, reader->image.width, rows);
}

/// Whether the current directory's strips decode straight to the pixels wanted: 8-bit RGB, three
/// samples interleaved, no alpha, in strips (not tiles), so a strip is read raw (libtiff still
/// undoes the compression and the predictor) without the RGBA interface's packing.
static inline int pk_tiff_raw_rgb(pk_tiff_reader *reader) {
    TIFF *t = reader->tiff;
    uint16_t photometric = 0, samples = 0, bits = 0, planar = 0, compression = 0;
    if (TIFFIsTiled(t)) return 0;
    TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &photometric);
    TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &samples);
    TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &bits);
    TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
    TIFFGetFieldDefaulted(t, TIFFTAG_COMPRESSION, &compression);
    return photometric == PHOTOMETRIC_RGB && samples == 3 && bits == 8 && planar == PLANARCONFIG_CONTIG
        && compression != COMPRESSION_OJPEG && compression != COMPRESSION_JPEG;
}

/// Decodes strip `strip` of the current directory into `out` (`size` bytes); the bytes decoded, or
/// -1 on failure (the reader then holds libtiff's message).
static inline int64_t pk_tiff_read_strip(pk_tiff_reader *reader, uint32_t strip, void *out, int64_t size) {
    return (int64_t)TIFFReadEncodedStrip(reader->tiff, strip, out, (tmsize_t)size);
}

static inline const char *pk_tiff_message(pk_tiff_reader *reader) { return reader->message; }
#endif
