// A PNG's image data compressed whole by libdeflate instead of streamed through zlib by libpng.
//
// A PNG answer's time after its decode was mostly zlib's deflate. At the same level libdeflate
// writes the 512 px thumbnails of the bench corpora's PNGs in half the time, 0.8% larger (medians,
// filtering included; bench/png-deflate.sh, docs/PERFORMANCE.md#png-libdeflate). libdeflate takes
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
