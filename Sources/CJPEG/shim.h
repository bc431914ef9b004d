#ifndef PIPELINEKIT_CJPEG_SHIM_H
#define PIPELINEKIT_CJPEG_SHIM_H
// libjpeg-turbo, row by row, for JPEG shrink-on-load (Plugins/Decoders/JPEGReducer.swift).
//
// libjpeg reports errors by calling error_exit, which must not return; the handler below longjmps
// back into the small function that made the call, which turns it into a return value with
// libjpeg's message kept in the reader. No longjmp ever crosses a Swift frame. A corrupt-data
// warning (a truncated file: level 3; a bad Huffman code or other damage: level 1; libjpeg fills
// what is missing with grey) stops the read when its level reaches the reader's `fail_level`
// (the decoder's fail_on), and is otherwise recorded as the read's damage.
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

/// One JPEG being read from memory.
typedef struct {
    struct jpeg_decompress_struct info;
    struct jpeg_error_mgr errors;
    jmp_buf jump;
    int created;
    /// The damage level that stops the read: 1 any corrupt data, 3 truncation only, 4 never.
    int fail_level;
    /// The worst damage read past so far (0 none), and libjpeg's message for its first warning.
    int damage_level;
    char damage[JMSG_LENGTH_MAX];
    /// libjpeg's message for the last failure.
    char message[JMSG_LENGTH_MAX];
} pk_jpeg_reader;

static void pk_jpeg_on_error(j_common_ptr info) {
    pk_jpeg_reader *reader = (pk_jpeg_reader *)info->client_data;
    (*info->err->format_message)(info, reader->message);
    longjmp(reader->jump, 1);
}

static void pk_jpeg_on_message(j_common_ptr info, int level) {
    if (level < 0) {  // a warning: corrupt or missing data
        pk_jpeg_reader *reader = (pk_jpeg_reader *)info->client_data;
        int damage = info->err->msg_code == JWRN_JPEG_EOF ? 3 : 1;
        if (damage >= reader->fail_level) {
            (*info->err->format_message)(info, reader->message);
            longjmp(reader->jump, 1);
        }
        if (reader->damage_level == 0) (*info->err->format_message)(info, reader->damage);
        if (damage > reader->damage_level) reader->damage_level = damage;
    }
}

static inline void pk_jpeg_close(pk_jpeg_reader *reader) {
    if (!reader) return;
    if (reader->created) jpeg_destroy_decompress(&reader->info);
    free(reader);
}

/// Opens `data` (which must outlive the reader) and reads the header, keeping the APP1 (EXIF) and
/// APP2 (ICC) markers. `*ok` is 0 when the header is corrupt (the reader then holds the message).
/// Damage of `fail_level` or worse stops the read (see pk_jpeg_reader).
static inline pk_jpeg_reader *pk_jpeg_open(const void *data, size_t size, int fail_level, int *ok) {
    pk_jpeg_reader *reader = (pk_jpeg_reader *)calloc(1, sizeof(pk_jpeg_reader));
    *ok = 0;
    if (!reader) return NULL;
    reader->fail_level = fail_level;
    reader->info.err = jpeg_std_error(&reader->errors);
    reader->errors.error_exit = pk_jpeg_on_error;
    reader->errors.emit_message = pk_jpeg_on_message;
    reader->info.client_data = reader;
    if (setjmp(reader->jump)) return reader;
    jpeg_create_decompress(&reader->info);
    reader->created = 1;
    jpeg_mem_src(&reader->info, (const unsigned char *)data, (unsigned long)size);
    jpeg_save_markers(&reader->info, JPEG_APP0 + 1, 0xFFFF);
    jpeg_save_markers(&reader->info, JPEG_APP0 + 2, 0xFFFF);
    jpeg_save_markers(&reader->info, JPEG_APP0 + 13, 0xFFFF);
    jpeg_read_header(&reader->info, TRUE);
    *ok = 1;
    return reader;
}

/// The header's facts.
static inline void pk_jpeg_header(pk_jpeg_reader *reader, int *width, int *height, int *components,
                                  int *colorspace, int *progressive) {
    *width = (int)reader->info.image_width;
    *height = (int)reader->info.image_height;
    *components = reader->info.num_components;
    *colorspace = (int)reader->info.jpeg_color_space;
    *progressive = reader->info.progressive_mode ? 1 : 0;
}

/// The `index`th saved marker (APP1, APP2, APP13 in file order): its data, with its type in
/// `*marker` and size in `*length`; NULL after the last.
static inline const unsigned char *pk_jpeg_marker(pk_jpeg_reader *reader, int index, int *marker, unsigned int *length) {
    jpeg_saved_marker_ptr m = reader->info.marker_list;
    for (int i = 0; m && i < index; i++) m = m->next;
    if (!m) { *length = 0; return NULL; }
    *marker = m->marker;
    *length = m->data_length;
    return m->data;
}

/// The ICC profile (joined from its APP2 segments, malloc'ed: free it), or NULL; `*ok` is 0 when
/// the segments are inconsistent.
static inline unsigned char *pk_jpeg_icc(pk_jpeg_reader *reader, unsigned int *length, int *ok) {
    JOCTET *profile = NULL;
    *length = 0;
    *ok = 0;
    if (setjmp(reader->jump)) return NULL;
    if (!jpeg_read_icc_profile(&reader->info, &profile, length)) { *ok = 1; return NULL; }
    *ok = 1;
    return profile;
}

/// Starts decompressing to 8-bit RGB at 1/`denominator` (1, 2, 4 or 8); the output size in
/// `*width` x `*height`. Returns 0 on failure.
static inline int pk_jpeg_start(pk_jpeg_reader *reader, int denominator, int *width, int *height) {
    if (setjmp(reader->jump)) return 0;
    reader->info.scale_num = 1;
    reader->info.scale_denom = (unsigned int)denominator;
    reader->info.out_color_space = JCS_RGB;
    reader->info.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&reader->info);
    *width = (int)reader->info.output_width;
    *height = (int)reader->info.output_height;
    return reader->info.output_components == 3;
}

/// Reads up to `count` rows of `row_bytes` each into `buffer`; the number read, or -1 on failure.
static inline int pk_jpeg_read_rows(pk_jpeg_reader *reader, unsigned char *buffer, size_t row_bytes, int count) {
    if (setjmp(reader->jump)) return -1;
    int done = 0;
    while (done < count && reader->info.output_scanline < reader->info.output_height) {
        JSAMPROW rows[16];
        int want = count - done < 16 ? count - done : 16;
        for (int i = 0; i < want; i++) rows[i] = buffer + (size_t)(done + i) * row_bytes;
        JDIMENSION got = jpeg_read_scanlines(&reader->info, rows, (JDIMENSION)want);
        if (got == 0) break;
        done += (int)got;
    }
    return done;
}

/// Finishes the read (checks the end of the data); 0 on failure.
static inline int pk_jpeg_finish(pk_jpeg_reader *reader) {
    if (setjmp(reader->jump)) return 0;
    jpeg_finish_decompress(&reader->info);
    return 1;
}

static inline const char *pk_jpeg_message(pk_jpeg_reader *reader) { return reader->message; }

/// The worst damage read past (0 none) and libjpeg's message for the first.
static inline const char *pk_jpeg_damage(pk_jpeg_reader *reader, int *level) {
    *level = reader->damage_level;
    return reader->damage;
}
#endif
