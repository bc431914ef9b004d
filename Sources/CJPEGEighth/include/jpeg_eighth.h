#ifndef PK_JPEG_EIGHTH_H
#define PK_JPEG_EIGHTH_H

#include <stddef.h>

/// A baseline JPEG read at 1/8 scale with its entropy-coded data cut into parts decoded side by
/// side (see jpeg_eighth.c): the pixels libjpeg-turbo 2.1 gives for the same file at
/// scale_denom 8 with JDCT_ISLOW and RGB output, byte for byte.
///
/// Use: `pk_jpeg8_prepare` on a decompressor whose header has been read (jpeg_read_header, from a
/// memory source, nothing else called since); `pk_jpeg8_unstuff(job, i)` for every range, from
/// any threads, each once; `pk_jpeg8_split`; `pk_jpeg8_part(job, i)` for every part, from any
/// threads, each part once; `pk_jpeg8_join`; `pk_jpeg8_band(job, i, ...)` for every band, from any
/// threads; `pk_jpeg8_free`. The decompressor and the data it reads must stay in place until
/// `pk_jpeg8_free`.
typedef struct pk_jpeg8_job pk_jpeg8_job;

/// A job for `info` (a `struct jpeg_decompress_struct *`) in about `parts` parts, or NULL when this
/// file is one to leave to libjpeg: progressive or arithmetic-coded, more than one scan, a colour
/// space other than YCbCr, RGB or greyscale, sampling factors whose 1/8 read needs more than a
/// 2x2 inverse DCT or upsampling by other than whole factors, a missing or malformed Huffman or
/// quantisation table, out of memory. `*width` and `*height` are the output size.
pk_jpeg8_job *pk_jpeg8_prepare(void *info, int parts, int *width, int *height);

/// The number of ranges of the entropy-coded data whose byte stuffing is removed side by side.
int pk_jpeg8_ranges(const pk_jpeg8_job *job);

/// Removes the stuffing and restart markers of range `range`. Ranges are independent.
void pk_jpeg8_unstuff(pk_jpeg8_job *job, int range);

/// After every range: joins them and cuts the data into parts. Returns 1, or 0 when the file is
/// one to leave to libjpeg: entropy-coded data not followed by the end-of-image marker, another
/// marker in it, restart markers out of order, out of memory.
int pk_jpeg8_split(pk_jpeg8_job *job);

/// The number of parts of `job`.
int pk_jpeg8_parts(const pk_jpeg8_job *job);

/// Decodes part `part` of `job`. Parts are independent of each other.
void pk_jpeg8_part(pk_jpeg8_job *job, int part);

/// Joins the parts. Returns 1, or 0 when the file is not one this reader finishes exactly as
/// libjpeg would (a corrupt Huffman code, data cut short or left over, restart markers out of
/// order): read it with libjpeg then, which says what is wrong.
int pk_jpeg8_join(pk_jpeg8_job *job);

/// After a join that returned 1: the number of bands of output rows.
int pk_jpeg8_bands(const pk_jpeg8_job *job);

/// Writes band `band`'s RGB pixels into `rgb` (the whole image's, width x height x 3 bytes, rows
/// `row_bytes` apart). Bands write disjoint rows and read only the joined parts.
void pk_jpeg8_band(const pk_jpeg8_job *job, int band, unsigned char *rgb, size_t row_bytes);

void pk_jpeg8_free(pk_jpeg8_job *job);

#endif
