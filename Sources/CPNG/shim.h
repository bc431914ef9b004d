#ifndef PIPELINEKIT_CPNG_SHIM_H
#define PIPELINEKIT_CPNG_SHIM_H
// libpng, row by row, for PNG shrink-on-load (Plugins/Formats/PNG/PNGReducer.swift), and for
// writing PNG outputs (Plugins/Formats/PNG/PNGWriter.swift, at the end).
//
// libpng reports errors by longjmp, which must never cross a Swift frame. Every call that can fail
// is therefore made inside one of the small functions below, each of which sets its own jump
// target first and turns an error into a return value, with libpng's message kept in the reader.
// Warnings (such as an edited sRGB profile) are discarded: they never stop a read. A CRC mismatch
// in a critical chunk is an error unless the reader's `fail_level` (the decoder's fail_on) lets
// damage of level 2 through, when its data is used; in an ancillary chunk libpng drops the chunk.
// Either is recorded as the read's damage, for the caller to hold to fail_on.
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <png.h>
#include <unistd.h>

/// The length of every message buffer here, terminator included.
#define PK_PNG_MESSAGE 160

/// Copies libpng's `message` (or "unknown error") into a message buffer, always terminated.
static void pk_png_keep_message(char *out, png_const_charp message) {
    strncpy(out, message ? message : "unknown error", PK_PNG_MESSAGE - 1);
    out[PK_PNG_MESSAGE - 1] = 0;
}

/// Bytes read from a file at a time.
#define PK_PNG_BUFFER (1 << 20)

/// One PNG being read from memory, or from a file descriptor (pread into a buffer of its own: no
/// shared offset, and a file cut short is an error, never a signal).
typedef struct {
    png_structp png;
    png_infop info;
    const unsigned char *data;  // NULL when reading `fd`
    int fd;
    unsigned char *buffer;      // the file's bytes from buffer_start, buffer_length of them
    size_t buffer_start, buffer_length;
    size_t size, position;
    /// 1 when the last failure was the data ending early.
    int truncated;
    /// The worst CRC mismatch read past (0 none; 1 in an ancillary chunk, which libpng drops;
    /// 2 in a critical one, whose data is used), with the first one's message.
    int damage_level;
    char damage[PK_PNG_MESSAGE];
    /// libpng's message for the last failure.
    char message[PK_PNG_MESSAGE];
} pk_png_reader;

static void pk_png_on_error(png_structp png, png_const_charp message) {
    pk_png_reader *reader = (pk_png_reader *)png_get_error_ptr(png);
    pk_png_keep_message(reader->message, message);
    png_longjmp(png, 1);
}

static void pk_png_on_warning(png_structp png, png_const_charp message) {
    pk_png_reader *reader = (pk_png_reader *)png_get_error_ptr(png);
    if (message && strstr(message, "CRC error")) {
        // "<chunk>: CRC error": a critical chunk's name starts with a capital letter.
        int level = message[0] >= 'A' && message[0] <= 'Z' ? 2 : 1;
        if (reader->damage_level == 0) strncpy(reader->damage, message, sizeof reader->damage - 1);
        if (level > reader->damage_level) reader->damage_level = level;
    }
}

static void pk_png_on_read(png_structp png, png_bytep out, size_t length) {
    pk_png_reader *reader = (pk_png_reader *)png_get_io_ptr(png);
    if (length > reader->size - reader->position) {
        reader->truncated = 1;
        png_error(png, "the file ends before the image does");
    }
    if (reader->data) {
        memcpy(out, reader->data + reader->position, length);
        reader->position += length;
        return;
    }
    while (length > 0) {
        if (reader->position < reader->buffer_start || reader->position >= reader->buffer_start + reader->buffer_length) {
            size_t want = reader->size - reader->position;
            if (want > PK_PNG_BUFFER) want = PK_PNG_BUFFER;
            ssize_t got;
            do { got = pread(reader->fd, reader->buffer, want, (off_t)reader->position); } while (got < 0 && errno == EINTR);
            if (got <= 0) {
                reader->truncated = got == 0;
                png_error(png, got == 0 ? "the file ends before the image does" : "the file could not be read");
            }
            reader->buffer_start = reader->position;
            reader->buffer_length = (size_t)got;
        }
        size_t offset = reader->position - reader->buffer_start;
        size_t n = reader->buffer_length - offset;
        if (n > length) n = length;
        memcpy(out, reader->buffer + offset, n);
        out += n;
        length -= n;
        reader->position += n;
    }
}

static inline void pk_png_close(pk_png_reader *reader) {
    if (!reader) return;
    png_destroy_read_struct(&reader->png, &reader->info, NULL);
    free(reader->buffer);
    free(reader);
}

/// Opens `data` (which must outlive the reader), or when `data` is NULL the file open as `fd`
/// (open while the reader lives; `size` is its size), and reads every chunk before the image data.
/// Returns NULL only when out of memory; otherwise check `*ok` and `message`. With `fail_level`
/// above 2, a CRC mismatch is read past (see pk_png_reader).
static inline pk_png_reader *pk_png_open(const void *data, int fd, size_t size, int fail_level, int *ok) {
    *ok = 0;
    pk_png_reader *reader = (pk_png_reader *)calloc(1, sizeof(pk_png_reader));
    if (!reader) return NULL;
    reader->data = (const unsigned char *)data;
    reader->fd = fd;
    reader->size = size;
    if (!data && !(reader->buffer = (unsigned char *)malloc(PK_PNG_BUFFER))) { free(reader); return NULL; }
    reader->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, reader, pk_png_on_error, pk_png_on_warning);
    if (!reader->png) { free(reader); return NULL; }
    reader->info = png_create_info_struct(reader->png);
    if (!reader->info) { pk_png_close(reader); return NULL; }
    if (setjmp(png_jmpbuf(reader->png))) return reader;
    // zlib's Adler-32 pass is skipped; every chunk's CRC-32, the image data's included, is checked.
    png_set_option(reader->png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
    png_set_option(reader->png, PNG_SKIP_sRGB_CHECK_PROFILE, PNG_OPTION_ON);
    if (fail_level > 2) png_set_crc_action(reader->png, PNG_CRC_WARN_USE, PNG_CRC_WARN_USE);
    png_set_read_fn(reader->png, reader, pk_png_on_read);
    png_read_info(reader->png, reader->info);
    *ok = 1;
    return reader;
}

/// The header of an opened PNG; `profile` points into the reader (NULL when there is none).
static inline void pk_png_header(pk_png_reader *reader, uint32_t *width, uint32_t *height, int *color_type,
                                 int *interlaced, int *transparency, const unsigned char **profile,
                                 uint32_t *profile_length) {
    *width = png_get_image_width(reader->png, reader->info);
    *height = png_get_image_height(reader->png, reader->info);
    *color_type = png_get_color_type(reader->png, reader->info);
    *interlaced = png_get_interlace_type(reader->png, reader->info) != PNG_INTERLACE_NONE;
    *transparency = png_get_valid(reader->png, reader->info, PNG_INFO_tRNS) != 0;
    png_charp name = NULL;
    int compression = 0;
    png_bytep bytes = NULL;
    png_uint_32 length = 0;
    if (png_get_iCCP(reader->png, reader->info, &name, &compression, &bytes, &length) == PNG_INFO_iCCP) {
        *profile = bytes;
        *profile_length = length;
    } else {
        *profile = NULL;
        *profile_length = 0;
    }
}

/// Asks for 8-bit RGB or RGBA rows (grey made RGB, palette and tRNS expanded, 16 bits cut to
/// 8). Returns the bytes of a row, or 0 on failure.
static inline size_t pk_png_start(pk_png_reader *reader) {
    if (setjmp(png_jmpbuf(reader->png))) return 0;
    png_set_expand(reader->png);
    png_set_strip_16(reader->png);
    png_set_gray_to_rgb(reader->png);
    png_read_update_info(reader->png, reader->info);
    return png_get_rowbytes(reader->png, reader->info);
}

/// Asks for 8-bit RGB or RGBA rows of any PNG (grey made RGB, palette and tRNS expanded, 16 bits
/// cut to 8, interlacing handled in `*passes` passes over every row). Returns the bytes of a row,
/// or 0 on failure.
static inline size_t pk_png_start_any(pk_png_reader *reader, int *passes) {
    if (setjmp(png_jmpbuf(reader->png))) return 0;
    png_set_expand(reader->png);
    png_set_strip_16(reader->png);
    png_set_gray_to_rgb(reader->png);
    *passes = png_set_interlace_handling(reader->png);
    png_read_update_info(reader->png, reader->info);
    return png_get_rowbytes(reader->png, reader->info);
}

/// Reads the next row into `row`. Returns 1, or 0 on failure.
static inline int pk_png_read_row(pk_png_reader *reader, unsigned char *row) {
    if (setjmp(png_jmpbuf(reader->png))) return 0;
    png_read_row(reader->png, row, NULL);
    return 1;
}
// ---- Writing (Plugins/Formats/PNG/PNGWriter.swift) ----------------------------------------------
// libpng keeps no process-wide state while writing: PNG outputs are written side by side.

/// One PNG being written to memory.
typedef struct {
    png_structp png;
    png_infop info;
    unsigned char *data;
    size_t size, capacity;
    char message[PK_PNG_MESSAGE];
} pk_png_writer;

static void pk_png_write_error(png_structp png, png_const_charp message) {
    pk_png_writer *writer = (pk_png_writer *)png_get_error_ptr(png);
    pk_png_keep_message(writer->message, message);
    png_longjmp(png, 1);
}

static void pk_png_write_warning(png_structp png, png_const_charp message) { (void)png; (void)message; }

static void pk_png_on_write(png_structp png, png_bytep bytes, size_t length) {
    pk_png_writer *writer = (pk_png_writer *)png_get_io_ptr(png);
    if (length > writer->capacity - writer->size) {
        size_t want = writer->capacity ? writer->capacity : 65536;
        while (want - writer->size < length) want *= 2;
        unsigned char *grown = (unsigned char *)realloc(writer->data, want);
        if (!grown) png_error(png, "out of memory");
        writer->data = grown;
        writer->capacity = want;
    }
    memcpy(writer->data + writer->size, bytes, length);
    writer->size += length;
}

static void pk_png_on_flush(png_structp png) { (void)png; }

/// Writes `height` rows of `width` 8-bit pixels with `channels` samples each (1 grey, 2 grey and
/// alpha, 3 RGB, 4 RGBA), rows back to back, at zlib `level` (0-9) with libpng's row `filters`
/// (PNG_ALL_FILTERS: adaptive, or one of PNG_FILTER_NONE...PNG_FILTER_PAETH), and the ICC profile
/// `icc` as an iCCP chunk when not NULL. Returns the file (malloc'ed: free it) with its length in
/// `*length`; NULL with the reason in `message` (160 bytes), "icc" when libpng refuses the profile
/// (the caller writes through ImageMagick instead, which keeps any profile).
///
/// With `image_data` (a zlib stream of the filtered rows, `image_data_length` bytes, made by
/// pk_png_image_data), libpng writes the chunks before and the file's end, and the image data is
/// that stream, in IDAT chunks of at most 1 MiB; `pixels`, `level` and `filters` are not used.
static inline unsigned char *pk_png_write(const unsigned char *pixels, uint32_t width, uint32_t height, int channels,
                                          int level, int filters, const unsigned char *icc, uint32_t icc_length,
                                          const unsigned char *image_data, size_t image_data_length,
                                          size_t *length, char *message) {
    static const int types[] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
    pk_png_writer *writer = (pk_png_writer *)calloc(1, sizeof(pk_png_writer));
    *length = 0;
    message[0] = 0;
    if (!writer || channels < 1 || channels > 4) { free(writer); strcpy(message, "out of memory"); return NULL; }
    writer->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, writer, pk_png_write_error, pk_png_write_warning);
    if (writer->png) writer->info = png_create_info_struct(writer->png);
    if (!writer->png || !writer->info) {
        png_destroy_write_struct(&writer->png, NULL);
        free(writer);
        strcpy(message, "out of memory");
        return NULL;
    }
    if (setjmp(png_jmpbuf(writer->png))) {
        pk_png_keep_message(message, writer->message);
        png_destroy_write_struct(&writer->png, &writer->info);
        free(writer->data);
        free(writer);
        return NULL;
    }
    png_set_write_fn(writer->png, writer, pk_png_on_write, pk_png_on_flush);
    png_set_IHDR(writer->png, writer->info, width, height, 8, types[channels], PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(writer->png, level);
    png_set_filter(writer->png, PNG_FILTER_TYPE_BASE, filters);
    if (icc && icc_length) {
        png_set_option(writer->png, PNG_SKIP_sRGB_CHECK_PROFILE, PNG_OPTION_ON);
        png_set_benign_errors(writer->png, 1);
        png_set_iCCP(writer->png, writer->info, "icc", PNG_COMPRESSION_TYPE_BASE, icc, icc_length);
        if (!png_get_valid(writer->png, writer->info, PNG_INFO_iCCP)) png_error(writer->png, "icc");
    }
    png_write_info(writer->png, writer->info);
    if (image_data) {
        for (size_t at = 0; at < image_data_length; at += (size_t)1 << 20) {
            size_t piece = image_data_length - at < ((size_t)1 << 20) ? image_data_length - at : (size_t)1 << 20;
            png_write_chunk(writer->png, (png_const_bytep)"IDAT", image_data + at, piece);
        }
        png_write_chunk(writer->png, (png_const_bytep)"IEND", NULL, 0);
    } else {
        size_t stride = (size_t)width * (size_t)channels;
        for (uint32_t y = 0; y < height; y++) png_write_row(writer->png, pixels + (size_t)y * stride);
        png_write_end(writer->png, writer->info);
    }
    png_destroy_write_struct(&writer->png, &writer->info);
    unsigned char *data = writer->data;
    *length = writer->size;
    free(writer);
    return data;
}

#endif
