#ifndef PK_PNG_IMAGE_DATA_H
#define PK_PNG_IMAGE_DATA_H

#include <stddef.h>
#include <stdint.h>

/// The image data of a PNG being written (see png_image_data.c): `height` rows of `width` 8-bit
/// pixels with `channels` samples each (1-4), rows back to back in `pixels`, each row filtered
/// and the whole compressed as one zlib stream by libdeflate at `level` (0-9: 0 stores, 1 is
/// fastest, 9 smallest). `filters` is libpng's mask: PNG_FILTER_NONE (0x08), SUB (0x10), UP
/// (0x20), AVG (0x40), PAETH (0x80); one bit is that filter on every row, several are chosen
/// among row by row as libpng does (the smallest sum of the filtered bytes taken as signed).
///
/// Returns the zlib stream (malloc'ed: free it), its length in `*length`; NULL when out of memory
/// or an argument is out of range.
unsigned char *pk_png_image_data(const unsigned char *pixels, uint32_t width, uint32_t height, int channels,
                                 int level, int filters, size_t *length);

/// A copy of the PNG in `data` (`size` bytes) whose image data is inflated by libdeflate and
/// stored again uncompressed (deflate's stored blocks), for libpng to read at the speed of a
/// copy: the same chunks in the same order otherwise, every CRC valid, so libpng gives the same
/// rows and reports the same damage outside the image data. NULL when the file is left to libpng
/// as it is: not a PNG, interlaced, its image data inflated would take more than `limit` bytes,
/// an IDAT chunk's CRC does not match, the zlib stream is damaged or not exactly the image's size,
/// IDAT chunks not consecutive, the file cut short, or out of memory. Returns the copy
/// (malloc'ed: free it) and its length in `*length`.
unsigned char *pk_png_inflated_copy(const unsigned char *data, size_t size, size_t limit, size_t *length);

/// The bytes the image data of a `width` x `height` PNG of `bit_depth` and `color_type` takes
/// inflated (a filter byte a row), 0 for an unknown colour type.
size_t pk_png_inflated_size(uint32_t width, uint32_t height, int bit_depth, int color_type);

#endif
