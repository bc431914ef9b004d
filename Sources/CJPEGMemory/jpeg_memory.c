// libjpeg-turbo asks its "system-dependent" memory functions for every large block it needs
// (jmemnobs.c: jpeg_get_large / jpeg_free_large, which call malloc and free). Debian's
// libjpeg.so.62 exports both and calls them through its PLT, so these definitions, in the
// executable, replace them for every libjpeg user in the process (ours and ImageMagick's coder).
//
// Why: a progressive JPEG keeps the coefficients of the whole image until its last scan, 2 bytes
// per sample, one block per component (3 x 29.5 MB for 5120x2880 at 4:4:4). malloc gives blocks
// that size fresh pages from mmap each time, and the kernel faulting in and zeroing them cost
// about a fifth of the decode (libjpeg zeroes the blocks again itself). Freed blocks are kept
// instead and handed out again.
//
// Bounds: a block is kept only if it is at least MIN_KEPT and at most MAX_KEPT bytes, and at most
// four blocks per core (a CMYK file has four components). A request no kept block can hold first
// frees the kept blocks (all smaller), so what is in memory stays within one set of blocks per
// decode running at once, each as large as the largest recently decoded: the peak a process
// decoding that many such files at once has anyway. If a libjpeg bound its own functions (static, or linked -Bsymbolic), these go unused and
// nothing changes but the speed (a test checks that the pool is used).

#include "CJPEGMemory.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

struct jpeg_common_struct;

#define MIN_KEPT ((size_t)1 << 20)
#define MAX_KEPT ((size_t)256 << 20)
#define MAX_BLOCKS 32

// Each block starts with its size, 16 bytes so that what follows keeps malloc's alignment.
typedef struct {
    size_t size;
    size_t keepable;
} header;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static header *kept[MAX_BLOCKS];
static pk_jpeg_pool_stats stats;

static int max_blocks(void) {
    static int cached;
    if (cached == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cached = cores < 1 ? 4 : cores > MAX_BLOCKS / 4 ? MAX_BLOCKS : 4 * (int)cores;
    }
    return cached;
}

void *jpeg_get_large(struct jpeg_common_struct *cinfo, size_t size) {
    (void)cinfo;
    if (size > SIZE_MAX - sizeof(header)) return NULL;
    int keepable = size >= MIN_KEPT && size <= MAX_KEPT;
    if (keepable) {
        header *found = NULL, *unusable[MAX_BLOCKS];
        int dropped = 0;
        pthread_mutex_lock(&lock);
        stats.requested++;
        int best = -1;
        for (int i = 0; i < MAX_BLOCKS; i++) {
            if (kept[i] && kept[i]->size >= size && (best < 0 || kept[i]->size < kept[best]->size)) best = i;
        }
        if (best >= 0) {
            found = kept[best];
            kept[best] = NULL;
            stats.reused++;
        } else {
            // None is large enough: free them rather than hold them beside a new block.
            for (int i = 0; i < MAX_BLOCKS; i++) {
                if (kept[i]) {
                    unusable[dropped++] = kept[i];
                    kept[i] = NULL;
                }
            }
        }
        if (found) {
            stats.kept--;
            stats.kept_bytes -= found->size;
        } else {
            stats.kept = 0;
            stats.kept_bytes = 0;
        }
        pthread_mutex_unlock(&lock);
        for (int i = 0; i < dropped; i++) free(unusable[i]);
        if (found) return found + 1;
    }
    header *block = malloc(sizeof(header) + size);
    if (!block) return NULL;
    block->size = size;
    block->keepable = (size_t)keepable;
    return block + 1;
}

void jpeg_free_large(struct jpeg_common_struct *cinfo, void *object, size_t size) {
    (void)cinfo;
    (void)size;  // the block's own size is in its header (a kept block may be larger than asked)
    if (!object) return;
    header *block = (header *)object - 1;
    if (block->keepable) {
        pthread_mutex_lock(&lock);
        int slots = max_blocks(), free_slot = -1, smallest = -1;
        for (int i = 0; i < slots; i++) {
            if (!kept[i]) {
                if (free_slot < 0) free_slot = i;
            } else if (smallest < 0 || kept[i]->size < kept[smallest]->size) {
                smallest = i;
            }
        }
        header *evicted = NULL;
        if (free_slot < 0 && kept[smallest]->size < block->size) {
            evicted = kept[smallest];
            stats.kept--;
            stats.kept_bytes -= evicted->size;
            free_slot = smallest;
        }
        if (free_slot >= 0) {
            kept[free_slot] = block;
            stats.kept++;
            stats.kept_bytes += block->size;
            block = NULL;
        }
        pthread_mutex_unlock(&lock);
        free(evicted);
    }
    free(block);
}

pk_jpeg_pool_stats pk_jpeg_pool_read_stats(void) {
    pthread_mutex_lock(&lock);
    pk_jpeg_pool_stats now = stats;
    pthread_mutex_unlock(&lock);
    return now;
}

void pk_jpeg_pool_trim(void) {
    header *all[MAX_BLOCKS];
    int count = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_BLOCKS; i++) {
        if (kept[i]) all[count++] = kept[i];
        kept[i] = NULL;
    }
    stats.kept = 0;
    stats.kept_bytes = 0;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < count; i++) free(all[i]);
}
