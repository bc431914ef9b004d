// A baseline JPEG at 1/8 scale, its Huffman decoding shared between threads.
//
// At 1/8 libjpeg keeps one number of most blocks (the DC coefficient) and four of a 4:2:0 file's
// chroma blocks, but it must still decode every coefficient of every block to find where the next
// one starts: one sequential pass over the entropy-coded data, most of the time of a large file.
// Without restart markers nothing says where a block starts except the decoding before it.
//
// This reader cuts the data into parts at byte boundaries. Part 0 starts where the scan does. Any
// other part starts decoding at its first bit as if an MCU began there, writing what it decodes
// (the DC coefficients relative to an unknown start, the values a 2x2 inverse DCT adds) and, for
// its first MCUs, where each began. A Huffman code is self-synchronising: a decoding started at a
// wrong bit soon falls on the boundaries of the true one, and from the first MCU boundary the two
// share they decode the same. After the parts, one exact decoding walks the joins in order: it
// continues from the end of the part before until it reaches an MCU boundary the next part also
// began an MCU at, and then knows that part's MCU number and DC offsets; what the part decoded
// before that point is dropped. A part that never meets the exact decoding is decoded again by it.
// With restart markers the parts start at markers and nothing is guessed.
//
// The pixels are libjpeg-turbo 2.1's for scale 1/8, JDCT_ISLOW, RGB output, byte for byte: the
// 1x1 and 2x2 inverse DCTs of jidctred.c (2x2 when jdmaster.c scales a component's DCT up rather
// than upsampling it), plain replication for the upsampling left (jdsample.c uses no fancy
// upsampling at 1/8), and jdcolor.c's YCbCr tables. Anything this reader would finish differently
// from libjpeg (a bad Huffman code, data cut short or left over, misordered restart markers) makes
// it give up, and the caller reads the file with libjpeg, which reports what is wrong.
#include "jpeg_eighth.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

#define MAX_PARTS 16
#define MAX_BLOCKS 10
// MCU starts a guessing part remembers (where the exact decoding can meet it).
#define MAX_CHECKPOINTS 65536
// Zero bytes after the copied data: the bit reader loads 8 bytes at a time and checks for the end
// before each block (decode_mcu), and a block is at most 27 + 63 * 31 bits (with tables no encoder
// writes: a code of 16 bits for 15 value bits).
#define PAD 512
#define LOOKAHEAD 9
#define SKIP_BITS 11

typedef struct {
    // (length << 8) | symbol for codes of at most LOOKAHEAD bits, 0 for longer ones.
    uint16_t look[1 << LOOKAHEAD];
    int32_t maxcode[18];
    int32_t valoffset[18];
    uint8_t huffval[256];
    // For AC coefficients only skipped: (bits << 8) | run for a code and its value bits together
    // within SKIP_BITS (run 0: end of block; 16: a run of 16 zeros), 0 when longer.
    uint16_t skip[1 << SKIP_BITS];
} htable;

typedef struct {
    uint64_t bit;
    int32_t pred[3];
} checkpoint;

typedef struct {
    uint64_t start_bit, stop_bit;
    // Restart markers: the first interval and the one after the last.
    size_t first_interval, end_interval;
    int32_t *records;
    size_t count, capacity;
    checkpoint *checkpoints;
    size_t checkpoint_count;
    // The MCU boundary where the part's decoding stopped (before the MCU it could not decode), and
    // its DC predictions there (relative to its start).
    uint64_t end_bit;
    int32_t end_pred[3];
    // Where its last MCUs began: recent[n % 64] for MCU n (n = count included).
    uint64_t recent[64];
    // 0: stopped at its end; 1: ran into the end of the data or an undecodable code; -1: out of memory.
    int status;
} part_t;

typedef struct {
    const int32_t *records;
    size_t first, count;  // records first ..< first + count
    size_t mcu;           // the MCU number of records[first]
    int32_t offset[3];    // added to each component's DC
} segment;

// A range of the entropy-coded source, with the stuffing removed.
typedef struct {
    size_t begin, end;  // source bytes; the last byte of a range other than the last is not 0xFF
    size_t out;         // bytes written at data + begin
    int status;         // 0 fine; 1 a marker libjpeg would read otherwise, or no end of image
    int eoi;            // the end-of-image marker ends this range's data
    size_t *restarts;   // output offsets (from the range's start) of restart markers, and their numbers
    uint8_t *markers;
    size_t restart_count, restart_capacity;
} range_t;

struct pk_jpeg8_job {
    int comps, blocks;
    uint8_t block_comp[MAX_BLOCKS], block_x[MAX_BLOCKS], block_y[MAX_BLOCKS];
    int record_offset[MAX_BLOCKS];
    int record_size;  // int32s per MCU
    int h[3], v[3], ssize[3], h_expand[3], v_expand[3];
    size_t comp_w[3], comp_h[3];
    int quant[3][64];
    htable dc[3], ac[3];
    int color;  // 0 grey, 1 YCbCr, 2 RGB
    size_t mcus_per_row, mcu_rows, total;
    unsigned restart_interval;
    int width, height;
    uint8_t *data;  // entropy-coded data without stuffing and markers, then PAD zero bytes
    size_t size;
    // The stuffing is removed in ranges of the source side by side (pk_jpeg8_unstuff), each
    // written where its source starts, then moved together (pk_jpeg8_split).
    const struct jpeg_decompress_struct *info;
    int parts_wanted;
    const uint8_t *src;
    size_t left;
    int ranges;
    range_t range[MAX_PARTS];
    size_t *restarts;  // byte offset in `data` of each restart interval
    size_t restart_count;
    int parts;
    part_t part[MAX_PARTS];
    // After the join: where each MCU's blocks are, the component planes at 1/8, the colour tables.
    segment segments[2 * MAX_PARTS + 1];
    int segment_count;
    part_t bridge;
    uint8_t *planes[3];
    uint32_t *cols;
    int cr_r[256], cb_b[256];
    int64_t cr_g[256], cb_g[256];
    // jdmaster.c's range limit as the inverse DCTs index it: x & 1023, read as a signed 10-bit
    // number, plus 128, clamped.
    uint8_t limit[1024];
    int bands;
};

static const int natural_order[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    // As libjpeg: a corrupt run past the end writes the last coefficient.
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

// ---- Huffman tables (jdhuff.c's jpeg_make_d_derived_tbl) ----

static int build_table(const JHUFF_TBL *table, int dc, htable *out) {
    if (!table) return 0;
    char size[257];
    unsigned int code_of[257];
    int p = 0;
    for (int l = 1; l <= 16; l++) {
        int i = table->bits[l];
        if (p + i > 256) return 0;
        while (i--) size[p++] = (char)l;
    }
    size[p] = 0;
    int symbols = p;
    unsigned int code = 0;
    int si = size[0];
    p = 0;
    while (size[p]) {
        while (size[p] == si) code_of[p++] = code++;
        if ((long)code >= (1L << si)) return 0;
        code <<= 1;
        si++;
    }
    p = 0;
    for (int l = 1; l <= 16; l++) {
        if (table->bits[l]) {
            out->valoffset[l] = p - (int32_t)code_of[p];
            p += table->bits[l];
            out->maxcode[l] = (int32_t)code_of[p - 1];
        } else {
            out->maxcode[l] = -1;
        }
    }
    out->valoffset[17] = 0;
    out->maxcode[17] = 0xFFFFF;
    memcpy(out->huffval, table->huffval, 256);
    memset(out->look, 0, sizeof out->look);
    p = 0;
    for (int l = 1; l <= LOOKAHEAD; l++) {
        for (int i = 1; i <= table->bits[l]; i++, p++) {
            int first = (int)(code_of[p] << (LOOKAHEAD - l));
            for (int k = 0; k < (1 << (LOOKAHEAD - l)); k++)
                out->look[first + k] = (uint16_t)((l << 8) | table->huffval[p]);
        }
    }
    memset(out->skip, 0, sizeof out->skip);
    p = 0;
    for (int l = 1; l <= SKIP_BITS; l++) {
        for (int i = 1; i <= table->bits[l]; i++, p++) {
            int sym = table->huffval[p], r = sym >> 4, size = sym & 15, bits, run;
            if (size) {
                bits = l + size;
                run = r + 1;
            } else {
                bits = l;
                run = r == 15 ? 16 : 0;
            }
            if (bits > SKIP_BITS) continue;
            // Every value of the size bits after the code: the entry depends only on the code.
            int first = (int)(code_of[p] << (SKIP_BITS - l));
            for (int k = 0; k < (1 << (SKIP_BITS - l)); k++) out->skip[first + k] = (uint16_t)((bits << 8) | run);
        }
    }
    if (dc)
        for (int i = 0; i < symbols; i++)
            if (table->huffval[i] > 15) return 0;
    return 1;
}

// ---- Bits ----

typedef struct {
    const uint8_t *start, *p;
    uint64_t buf;  // the next bits, from the top
    int bits;
} bitreader;

static inline uint64_t load_be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

static inline void refill(bitreader *b) {
    b->buf |= load_be64(b->p) >> b->bits;
    b->p += (63 - b->bits) >> 3;
    b->bits |= 56;
}

static inline uint64_t position(const bitreader *b) { return (uint64_t)(b->p - b->start) * 8 - (uint64_t)b->bits; }

static inline void seek(bitreader *b, const uint8_t *start, uint64_t bit) {
    b->start = start;
    b->p = start + bit / 8;
    b->buf = 0;
    b->bits = 0;
    refill(b);
    b->buf <<= bit % 8;
    b->bits -= (int)(bit % 8);
}

static inline int extend(uint32_t value, int s) {
    return (int)value + ((int)(value - (1u << (s - 1))) >> 31 & (int)((~0u << s) + 1));
}

static inline unsigned take(bitreader *b, int n) {
    unsigned v = (unsigned)(b->buf >> (64 - n));
    b->buf <<= n;
    b->bits -= n;
    return v;
}

// The next symbol, or -1 for a code no table entry has. Needs 16 bits in the buffer.
static inline int decode_symbol(bitreader *b, const htable *t) {
    unsigned e = t->look[b->buf >> (64 - LOOKAHEAD)];
    if (e) {
        int l = (int)(e >> 8);
        b->buf <<= l;
        b->bits -= l;
        return (int)(e & 0xFF);
    }
    int l = LOOKAHEAD + 1;
    int32_t code = (int32_t)(b->buf >> (64 - l));
    while (l <= 16 && code > t->maxcode[l]) {
        l++;
        code = (int32_t)(b->buf >> (64 - l));
    }
    if (l > 16) return -1;
    b->buf <<= l;
    b->bits -= l;
    return t->huffval[(code + t->valoffset[l]) & 0xFF];
}

// ---- Blocks ----

#define CONST_BITS 13
#define PASS1_BITS 2
#define FIX_0_720959822 ((int64_t)5906)
#define FIX_0_850430095 ((int64_t)6967)
#define FIX_1_272758580 ((int64_t)10426)
#define FIX_3_624509785 ((int64_t)29692)
#define DESCALE(x, n) (((x) + ((int64_t)1 << ((n)-1))) >> (n))

// jidctred.c's 2x2 inverse DCT without the DC coefficient, which enters it only through column 0's
// even part: out[0..1] what that DC-free column adds to workspace row 0 and 1 column 0, out[2..5]
// the odd part of row 0 and row 1 (each as two int32 halves).
static inline void idct2_parts(const int16_t *in, const int *q, int32_t *out) {
    int64_t ws[2][8] = {{0}};
    static const int columns[5] = {0, 1, 3, 5, 7};
    for (int i = 0; i < 5; i++) {
        int c = columns[i];
        int64_t even = c == 0 ? 0 : (int64_t)(int16_t)in[c] * q[c];
        if (in[8 + c] == 0 && in[24 + c] == 0 && in[40 + c] == 0 && in[56 + c] == 0) {
            ws[0][c] = ws[1][c] = even * 4;  // LEFT_SHIFT(dcval, PASS1_BITS)
            continue;
        }
        int64_t tmp10 = even * ((int64_t)1 << (CONST_BITS + 2));
        int64_t tmp0 = (int64_t)in[56 + c] * q[56 + c] * -FIX_0_720959822 + (int64_t)in[40 + c] * q[40 + c] * FIX_0_850430095 +
                       (int64_t)in[24 + c] * q[24 + c] * -FIX_1_272758580 + (int64_t)in[8 + c] * q[8 + c] * FIX_3_624509785;
        ws[0][c] = (int32_t)DESCALE(tmp10 + tmp0, CONST_BITS - PASS1_BITS + 2);
        ws[1][c] = (int32_t)DESCALE(tmp10 - tmp0, CONST_BITS - PASS1_BITS + 2);
    }
    out[0] = (int32_t)ws[0][0];
    out[1] = (int32_t)ws[1][0];
    for (int r = 0; r < 2; r++) {
        int64_t tmp0 = ws[r][7] * -FIX_0_720959822 + ws[r][5] * FIX_0_850430095 + ws[r][3] * -FIX_1_272758580 +
                       ws[r][1] * FIX_3_624509785;
        memcpy(out + 2 + 2 * r, &tmp0, 8);
    }
}

// Decodes one MCU into `record`. 0, or -1 for an undecodable code. The bit reader is copied into
// locals: through the pointer, every store of a coefficient could alias it, and it would be
// reloaded for every symbol.
static inline int decode_mcu(const struct pk_jpeg8_job *job, bitreader *reader, int32_t pred[3], int32_t *record) {
    bitreader b = *reader;
    int result = -1;
    for (int blk = 0; blk < job->blocks; blk++) {
        // Past the data (a guess decoding the zero padding, or data cut short): a block reads at
        // most 27 + 63 * 31 bits and its loads 8 bytes more, which the padding covers from here.
        if ((size_t)(b.p - b.start) > job->size + 64) goto out;
        int ci = job->block_comp[blk];
        const htable *ac = &job->ac[ci];
        if (b.bits < 32) refill(&b);
        int s = decode_symbol(&b, &job->dc[ci]);
        if (s < 0) goto out;
        int diff = 0;
        if (s) {
            if (b.bits < 32) refill(&b);
            diff = extend(take(&b, s), s);
        }
        pred[ci] = (int32_t)((uint32_t)pred[ci] + (uint32_t)diff);
        int32_t *out = record + job->record_offset[blk];
        out[0] = pred[ci];
        if (job->ssize[ci] == 1) {
            uint64_t buf = b.buf;
            int bits = b.bits;
            for (int k = 1; k < 64;) {
                if (bits < 32) {
                    buf |= load_be64(b.p) >> bits;
                    b.p += (63 - bits) >> 3;
                    bits |= 56;
                }
                unsigned e = ac->skip[buf >> (64 - SKIP_BITS)];
                if (e) {
                    buf <<= e >> 8;
                    bits -= (int)(e >> 8);
                    if (!(e & 0xFF)) break;
                    k += (int)(e & 0xFF);
                    continue;
                }
                b.buf = buf;
                b.bits = bits;
                int sym = decode_symbol(&b, ac);
                if (sym < 0) goto out;
                int r = sym >> 4, size = sym & 15;
                if (size) {
                    b.buf <<= size;
                    b.bits -= size;
                    k += r + 1;
                } else {
                    if (r != 15) {
                        buf = b.buf;
                        bits = b.bits;
                        break;
                    }
                    k += 16;
                }
                buf = b.buf;
                bits = b.bits;
            }
            b.buf = buf;
            b.bits = bits;
        } else {
            int16_t coef[64] = {0};
            for (int k = 1; k < 64; k++) {
                if (b.bits < 32) refill(&b);
                int sym = decode_symbol(&b, ac);
                if (sym < 0) goto out;
                int r = sym >> 4, size = sym & 15;
                if (size) {
                    k += r;
                    coef[natural_order[k]] = (int16_t)extend(take(&b, size), size);
                } else {
                    if (r != 15) break;
                    k += 15;
                }
            }
            idct2_parts(coef, job->quant[ci], out + 1);
        }
    }
    result = 0;
out:
    *reader = b;
    return result;
}

static int grow(part_t *part, size_t record_size) {
    if (part->count < part->capacity) return 1;
    size_t capacity = part->capacity ? part->capacity + part->capacity / 2 : 1024;
    int32_t *records = (int32_t *)realloc(part->records, capacity * record_size * sizeof(int32_t));
    if (!records) return 0;
    part->records = records;
    part->capacity = capacity;
    return 1;
}

// ---- Setting up ----

pk_jpeg8_job *pk_jpeg8_prepare(void *opaque, int parts, int *width, int *height) {
    struct jpeg_decompress_struct *info = (struct jpeg_decompress_struct *)opaque;
    if (info->progressive_mode || info->arith_code || info->data_precision != 8) return NULL;
    if (info->num_components != 1 && info->num_components != 3) return NULL;
    if (info->comps_in_scan != info->num_components) return NULL;
    int color;
    if (info->num_components == 1 && info->jpeg_color_space == JCS_GRAYSCALE) color = 0;
    else if (info->num_components == 3 && info->jpeg_color_space == JCS_YCbCr) color = 1;
    else if (info->num_components == 3 && info->jpeg_color_space == JCS_RGB) color = 2;
    else return NULL;
    if (!info->src || !info->src->next_input_byte || info->image_width == 0 || info->image_height == 0) return NULL;

    pk_jpeg8_job *job = (pk_jpeg8_job *)calloc(1, sizeof(pk_jpeg8_job));
    if (!job) return NULL;
    job->comps = info->num_components;
    job->color = color;
    job->width = (int)((info->image_width + 7) / 8);
    job->height = (int)((info->image_height + 7) / 8);
    job->restart_interval = info->restart_interval;
    int max_h = info->max_h_samp_factor, max_v = info->max_v_samp_factor;
    int record = 0, blocks = 0;
    for (int i = 0; i < job->comps; i++) {
        jpeg_component_info *comp = info->cur_comp_info[i];
        // The scan's order is the MCU's; it must also be the frame's, which the colour
        // conversion follows.
        if (!comp || comp != &info->comp_info[i]) goto fail;
        int h = comp->h_samp_factor, v = comp->v_samp_factor;
        int ssize = 1;  // jdmaster.c: a subsampled component's DCT is scaled up where it divides
        while (ssize < DCTSIZE && (max_h % (h * ssize * 2)) == 0 && (max_v % (v * ssize * 2)) == 0) ssize *= 2;
        if (ssize > 2) goto fail;
        if (max_h % (h * ssize) || max_v % (v * ssize)) goto fail;
        job->h[i] = h;
        job->v[i] = v;
        job->ssize[i] = ssize;
        job->h_expand[i] = max_h / (h * ssize);
        job->v_expand[i] = max_v / (v * ssize);
        job->comp_w[i] = ((size_t)info->image_width * h * ssize + (size_t)max_h * 8 - 1) / ((size_t)max_h * 8);
        job->comp_h[i] = ((size_t)info->image_height * v * ssize + (size_t)max_v * 8 - 1) / ((size_t)max_v * 8);
        JQUANT_TBL *quant = info->quant_tbl_ptrs[comp->quant_tbl_no];
        if (!quant) goto fail;
        for (int k = 0; k < 64; k++) job->quant[i][k] = quant->quantval[k];
        if (!build_table(info->dc_huff_tbl_ptrs[comp->dc_tbl_no], 1, &job->dc[i])) goto fail;
        if (!build_table(info->ac_huff_tbl_ptrs[comp->ac_tbl_no], 0, &job->ac[i])) goto fail;
        int mcu_h = job->comps == 1 ? 1 : h, mcu_v = job->comps == 1 ? 1 : v;
        for (int y = 0; y < mcu_v; y++)
            for (int x = 0; x < mcu_h; x++) {
                if (blocks == MAX_BLOCKS) goto fail;
                job->block_comp[blocks] = (uint8_t)i;
                job->block_x[blocks] = (uint8_t)x;
                job->block_y[blocks] = (uint8_t)y;
                job->record_offset[blocks] = record;
                record += ssize == 1 ? 1 : 7;
                blocks++;
            }
    }
    job->blocks = blocks;
    job->record_size = record;
    if (job->comps == 1) {
        job->mcus_per_row = (info->image_width * (size_t)job->h[0] + (size_t)max_h * 8 - 1) / ((size_t)max_h * 8);
        job->mcu_rows = (info->image_height * (size_t)job->v[0] + (size_t)max_v * 8 - 1) / ((size_t)max_v * 8);
    } else {
        job->mcus_per_row = (info->image_width + (size_t)max_h * 8 - 1) / ((size_t)max_h * 8);
        job->mcu_rows = (info->image_height + (size_t)max_v * 8 - 1) / ((size_t)max_v * 8);
    }
    job->total = job->mcus_per_row * job->mcu_rows;

    // The entropy-coded data: cut into ranges (of at least 64 KB) whose stuffing is removed side
    // by side, none cut between a 0xFF and the byte after it.
    job->info = info;
    job->parts_wanted = parts;
    job->src = info->src->next_input_byte;
    job->left = info->src->bytes_in_buffer;
    job->data = (uint8_t *)malloc(job->left + PAD);
    if (!job->data) goto fail;
    int ranges = parts < 1 ? 1 : parts > MAX_PARTS ? MAX_PARTS : parts;
    if ((size_t)ranges > job->left / 65536 + 1) ranges = (int)(job->left / 65536 + 1);
    size_t previous = 0;
    for (int i = 0; i < ranges; i++) {
        size_t end = i == ranges - 1 ? job->left : job->left * (size_t)(i + 1) / (size_t)ranges;
        while (end < job->left && end > previous && job->src[end - 1] == 0xFF) end++;
        if (end < previous) end = previous;
        job->range[i].begin = previous;
        job->range[i].end = end;
        previous = end;
    }
    job->ranges = ranges;
    *width = job->width;
    *height = job->height;
    return job;
fail:
    pk_jpeg8_free(job);
    return NULL;
}

int pk_jpeg8_ranges(const pk_jpeg8_job *job) { return job->ranges; }

void pk_jpeg8_unstuff(pk_jpeg8_job *job, int index) {
    range_t *r = &job->range[index];
    const uint8_t *src = job->src;
    uint8_t *data = job->data + r->begin;
    size_t in = r->begin, out = 0, end = r->end;
    for (;;) {
        // Eight bytes at a time while none is 0xFF.
        while (in + 8 <= end) {
            uint64_t word, inverted;
            memcpy(&word, src + in, 8);
            inverted = ~word;
            if ((inverted - 0x0101010101010101ull) & ~inverted & 0x8080808080808080ull) break;
            memcpy(data + out, &word, 8);
            in += 8;
            out += 8;
        }
        while (in < end && src[in] != 0xFF) data[out++] = src[in++];
        if (in == end) {
            if (end == job->left) r->status = 1;  // no end-of-image marker
            break;
        }
        if (in + 1 >= job->left) {
            r->status = 1;
            break;
        }
        uint8_t next = src[in + 1];
        if (next == 0x00) {
            data[out++] = 0xFF;
            in += 2;
        } else if (next == 0xFF) {
            in += 1;  // a fill byte before a marker
        } else if (next >= 0xD0 && next <= 0xD7) {
            if (r->restart_count == r->restart_capacity) {
                size_t capacity = r->restart_capacity ? r->restart_capacity * 2 : 64;
                size_t *grown = (size_t *)realloc(r->restarts, capacity * sizeof(size_t));
                uint8_t *marks = grown ? (uint8_t *)realloc(r->markers, capacity) : NULL;
                if (grown) r->restarts = grown;
                if (!marks) {
                    r->status = 1;
                    break;
                }
                r->markers = marks;
                r->restart_capacity = capacity;
            }
            r->restarts[r->restart_count] = out;
            r->markers[r->restart_count++] = next;
            in += 2;
        } else if (next == 0xD9) {
            r->eoi = 1;
            break;
        } else {
            r->status = 1;  // another scan, or another marker libjpeg would read
            break;
        }
    }
    r->out = out;
}

int pk_jpeg8_split(pk_jpeg8_job *job) {
    const struct jpeg_decompress_struct *info = job->info;
    int parts = job->parts_wanted;
    // The ranges moved together, up to the end-of-image marker; restart markers in order.
    size_t restart_capacity = 64;
    job->restarts = (size_t *)malloc(restart_capacity * sizeof(size_t));
    if (!job->restarts) return 0;
    job->restarts[job->restart_count++] = 0;
    size_t out = 0;
    int expected_marker = 0, ended = 0;
    for (int i = 0; i < job->ranges && !ended; i++) {
        range_t *r = &job->range[i];
        if (r->status) return 0;
        if (out != r->begin) memmove(job->data + out, job->data + r->begin, r->out);
        for (size_t k = 0; k < r->restart_count; k++) {
            if (!job->restart_interval || r->markers[k] != 0xD0 + expected_marker) return 0;
            expected_marker = (expected_marker + 1) & 7;
            if (job->restart_count == restart_capacity) {
                restart_capacity *= 2;
                size_t *grown = (size_t *)realloc(job->restarts, restart_capacity * sizeof(size_t));
                if (!grown) return 0;
                job->restarts = grown;
            }
            job->restarts[job->restart_count++] = out + r->restarts[k];
        }
        out += r->out;
        ended = r->eoi;
    }
    if (!ended) return 0;
    memset(job->data + out, 0, PAD);
    job->size = out;
    if (job->restart_interval) {
        size_t intervals = (job->total + job->restart_interval - 1) / job->restart_interval;
        if (job->restart_count != intervals) return 0;
    }

    if (parts < 1) parts = 1;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    // When every block of an MCU is decoded alike (one set of tables, one DCT size: an RGB JPEG
    // whose components share tables), a guess that starts a block off decodes the same codes with
    // its blocks counted wrong and never meets the exact decoding at an MCU boundary: one part.
    if (!job->restart_interval && job->blocks > 1) {
        int alike = 1;
        for (int blk = 1; blk < job->blocks; blk++) {
            const jpeg_component_info *a = info->cur_comp_info[job->block_comp[0]], *c = info->cur_comp_info[job->block_comp[blk]];
            if (a->dc_tbl_no != c->dc_tbl_no || a->ac_tbl_no != c->ac_tbl_no || job->ssize[job->block_comp[0]] != job->ssize[job->block_comp[blk]])
                alike = 0;
        }
        if (alike) parts = 1;
    }
    if (job->restart_interval) {
        if ((size_t)parts > job->restart_count) parts = (int)job->restart_count;
        for (int i = 0; i < parts; i++) {
            job->part[i].first_interval = job->restart_count * (size_t)i / (size_t)parts;
            job->part[i].end_interval = job->restart_count * (size_t)(i + 1) / (size_t)parts;
        }
    } else {
        // Each part at least 4 KB.
        if ((size_t)parts > job->size / 4096 + 1) parts = (int)(job->size / 4096 + 1);
        for (int i = 0; i < parts; i++) {
            job->part[i].start_bit = (uint64_t)(job->size * (size_t)i / (size_t)parts) * 8;
            job->part[i].stop_bit = (uint64_t)(job->size * (size_t)(i + 1) / (size_t)parts) * 8;
        }
        job->part[parts - 1].stop_bit = UINT64_MAX;
    }
    job->parts = parts;
    return 1;
}

int pk_jpeg8_parts(const pk_jpeg8_job *job) { return job->parts; }

// ---- The parts ----

// A part between restart markers: every interval decoded from a known state.
static void decode_intervals(pk_jpeg8_job *job, part_t *part) {
    bitreader b;
    size_t first_mcu = part->first_interval * job->restart_interval;
    size_t end_mcu = part->end_interval * job->restart_interval;
    if (end_mcu > job->total) end_mcu = job->total;
    part->capacity = end_mcu - first_mcu;
    part->records = (int32_t *)malloc((part->capacity ? part->capacity : 1) * (size_t)job->record_size * sizeof(int32_t));
    if (!part->records) {
        part->status = -1;
        return;
    }
    for (size_t interval = part->first_interval; interval < part->end_interval; interval++) {
        int32_t pred[3] = {0, 0, 0};
        seek(&b, job->data, (uint64_t)job->restarts[interval] * 8);
        size_t mcus = job->total - interval * job->restart_interval;
        if (mcus > job->restart_interval) mcus = job->restart_interval;
        for (size_t m = 0; m < mcus; m++) {
            if (decode_mcu(job, &b, pred, part->records + part->count * (size_t)job->record_size) != 0) {
                part->status = 1;
                return;
            }
            part->count++;
        }
        // The interval ends at the next marker, with less than a byte of padding before it.
        uint64_t end = interval + 1 < job->restart_count ? job->restarts[interval + 1] : job->size;
        uint64_t at = position(&b);
        if (at > end * 8 || end * 8 - at >= 8) {
            part->status = 1;
            return;
        }
    }
}

// From `b` at an MCU boundary: decodes MCUs into `part` until the first boundary at or after
// `stop_bit` (returns 0), or past the data's end or an undecodable code (returns 1; -1 out of
// memory). Checkpoints the first MCUs when `checkpoints` is set. Leaves the boundary it stopped at
// in `part->end_bit` and `part->end_pred`.
static int decode_run(pk_jpeg8_job *job, part_t *part, bitreader *b, uint64_t stop_bit, int checkpoints) {
    uint64_t end = (uint64_t)job->size * 8;
    int32_t pred[3] = {0, 0, 0};
    int result;
    for (;;) {
        uint64_t at = position(b);
        part->recent[part->count & 63] = at;
        part->end_bit = at;
        memcpy(part->end_pred, pred, sizeof pred);
        if (at >= stop_bit) return 0;
        if (checkpoints && part->checkpoint_count < MAX_CHECKPOINTS) {
            checkpoint *cp = &part->checkpoints[part->checkpoint_count++];
            cp->bit = at;
            memcpy(cp->pred, pred, sizeof cp->pred);
        }
        if (!grow(part, (size_t)job->record_size)) return -1;
        result = decode_mcu(job, b, pred, part->records + part->count * (size_t)job->record_size);
        if (result != 0 || position(b) > end) return 1;
        part->count++;
    }
}

void pk_jpeg8_part(pk_jpeg8_job *job, int index) {
    part_t *part = &job->part[index];
    if (job->restart_interval) {
        decode_intervals(job, part);
        return;
    }
    part->checkpoints = (checkpoint *)malloc(MAX_CHECKPOINTS * sizeof(checkpoint));
    if (!part->checkpoints) {
        part->status = -1;
        return;
    }
    // Guess that an MCU starts here; where a guess meets a code no table has, it was wrong: guess
    // again a bit later, dropping what it decoded. The last part keeps what it has when it runs
    // into the data's end (past the last MCU, or cut short: the exact decoding tells).
    uint64_t start = part->start_bit;
    for (;;) {
        bitreader b;
        part->count = 0;
        part->checkpoint_count = 0;
        seek(&b, job->data, start);
        int result = decode_run(job, part, &b, part->stop_bit, 1);
        if (result <= 0 || index == job->parts - 1 || part->end_bit + 1 >= part->stop_bit) {
            part->status = result;
            return;
        }
        start = part->end_bit + 1;
    }
}

// ---- Joining ----

// Writes the samples of MCUs `from` ..< `to` that `seg` holds into the component planes.
static void place(const pk_jpeg8_job *job, const segment *seg, size_t from, size_t to, const uint8_t *limit) {
    size_t first = seg->mcu > from ? seg->mcu : from;
    size_t end = seg->mcu + seg->count < to ? seg->mcu + seg->count : to;
    if (end > job->total) end = job->total;
    for (size_t mcu = first; mcu < end; mcu++) {
        size_t mx = mcu % job->mcus_per_row, my = mcu / job->mcus_per_row;
        const int32_t *record = seg->records + (seg->first + (mcu - seg->mcu)) * (size_t)job->record_size;
        for (int blk = 0; blk < job->blocks; blk++) {
            int ci = job->block_comp[blk];
            const int32_t *r = record + job->record_offset[blk];
            int16_t dc = (int16_t)(uint16_t)((uint32_t)r[0] + (uint32_t)seg->offset[ci]);
            int dcq = (int)dc * job->quant[ci][0];
            size_t bx = job->comps == 1 ? mx : mx * (size_t)job->h[ci] + job->block_x[blk];
            size_t by = job->comps == 1 ? my : my * (size_t)job->v[ci] + job->block_y[blk];
            size_t w = job->comp_w[ci], h = job->comp_h[ci];
            uint8_t *plane = job->planes[ci];
            if (job->ssize[ci] == 1) {
                if (bx < w && by < h) plane[by * w + bx] = limit[DESCALE((int64_t)dcq, 3) & 1023];
                continue;
            }
            for (int row = 0; row < 2; row++) {
                size_t y = by * 2 + (size_t)row;
                if (y >= h) break;
                int64_t ws0 = (int64_t)dcq * 4 + r[1 + row];
                int64_t odd;
                memcpy(&odd, r + 3 + 2 * row, 8);
                int64_t even = ws0 * ((int64_t)1 << (CONST_BITS + 2));
                int shift = CONST_BITS + PASS1_BITS + 3 + 2;
                if (bx * 2 < w) plane[y * w + bx * 2] = limit[DESCALE(even + odd, shift) & 1023];
                if (bx * 2 + 1 < w) plane[y * w + bx * 2 + 1] = limit[DESCALE(even - odd, shift) & 1023];
            }
        }
    }
}

int pk_jpeg8_join(pk_jpeg8_job *job) {
    segment *segments = job->segments;
    int nseg = 0;
    part_t *bridge = &job->bridge;

    for (int i = 0; i < job->parts; i++)
        if (job->part[i].status < 0) return 0;
    if (job->restart_interval) {
        for (int i = 0; i < job->parts; i++) {
            part_t *part = &job->part[i];
            if (part->status != 0) return 0;
            segments[nseg++] = (segment){part->records, 0, part->count, part->first_interval * job->restart_interval, {0, 0, 0}};
        }
    } else {
        // The exact decoding: from the scan's start, through the parts, meeting each as soon as it
        // can. Its MCUs decoded between two parts go into `bridge`, one segment each time.
        bitreader b;
        int32_t pred[3] = {0, 0, 0};
        size_t mcus = 0, bridge_first = 0;
        seek(&b, job->data, 0);
        const part_t *last = NULL;  // the part the last segment is from, NULL for the bridge
        for (int i = 0; i <= job->parts && mcus < job->total; i++) {
            // Past the last part: decode what is left.
            part_t *part = i < job->parts ? &job->part[i] : NULL;
            size_t cp = 0;
            int met = 0;
            for (;;) {
                uint64_t at = position(&b);
                if (part) {
                    while (cp < part->checkpoint_count && part->checkpoints[cp].bit < at) cp++;
                    if (cp == part->checkpoint_count) break;  // every guess of this part began before here
                    if (part->checkpoints[cp].bit == at) {
                        met = 1;
                        break;
                    }
                }
                if (mcus == job->total) break;
                if (!grow(bridge, (size_t)job->record_size)) return 0;
                if (decode_mcu(job, &b, pred, bridge->records + bridge->count * (size_t)job->record_size) != 0) return 0;
                if (position(&b) > (uint64_t)job->size * 8) return 0;
                bridge->count++;
                mcus++;
            }
            if (bridge->count > bridge_first) {
                if (nseg == 2 * MAX_PARTS + 1) return 0;
                segments[nseg++] = (segment){NULL, bridge_first, bridge->count - bridge_first, mcus - (bridge->count - bridge_first), {0, 0, 0}};
                bridge_first = bridge->count;
                last = NULL;
            }
            if (!met || mcus == job->total) continue;
            // Met at the part's MCU `cp`: its MCUs from there are MCUs `mcus`..., each DC off by
            // the difference of the predictions there.
            segment seg = {part->records, cp, part->count - cp, mcus, {0, 0, 0}};
            for (int c = 0; c < job->comps; c++)
                seg.offset[c] = (int32_t)((uint32_t)pred[c] - (uint32_t)part->checkpoints[cp].pred[c]);
            if (seg.count) {
                if (nseg == 2 * MAX_PARTS + 1) return 0;
                segments[nseg++] = seg;
                last = part;
            }
            mcus += seg.count;
            for (int c = 0; c < job->comps; c++) pred[c] = (int32_t)((uint32_t)part->end_pred[c] + (uint32_t)seg.offset[c]);
            seek(&b, job->data, part->end_bit);
        }
        if (mcus < job->total || nseg == 0) return 0;
        for (int s = 0; s < nseg; s++)
            if (!segments[s].records) segments[s].records = bridge->records;
        // After the last MCU, less than a byte of padding may be left: libjpeg warns about
        // whole bytes it skips to reach the next marker.
        uint64_t after;
        if (!last) {
            after = position(&b);
        } else {
            const segment *seg = &segments[nseg - 1];
            size_t local = seg->first + (job->total - seg->mcu);
            if (local > last->count || last->count - local >= 64) return 0;
            after = last->recent[local & 63];
        }
        if (after > (uint64_t)job->size * 8 || (uint64_t)job->size * 8 - after >= 8) return 0;
    }
    job->segment_count = nseg;

    for (int c = 0; c < job->comps; c++) {
        job->planes[c] = (uint8_t *)malloc(job->comp_w[c] * job->comp_h[c] + 1);
        if (!job->planes[c]) return 0;
    }
    for (int i = 0; i < 1024; i++) {
        int v = (i < 512 ? i : i - 1024) + 128;
        job->limit[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    // jdcolor.c's tables.
    for (int i = 0; i < 256; i++) {
        int64_t x = i - 128;
        job->cr_r[i] = (int)((91881 * x + 32768) >> 16);   // FIX(1.40200)
        job->cb_b[i] = (int)((116130 * x + 32768) >> 16);  // FIX(1.77200)
        job->cr_g[i] = -46802 * x;                          // FIX(0.71414)
        job->cb_g[i] = -22554 * x + 32768;                  // FIX(0.34414), ONE_HALF
    }
    // Each output column's sample in each component's row (replication by whole factors).
    job->cols = (uint32_t *)malloc((size_t)job->width * 3 * sizeof(uint32_t));
    if (!job->cols) return 0;
    for (int c = 0; c < job->comps; c++)
        for (int x = 0; x < job->width; x++) {
            size_t cx = (size_t)x / (size_t)job->h_expand[c];
            job->cols[(size_t)c * job->width + x] = (uint32_t)(cx < job->comp_w[c] ? cx : job->comp_w[c] - 1);
        }
    job->bands = job->parts < (int)job->mcu_rows ? job->parts : (int)job->mcu_rows;
    if (job->bands < 1) job->bands = 1;
    return 1;
}

int pk_jpeg8_bands(const pk_jpeg8_job *job) { return job->bands; }

void pk_jpeg8_band(const pk_jpeg8_job *job, int band, unsigned char *rgb, size_t row_bytes) {
    size_t row_from = job->mcu_rows * (size_t)band / (size_t)job->bands;
    size_t row_to = job->mcu_rows * (size_t)(band + 1) / (size_t)job->bands;
    for (int s = 0; s < job->segment_count; s++)
        place(job, &job->segments[s], row_from * job->mcus_per_row, row_to * job->mcus_per_row, job->limit);

    // Upsampling by replication and the colour conversion (jdcolor.c), row by row.
    size_t out_rows = job->comps == 1 ? 1 : (size_t)job->v[0] * (size_t)job->v_expand[0] * (size_t)job->ssize[0];
    size_t y_end = row_to * out_rows < (size_t)job->height ? row_to * out_rows : (size_t)job->height;
    const uint32_t *c0 = job->cols, *c1 = job->cols + job->width, *c2 = job->cols + 2 * (size_t)job->width;
    for (size_t y = row_from * out_rows; y < y_end; y++) {
        uint8_t *o = rgb + y * row_bytes;
        const uint8_t *rows[3];
        for (int c = 0; c < job->comps; c++) {
            size_t cy = y / (size_t)job->v_expand[c];
            if (cy >= job->comp_h[c]) cy = job->comp_h[c] - 1;
            rows[c] = job->planes[c] + cy * job->comp_w[c];
        }
        if (job->color == 0) {
            for (int x = 0; x < job->width; x++, o += 3) o[0] = o[1] = o[2] = rows[0][x];
        } else if (job->color == 2) {
            for (int x = 0; x < job->width; x++, o += 3) {
                o[0] = rows[0][c0[x]];
                o[1] = rows[1][c1[x]];
                o[2] = rows[2][c2[x]];
            }
        } else {
            for (int x = 0; x < job->width; x++, o += 3) {
                int yy = rows[0][c0[x]], cb = rows[1][c1[x]], cr = rows[2][c2[x]];
                int r = yy + job->cr_r[cr];
                int g = yy + (int)((job->cb_g[cb] + job->cr_g[cr]) >> 16);
                int bl = yy + job->cb_b[cb];
                o[0] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
                o[1] = (uint8_t)(g < 0 ? 0 : g > 255 ? 255 : g);
                o[2] = (uint8_t)(bl < 0 ? 0 : bl > 255 ? 255 : bl);
            }
        }
    }
}

void pk_jpeg8_free(pk_jpeg8_job *job) {
    if (!job) return;
    for (int i = 0; i < MAX_PARTS; i++) {
        free(job->part[i].records);
        free(job->part[i].checkpoints);
    }
    free(job->bridge.records);
    for (int c = 0; c < 3; c++) free(job->planes[c]);
    free(job->cols);
    free(job->data);
    free(job->restarts);
    for (int i = 0; i < MAX_PARTS; i++) {
        free(job->range[i].restarts);
        free(job->range[i].markers);
    }
    free(job);
}
