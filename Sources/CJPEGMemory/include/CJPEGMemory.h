#ifndef PK_JPEG_MEMORY_H
#define PK_JPEG_MEMORY_H

#include <stddef.h>

/// libjpeg's large blocks (a progressive JPEG's coefficients for the whole image, 88 MB for a
/// 5120x2880 4:4:4 photo) come from a small pool of blocks already in memory instead of fresh
/// pages: see jpeg_memory.c. These tell what the pool did, for tests and metrics.
typedef struct {
    /// Large blocks asked for, and how many of them a kept block answered.
    unsigned long requested, reused;
    /// Blocks kept now, and their bytes.
    unsigned long kept, kept_bytes;
} pk_jpeg_pool_stats;

pk_jpeg_pool_stats pk_jpeg_pool_read_stats(void);

/// Frees every kept block.
void pk_jpeg_pool_trim(void);

#endif
