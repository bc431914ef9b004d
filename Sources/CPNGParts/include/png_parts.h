#ifndef PK_PNG_PARTS_H
#define PK_PNG_PARTS_H

#include <stddef.h>
#include <stdint.h>

/// A non-interlaced 8-bit RGB or RGBA PNG whose one zlib stream is inflated in parts side by side
/// (see png_parts.c): the rows handed out are the unfiltered rows libpng gives for the same file,
/// byte for byte, in order.
///
/// Use: `pk_pngp_open`; then in steps until finished: `n = pk_pngp_tasks(job)`, `pk_pngp_task(job,
/// i)` for every i below n, from any threads, each once; `pk_pngp_settle(job)`. Then
/// `pk_pngp_free`. Rows reach `row` from inside a task, one task at a time, in order.
typedef struct pk_pngp pk_pngp;

/// Receives one unfiltered row (width x channels bytes), valid during the call.
typedef void (*pk_pngp_row_fn)(void *context, const unsigned char *row);

/// A job for the PNG in `data` (which must stay in place until `pk_pngp_free`), or when `data` is
/// NULL the file open as `fd` (`size` bytes; read with pread, from any thread). NULL when the file
/// is one to leave to libpng: not 8-bit RGB or RGBA, interlaced, with a tRNS chunk, a zlib window
/// other than 32 KB or a preset dictionary, image data running past the end of the file, a chunk
/// before the image data that is malformed, or out of memory. `parts` (1-16) is how many pieces of
/// about `part_bytes` compressed bytes each step inflates side by side.
pk_pngp *pk_pngp_open(const unsigned char *data, int fd, size_t size, int parts, size_t part_bytes,
                      pk_pngp_row_fn row, void *context);

/// The image's width, height and channels (3 or 4).
void pk_pngp_size(const pk_pngp *job, uint32_t *width, uint32_t *height, int *channels);

/// The number of tasks of the next step: 0 when there is none left.
int pk_pngp_tasks(const pk_pngp *job);

/// Runs task `i` of the step. Tasks of one step are independent of each other.
void pk_pngp_task(pk_pngp *job, int i);

/// Ends a step, after all its tasks. Returns 1 when there are more steps, 2 when every row has
/// been handed out and the image data checked to its end, 0 when this reader gives up: the file
/// is not one it finishes exactly as libpng would (corrupt compressed data, a CRC mismatch, too
/// much or too little data, a bad filter byte). Read it with libpng then, which says what is
/// wrong; the rows handed out so far are to be thrown away.
int pk_pngp_settle(pk_pngp *job);

/// Compressed bytes in parts whose guessed start was wrong and which were inflated again in
/// order (for tests and measurements).
uint64_t pk_pngp_redone(const pk_pngp *job);

void pk_pngp_free(pk_pngp *job);

#endif
