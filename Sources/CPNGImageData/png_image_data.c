// A PNG's image data compressed whole by libdeflate instead of streamed through zlib by libpng
// (writing), and inflated whole by libdeflate for libpng to read as stored blocks (reading).
//
// A PNG answer's time after its decode was mostly zlib's deflate. At the same level libdeflate
// writes the 512 px thumbnails of the bench corpora's PNGs in half the time, 0.8% larger (medians,
// filtering included; bench/png-deflate.sh, bench/NOTEBOOK.md#png-libdeflate). libdeflate takes
// the whole input at once, so the caller uses this for images whose rows fit in memory twice and
// leaves larger ones to libpng.
//
// The filters are the PNG specification's; the choice among several is libpng's heuristic.
#include "png_image_data.h"

#include <libdeflate.h>
#include <stdlib.h>
#include <string.h>

enum { NONE = 0x08, SUB = 0x10, UP = 0x20, AVG = 0x40, PAETH = 0x80 };

static inline unsigned char paeth(int a, int b, int c) {
    int p = a + b - c;
    int pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    if (pa <= pb && pa <= pc) return (unsigned char)a;
    return (unsigned char)(pb <= pc ? b : c);
}

/// Row `row` filtered by `type` (0-4) into `out` (n bytes); `prior` is the row above (zeros for
/// the first). Returns libpng's measure of how well it may compress: the sum of the bytes taken
/// as signed, absolute.
static size_t filter_row(int type, const unsigned char *row, const unsigned char *prior, size_t n, size_t bpp,
                         unsigned char *out) {
    size_t i;
    switch (type) {
    case 0:
        memcpy(out, row, n);
        break;
    case 1:
        for (i = 0; i < bpp && i < n; i++) out[i] = row[i];
        for (; i < n; i++) out[i] = (unsigned char)(row[i] - row[i - bpp]);
        break;
    case 2:
        for (i = 0; i < n; i++) out[i] = (unsigned char)(row[i] - prior[i]);
        break;
    case 3:
        for (i = 0; i < bpp && i < n; i++) out[i] = (unsigned char)(row[i] - (prior[i] >> 1));
        for (; i < n; i++) out[i] = (unsigned char)(row[i] - ((row[i - bpp] + prior[i]) >> 1));
        break;
    default:
        for (i = 0; i < bpp && i < n; i++) out[i] = (unsigned char)(row[i] - prior[i]);  // Paeth(0, b, 0) = b
        for (; i < n; i++) out[i] = (unsigned char)(row[i] - paeth(row[i - bpp], prior[i], prior[i - bpp]));
        break;
    }
    size_t sum = 0;
    for (i = 0; i < n; i++) sum += out[i] < 128 ? out[i] : 256 - out[i];
    return sum;
}

unsigned char *pk_png_image_data(const unsigned char *pixels, uint32_t width, uint32_t height, int channels,
                                 int level, int filters, size_t *length) {
    *length = 0;
    if (!pixels || width == 0 || height == 0 || channels < 1 || channels > 4 || level < 0 || level > 9) return NULL;
    if (!(filters & (NONE | SUB | UP | AVG | PAETH))) return NULL;
    size_t bpp = (size_t)channels, n = (size_t)width * bpp, line = n + 1;
    if (n / bpp != width || (size_t)height > SIZE_MAX / line) return NULL;
    size_t total = line * height;
    unsigned char *filtered = (unsigned char *)malloc(total);
    unsigned char *zeros = (unsigned char *)calloc(1, n);
    unsigned char *scratch = (unsigned char *)malloc(n);
    struct libdeflate_compressor *compressor = libdeflate_alloc_compressor(level);
    unsigned char *out = NULL;
    if (filtered && zeros && scratch && compressor) {
        int types[5], count = 0;
        for (int type = 0; type < 5; type++) if (filters & (NONE << type)) types[count++] = type;
        for (uint32_t y = 0; y < height; y++) {
            const unsigned char *row = pixels + (size_t)y * n, *prior = y ? row - n : zeros;
            unsigned char *target = filtered + (size_t)y * line;
            if (count == 1) {
                target[0] = (unsigned char)types[0];
                filter_row(types[0], row, prior, n, bpp, target + 1);
                continue;
            }
            // The first candidate goes straight to the row; a better one later replaces it.
            size_t best = filter_row(types[0], row, prior, n, bpp, target + 1);
            target[0] = (unsigned char)types[0];
            for (int k = 1; k < count; k++) {
                size_t sum = filter_row(types[k], row, prior, n, bpp, scratch);
                if (sum < best) {
                    best = sum;
                    target[0] = (unsigned char)types[k];
                    memcpy(target + 1, scratch, n);
                }
            }
        }
        size_t bound = libdeflate_zlib_compress_bound(compressor, total);
        out = (unsigned char *)malloc(bound);
        if (out) {
            *length = libdeflate_zlib_compress(compressor, filtered, total, out, bound);
            if (*length == 0) {
                free(out);
                out = NULL;
            }
        }
    }
    if (compressor) libdeflate_free_compressor(compressor);
    free(scratch);
    free(zeros);
    free(filtered);
    return out;
}

// ---- Reading: the image data inflated by libdeflate, handed to libpng stored ----
//
// libpng inflates a PNG's image data through zlib as it reads the rows, 28 ms of palette.png's
// 43 (3840x2160); libdeflate inflates the same stream in 11 ms but only whole, into a buffer of
// the exact size. libpng has no way to take rows already inflated, so the copy gives it the
// inflated bytes as stored (uncompressed) deflate blocks, which zlib passes through as a copy, and
// libpng keeps doing everything else (unfiltering, palettes, transparency, 16 bits, damage).

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

size_t pk_png_inflated_size(uint32_t width, uint32_t height, int bit_depth, int color_type) {
    int channels = color_type == 0 ? 1 : color_type == 2 ? 3 : color_type == 3 ? 1 : color_type == 4 ? 2 : color_type == 6 ? 4 : 0;
    if (!channels || bit_depth < 1 || bit_depth > 16) return 0;
    size_t row = ((size_t)width * (size_t)channels * (size_t)bit_depth + 7) / 8;
    if (height && row + 1 > SIZE_MAX / height) return 0;
    return (row + 1) * (size_t)height;
}

/// Largest stored block.
#define STORED 65535u

unsigned char *pk_png_inflated_copy(const unsigned char *data, size_t size, size_t limit, size_t *length) {
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    *length = 0;
    if (!data || size < 8 + 25 || memcmp(data, signature, 8) != 0 || memcmp(data + 12, "IHDR", 4) != 0 || be32(data + 8) != 13) return NULL;
    const unsigned char *ihdr = data + 16;
    if (ihdr[12] != 0) return NULL;  // interlaced
    size_t expected = pk_png_inflated_size(be32(ihdr), be32(ihdr + 4), ihdr[8], ihdr[9]);
    if (expected == 0 || expected > limit) return NULL;
    // The IDAT chunks: consecutive, each CRC checked, their data joined.
    size_t first = 0, end = 0, compressed = 0, at = 8;
    while (at + 12 <= size) {
        size_t chunk = be32(data + at);
        if (chunk > size - at - 12) return NULL;
        const unsigned char *type = data + at + 4;
        if (memcmp(type, "IDAT", 4) == 0) {
            if (first && end != at) return NULL;  // IDATs apart
            if (!first) first = at;
            if (libdeflate_crc32(0, type, chunk + 4) != be32(data + at + 8 + chunk)) return NULL;
            compressed += chunk;
            end = at + 12 + chunk;
        }
        at += 12 + chunk;
        if (memcmp(type, "IEND", 4) == 0) break;
    }
    if (!first) return NULL;
    unsigned char *stream = (unsigned char *)malloc(compressed ? compressed : 1);
    if (!stream) return NULL;
    size_t joined = 0;
    for (at = first; at < end; at += 12 + be32(data + at)) {
        memcpy(stream + joined, data + at + 8, be32(data + at));
        joined += be32(data + at);
    }
    // The copy: the chunks before the image data, then one IDAT chunk a stored block (the first
    // also holding the zlib header, the last the Adler-32), then the chunks after. The inflated
    // bytes are put far enough in that each block, moved forward to its place in order, never
    // overwrites bytes not yet moved.
    size_t blocks = (expected + STORED - 1) / STORED;
    size_t before = first, after = size - end;
    size_t image = blocks * (12 + 5) + 2 + 4 + expected;
    size_t start = before + 2 + blocks * 17 + 8;
    size_t capacity = start + expected > before + image + after ? start + expected : before + image + after;
    unsigned char *copy = (unsigned char *)malloc(capacity);
    struct libdeflate_decompressor *decompressor = libdeflate_alloc_decompressor();
    size_t used = 0;
    enum libdeflate_result result = LIBDEFLATE_BAD_DATA;
    if (copy && decompressor) result = libdeflate_zlib_decompress_ex(decompressor, stream, compressed, copy + start, expected, &used, NULL);
    if (decompressor) libdeflate_free_decompressor(decompressor);
    free(stream);
    if (result != LIBDEFLATE_SUCCESS || used != compressed) {  // damaged, short, long, or trailing bytes: libpng's to report
        free(copy);
        return NULL;
    }
    uint32_t adler = libdeflate_adler32(1, copy + start, expected);
    memcpy(copy, data, before);
    size_t out = before;
    for (size_t block = 0; block < blocks; block++) {
        size_t bytes = block + 1 < blocks ? STORED : expected - block * STORED;
        size_t content = 5 + bytes + (block == 0 ? 2 : 0) + (block + 1 == blocks ? 4 : 0);
        unsigned char *chunk = copy + out, *p = chunk + 8;
        put_be32(chunk, (uint32_t)content);
        memcpy(chunk + 4, "IDAT", 4);
        if (block == 0) {
            *p++ = 0x78;  // deflate, 32 KB window
            *p++ = 0x01;  // no dictionary, fastest (header check: 0x7801 % 31 == 0)
        }
        memmove(p + 5, copy + start + block * STORED, bytes);
        p[0] = block + 1 == blocks ? 1 : 0;  // last block; stored
        p[1] = (unsigned char)(bytes & 0xff);
        p[2] = (unsigned char)(bytes >> 8);
        p[3] = (unsigned char)(~bytes & 0xff);
        p[4] = (unsigned char)((~bytes >> 8) & 0xff);
        p += 5 + bytes;
        if (block + 1 == blocks) {
            put_be32(p, adler);
            p += 4;
        }
        put_be32(p, libdeflate_crc32(0, chunk + 4, content + 4));
        out += 12 + content;
    }
    memcpy(copy + out, data + end, after);
    *length = out + after;
    return copy;
}
