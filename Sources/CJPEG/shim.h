#ifndef PIPELINEKIT_CJPEG_SHIM_H
#define PIPELINEKIT_CJPEG_SHIM_H
// libjpeg-turbo, row by row, for JPEG shrink-on-load (Plugins/Formats/JPEG/JPEGReducer.swift).
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

/// Whether `marker` starts a frame (SOF0-SOF15 but DHT, JPG and DAC); `*progressive` set for SOF2/SOF10.
static inline int pk_jpeg_is_frame(unsigned char marker, int *progressive) {
    if (marker < 0xC0 || marker > 0xCF || marker == 0xC4 || marker == 0xC8 || marker == 0xCC) return 0;
    *progressive = (marker == 0xC2 || marker == 0xCA);
    return 1;
}

/// A progressive JPEG without the AC scans (spectral start above 0) that a read at 1/8 does not
/// use: those of components libjpeg decodes with its 1x1 inverse DCT, which reads the DC
/// coefficient alone. (libjpeg scales a subsampled component's DCT up instead of upsampling it, as
/// jdmaster.c does below: 4:2:0 chroma gets a 2x2 DCT at 1/8, and its AC scans are kept.) Every
/// other segment, and the kept scans with their entropy-coded data (restart markers included), are
/// copied as they are into `out` (at least `size` bytes). Returns the new length, or 0 when `data` is not a whole progressive JPEG to
/// rewrite this way: baseline, no end-of-image marker (cut short: read it whole, so that the
/// truncation is seen), bytes between segments, or a segment running past the end. Reads nothing
/// outside `data`.
static inline size_t pk_jpeg_dc_scans(const unsigned char *data, size_t size, unsigned char *out) {
    if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) return 0;
    size_t p = 2, o = 0;
    int progressive = -1;
    // Per frame component: its id, and whether libjpeg reads it with a 1x1 DCT at 1/8.
    int ids[4] = {-1, -1, -1, -1}, dc_only[4] = {0, 0, 0, 0}, count = 0;
    out[o++] = 0xFF;
    out[o++] = 0xD8;
    while (1) {
        if (p >= size || data[p] != 0xFF) return 0;
        while (p < size && data[p] == 0xFF) p++;  // fill bytes
        if (p >= size) return 0;
        unsigned char marker = data[p++];
        if (marker == 0xD9) {
            if (progressive != 1) return 0;
            out[o++] = 0xFF;
            out[o++] = 0xD9;
            return o;
        }
        if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) return 0;
        if (size - p < 2) return 0;
        size_t length = ((size_t)data[p] << 8) | data[p + 1];
        if (length < 2 || length > size - p) return 0;
        int frame_progressive = 0;
        if (pk_jpeg_is_frame(marker, &frame_progressive)) {
            if (progressive != -1 || !frame_progressive || length < 8) return 0;
            progressive = 1;
            count = data[p + 7];
            if (count < 1 || count > 4 || length < 8 + 3 * (size_t)count) return 0;
            int max_h = 1, max_v = 1;
            for (int c = 0; c < count; c++) {
                int h = data[p + 9 + 3 * c] >> 4, v = data[p + 9 + 3 * c] & 15;
                if (h < 1 || v < 1) return 0;
                if (h > max_h) max_h = h;
                if (v > max_v) max_v = v;
            }
            for (int c = 0; c < count; c++) {
                int h = data[p + 9 + 3 * c] >> 4, v = data[p + 9 + 3 * c] & 15, scaled = 1;
                while (scaled < 8 && (max_h % (h * scaled * 2)) == 0 && (max_v % (v * scaled * 2)) == 0) scaled *= 2;
                ids[c] = data[p + 8 + 3 * c];
                dc_only[c] = scaled == 1;
            }
        }
        if (marker != 0xDA) {
            out[o++] = 0xFF;
            out[o++] = marker;
            memcpy(out + o, data + p, length);
            o += length;
            p += length;
            continue;
        }
        // A scan: its header, then entropy-coded data up to the next marker that is not a
        // stuffed 0xFF00 or a restart marker.
        if (progressive != 1 || length < 3) return 0;
        size_t components = data[p + 2];
        if (length < 6 + 2 * components) return 0;
        // Ss: 0 for a DC scan. An AC scan (one component) goes when that component's DCT is 1x1.
        int keep = data[p + 3 + 2 * components] == 0;
        if (!keep) {
            int drop = 0;
            if (components == 1)
                for (int c = 0; c < count; c++)
                    if (ids[c] == data[p + 3]) drop = dc_only[c];
            keep = !drop;
        }
        size_t start = p + length, q = start;
        while (1) {
            const unsigned char *ff = (const unsigned char *)memchr(data + q, 0xFF, size - q);
            if (!ff) return 0;
            size_t r = (size_t)(ff - data);
            if (r + 1 >= size) return 0;
            unsigned char next = data[r + 1];
            if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) { q = r + 2; continue; }
            if (next == 0xFF) { q = r + 1; continue; }
            q = r;
            break;
        }
        if (keep) {
            out[o++] = 0xFF;
            out[o++] = 0xDA;
            memcpy(out + o, data + p, q - p);
            o += q - p;
        }
        p = q;
    }
}

/// Turns off block smoothing: estimating AC coefficients a progressive file has not sent yet.
/// For a stream whose AC scans were taken out on purpose (pk_jpeg_dc_scans), so that the pixels
/// are those of the whole file. Call before pk_jpeg_start.
static inline void pk_jpeg_no_smoothing(pk_jpeg_reader *reader) { reader->info.do_block_smoothing = FALSE; }

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

// MARK: Writing (Plugins/Formats/JPEG/JPEGWriter.swift)

/// One JPEG being written to memory; on the heap, so that what longjmp returns to is not a local.
/// Its output grows in a buffer of its own (libjpeg's jpeg_mem_dest leaves a freed pointer
/// behind when an error follows a growth).
typedef struct {
    struct jpeg_compress_struct info;
    struct jpeg_error_mgr errors;
    struct jpeg_destination_mgr destination;
    jmp_buf jump;
    int created;
    unsigned char *buffer;
    size_t capacity;
    unsigned char *row;
    char message[JMSG_LENGTH_MAX];
} pk_jpeg_writer;

static void pk_jpeg_start_output(j_compress_ptr info) {
    pk_jpeg_writer *writer = (pk_jpeg_writer *)info->client_data;
    writer->capacity = 64 << 10;
    writer->buffer = (unsigned char *)malloc(writer->capacity);
    if (!writer->buffer) ERREXIT1(info, JERR_OUT_OF_MEMORY, 10);
    writer->destination.next_output_byte = writer->buffer;
    writer->destination.free_in_buffer = writer->capacity;
}

static boolean pk_jpeg_grow_output(j_compress_ptr info) {
    pk_jpeg_writer *writer = (pk_jpeg_writer *)info->client_data;
    size_t used = writer->capacity;  // libjpeg asks for more only when the buffer is full
    unsigned char *grown = (unsigned char *)realloc(writer->buffer, writer->capacity * 2);
    if (!grown) ERREXIT1(info, JERR_OUT_OF_MEMORY, 10);
    writer->buffer = grown;
    writer->capacity *= 2;
    writer->destination.next_output_byte = grown + used;
    writer->destination.free_in_buffer = writer->capacity - used;
    return TRUE;
}

static void pk_jpeg_end_output(j_compress_ptr info) { (void)info; }

static void pk_jpeg_on_write_error(j_common_ptr info) {
    pk_jpeg_writer *writer = (pk_jpeg_writer *)info->client_data;
    (*info->err->format_message)(info, writer->message);
    longjmp(writer->jump, 1);
}

static void pk_jpeg_free_writer(pk_jpeg_writer *writer) {
    if (writer->created) jpeg_destroy_compress(&writer->info);
    free(writer->row);
    free(writer);
}

/// `width` x `height` 8-bit pixels of `stride` bytes each (RGB first), rows back to back, written
/// as a JPEG the way ImageMagick 6's writer writes them: `components` 3 (YCbCr with the
/// given sampling factors, `sampling` = h0 v0 h1 v1 h2 v2) or 1 (greyscale from the first byte of
/// each pixel, keeping the first sampling factor), libjpeg's default JFIF header, the accurate
/// integer DCT (libjpeg's default; ImageMagick is asked for it with `jpeg:dct-method=islow`, as it
/// picks the fast one up to quality 90 otherwise; a test checks the bytes are the same), `quality` with baseline tables,
/// optimised Huffman tables when `optimize`, libjpeg's simple progression when `progressive`.
/// Returns the JPEG (`*length` bytes, for the caller to free), or NULL with libjpeg's message in
/// `message` (JMSG_LENGTH_MAX bytes).
static inline unsigned char *pk_jpeg_write(const unsigned char *pixels, unsigned width, unsigned height, int stride,
                                           int components, int quality, const int *sampling, int optimize,
                                           int progressive, unsigned long *length, char *message) {
    pk_jpeg_writer *writer = (pk_jpeg_writer *)calloc(1, sizeof(pk_jpeg_writer));
    *length = 0;
    message[0] = 0;
    if (!writer) { strcpy(message, "out of memory"); return NULL; }
    writer->info.err = jpeg_std_error(&writer->errors);
    writer->errors.error_exit = pk_jpeg_on_write_error;
    writer->info.client_data = writer;
    if (setjmp(writer->jump)) {
        strncpy(message, writer->message, JMSG_LENGTH_MAX - 1);
        free(writer->buffer);
        pk_jpeg_free_writer(writer);
        return NULL;
    }
    jpeg_create_compress(&writer->info);
    writer->created = 1;
    writer->destination.init_destination = pk_jpeg_start_output;
    writer->destination.empty_output_buffer = pk_jpeg_grow_output;
    writer->destination.term_destination = pk_jpeg_end_output;
    writer->info.dest = &writer->destination;
    writer->info.image_width = width;
    writer->info.image_height = height;
    writer->info.input_components = components;
    writer->info.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&writer->info);
    writer->info.dct_method = JDCT_ISLOW;
    writer->info.optimize_coding = optimize ? TRUE : FALSE;
    if (progressive) jpeg_simple_progression(&writer->info);
    jpeg_set_quality(&writer->info, quality, TRUE);
    for (int i = 0; i < components; i++) {
        writer->info.comp_info[i].h_samp_factor = sampling[2 * i];
        writer->info.comp_info[i].v_samp_factor = sampling[2 * i + 1];
    }
    jpeg_start_compress(&writer->info, TRUE);
    size_t row_bytes = (size_t)width * (size_t)stride;
    if (components != stride) {
        writer->row = (unsigned char *)malloc((size_t)width * (size_t)components);
        if (!writer->row) ERREXIT(&writer->info, JERR_OUT_OF_MEMORY);
    }
    while (writer->info.next_scanline < height) {
        const unsigned char *source = pixels + (size_t)writer->info.next_scanline * row_bytes;
        JSAMPROW row = (JSAMPROW)source;
        if (writer->row) {
            for (unsigned x = 0; x < width; x++)
                for (int c = 0; c < components; c++) writer->row[(size_t)x * components + c] = source[(size_t)x * stride + c];
            row = writer->row;
        }
        jpeg_write_scanlines(&writer->info, &row, 1);
    }
    jpeg_finish_compress(&writer->info);
    unsigned char *out = writer->buffer;
    *length = writer->capacity - writer->destination.free_in_buffer;
    writer->buffer = NULL;
    pk_jpeg_free_writer(writer);
    return out;
}
#endif
