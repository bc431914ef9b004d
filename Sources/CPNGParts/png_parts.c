// A PNG's zlib stream inflated in parts side by side.
//
// A PNG's pixels are one zlib stream (split over IDAT chunks), and inflating it is most of the
// time of a large PNG: 88% of a 160 MP photo's. Nothing in the stream says where a deflate block
// starts except the decoding before it, and a block's matches reach up to 32 KB back into what
// came before.
//
// Each step of this reader takes the next stretch of compressed data and cuts it into parts.
// Part 0 starts where the last step ended, knowing the 32 KB before it. Any other part looks from
// its first bit for a bit position where a dynamic-Huffman block header parses and checks out
// (complete codes, an end-of-block code, counts in range) and inflates from there, writing 16-bit
// values: a byte, or a marker for "the byte i places into the 32 KB before this part", which is
// not known yet. Every part stops at the first block that starts at or after the next part's
// first bit. After the step, the parts are joined in order: a part whose guessed start is exactly
// where the part before it stopped is right (deflate decoding from the same bit is the same
// decoding); a part whose guess was wrong (a false header, a block type it does not look for) is
// inflated again from where the part before stopped. Then the markers of each part are replaced
// by the bytes that end the part before, the rows are unfiltered and handed out, while the next
// step's parts are inflated: memory holds two steps, never the image.
//
// What is handed out is what zlib and libpng give for a good file, byte for byte. Anything this
// reader would finish differently from libpng (an error in the compressed data, a CRC mismatch, too
// much or too little data, a bad filter byte, a zlib header with another window or a dictionary)
// makes it give up, and the caller reads the file with libpng, which reports what is wrong.
// Adler-32 is not checked, as libpng is told not to (PNG_IGNORE_ADLER32); every IDAT's CRC is.
#include "png_parts.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define WINDOW 32768
#define MAX_PARTS 16
// Zero bytes after copied input: the bit reader loads 8 bytes at a time.
#define PAD 64
// Input read past a part's nominal end at first (a block running over it reads more).
#define MARGIN (128 * 1024)
// Output values a part aims at (steps adapt their parts' compressed size to the data), and where
// a part stops at the next block boundary even before its compressed range ends (the part after
// it is then inflated again in order): memory stays bounded for data that compresses 1000:1.
#define TARGET_VALUES (1u << 20)
// Block headers a part tries before it gives up guessing.
#define MAX_TRIES 16
#define CAP_VALUES (4u << 20)
// Room kept after the output for a match copied 8 values at a time.
#define OUT_SLACK (258 + 16)

// ---- Decoding tables ---------------------------------------------------------------------------
// An entry: bits 0-3 code length (in this table), 4-7 extra bits (or a subtable's index bits),
// 8-10 kind, 16-31 value (a literal, a length or distance base, a subtable's offset).
enum { K_LITERAL = 0, K_LENGTH = 1, K_END = 2, K_SUB = 3, K_INVALID = 4 };
#define ENTRY(len, extra, kind, value) ((uint32_t)(len) | (uint32_t)(extra) << 4 | (uint32_t)(kind) << 8 | (uint32_t)(value) << 16)
#define E_LEN(e) ((e) & 15)
#define E_EXTRA(e) (((e) >> 4) & 15)
#define E_KIND(e) (((e) >> 8) & 7)
#define E_VALUE(e) ((e) >> 16)

#define LIT_ROOT 10
#define DIST_ROOT 8
#define CL_ROOT 7
#define LIT_TABLE 4096
#define DIST_TABLE 1024

static const uint16_t length_base[29] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
                                         35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t length_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
                                         3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193,
                                       257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145,
                                       8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6,
                                       7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

enum { T_CODES, T_LENS, T_DISTS };

// Each byte with its bits in reverse order (a Huffman code is stored from its last bit).
static const uint8_t reverse8[256] = {
#define R2(n) n, n + 2 * 64, n + 1 * 64, n + 3 * 64
#define R4(n) R2(n), R2(n + 2 * 16), R2(n + 1 * 16), R2(n + 3 * 16)
#define R6(n) R4(n), R4(n + 2 * 4), R4(n + 1 * 4), R4(n + 3 * 4)
    R6(0), R6(2), R6(1), R6(3)
#undef R2
#undef R4
#undef R6
};

// The entry (without its length) for symbol `s` of a table of `type`.
static uint32_t payload(int type, int s) {
    if (type == T_CODES) return ENTRY(0, 0, K_LITERAL, s);
    if (type == T_LENS) {
        if (s < 256) return ENTRY(0, 0, K_LITERAL, s);
        if (s == 256) return ENTRY(0, 0, K_END, 0);
        if (s <= 285) return ENTRY(0, length_extra[s - 257], K_LENGTH, length_base[s - 257]);
        return ENTRY(0, 0, K_INVALID, 0);
    }
    if (s < 30) return ENTRY(0, dist_extra[s], K_LENGTH, dist_base[s]);
    return ENTRY(0, 0, K_INVALID, 0);
}

// Builds the table for the `n` code lengths `lens`, as zlib's inflate_table accepts them: an
// over-subscribed set is an error; an incomplete one too, except for literal/length and distance
// codes whose longest code has one bit (zlib allows one code of one bit); no codes at all is
// allowed (every entry then invalid). Returns 0, or -1.
static int build(uint32_t *table, int capacity, int root, const uint8_t *lens, int n, int type) {
    int count[16] = {0}, max = 0;
    for (int s = 0; s < n; s++) count[lens[s]]++;
    for (int len = 15; len >= 1; len--) if (count[len]) { max = len; break; }
    const uint32_t invalid = ENTRY(1, 0, K_INVALID, 0);
    int left = 1;
    for (int len = 1; len <= 15; len++) {
        left <<= 1;
        left -= count[len];
        if (left < 0) return -1;
    }
    if (max == 0 && type == T_CODES) return -1;
    if (max > 0 && left > 0 && (type == T_CODES || max != 1)) return -1;
    // A complete code fills every entry; only an incomplete one leaves some invalid.
    if (left > 0 || max == 0)
        for (int i = 0; i < (1 << root); i++) table[i] = invalid;
    if (max == 0) return 0;
    int next[16];
    int code = 0;
    count[0] = 0;
    for (int len = 1; len <= 15; len++) {
        code = (code + count[len - 1]) << 1;
        next[len] = code;
    }
    uint16_t reversed[288];
    uint8_t sub_bits[1 << LIT_ROOT];
    memset(sub_bits, 0, (size_t)1 << root);
    for (int s = 0; s < n; s++) {
        int len = lens[s];
        if (!len) continue;
        int c = next[len]++;
        int r = (reverse8[c & 255] << 8 | reverse8[c >> 8]) >> (16 - len);
        reversed[s] = (uint16_t)r;
        if (len > root) {
            int p = r & ((1 << root) - 1);
            if (len - root > sub_bits[p]) sub_bits[p] = (uint8_t)(len - root);
        }
    }
    int offset = 1 << root;
    if (max > root) {
        for (int p = 0; p < (1 << root); p++) {
            if (!sub_bits[p]) continue;
            int size = 1 << sub_bits[p];
            if (offset + size > capacity) return -1;
            table[p] = ENTRY(root, sub_bits[p], K_SUB, offset);
            for (int i = 0; i < size; i++) table[offset + i] = invalid;
            offset += size;
        }
    }
    for (int s = 0; s < n; s++) {
        int len = lens[s];
        if (!len) continue;
        int r = reversed[s];
        uint32_t entry = payload(type, s);
        if (len <= root) {
            for (int i = r; i < (1 << root); i += 1 << len) table[i] = entry | (uint32_t)len;
        } else {
            uint32_t pointer = table[r & ((1 << root) - 1)];
            uint32_t *sub = table + E_VALUE(pointer);
            int bits = (int)E_EXTRA(pointer), step = 1 << (len - root);
            for (int i = r >> root; i < (1 << bits); i += step) sub[i] = entry | (uint32_t)(len - root);
        }
    }
    return 0;
}

static uint32_t fixed_lit[LIT_TABLE], fixed_dist[DIST_TABLE];
static pthread_once_t fixed_once = PTHREAD_ONCE_INIT;

static void build_fixed(void) {
    uint8_t lens[288];
    for (int s = 0; s < 144; s++) lens[s] = 8;
    for (int s = 144; s < 256; s++) lens[s] = 9;
    for (int s = 256; s < 280; s++) lens[s] = 7;
    for (int s = 280; s < 288; s++) lens[s] = 8;
    build(fixed_lit, LIT_TABLE, LIT_ROOT, lens, 288, T_LENS);
    for (int s = 0; s < 30; s++) lens[s] = 5;
    lens[30] = lens[31] = 5;
    build(fixed_dist, DIST_TABLE, DIST_ROOT, lens, 32, T_DISTS);
}

// ---- The file ----------------------------------------------------------------------------------

// One IDAT chunk: its data at `file` in the file, at `logical` in the zlib stream.
typedef struct {
    uint64_t file, logical;
    uint32_t length, crc;
} segment;

// One part of a step.
typedef struct {
    // Nominal compressed range [first, next) in stream bytes; decoding stops at the first block
    // starting at or after bit next * 8.
    uint64_t first, next;
    // Where its decoding started and stopped (bits); `ok` 0 when no start was found or its
    // decoding failed.
    uint64_t start, end;
    int ok, final;
    // Input: stream bytes [in_base, in_base + in_length), PAD zeros after.
    unsigned char *in;
    uint64_t in_base;
    size_t in_length, in_capacity;
    int in_valid;
    // Output: WINDOW values before it (the window), then `out_length` decoded values.
    uint16_t *out;
    size_t out_length, out_capacity;
    // The 32 KB before the part, as bytes (set when the part is joined), and how many of them are
    // real (fewer at the stream's start).
    unsigned char window[WINDOW];
    uint32_t history;
    // Stream bytes before the part's start (set when joined).
    uint64_t before;
    // CRC mismatches found in the IDATs this part checked.
    int bad_crc;
} part;

typedef struct {
    part parts[MAX_PARTS];
    int count;
} step_set;

struct pk_pngp {
    const unsigned char *data;
    int fd;
    size_t size;
    uint32_t width, height;
    int channels;
    size_t row_bytes;
    uint64_t expected;  // decompressed bytes: height x (1 + row_bytes)
    segment *segments;
    size_t segment_count;
    uint64_t stream_length;
    int max_parts;
    size_t part_bytes, part_bytes_max;
    pk_pngp_row_fn row;
    void *context;

    step_set sets[2];
    int decoding;         // the set the next step decodes into, or -1 when the stream is done
    int consuming;        // the set the next step hands out, or -1
    uint64_t step_start;  // where the next step's part 0 starts (bits)
    unsigned char step_window[WINDOW];
    uint64_t step_before;     // stream bytes decoded before step_start
    uint64_t crc_done;        // the IDATs starting before this stream byte have had their CRC checked
    int failed;               // a task found a problem
    uint64_t redone;

    // Row assembly (in the consuming task).
    unsigned char *row_current, *row_previous;
    size_t row_fill;
    uint32_t rows_done;
    unsigned char *narrow;
};

static int read_bytes(const pk_pngp *job, uint64_t offset, void *out, size_t length) {
    if (offset > job->size || length > job->size - offset) return -1;
    if (job->data) {
        memcpy(out, job->data + offset, length);
        return 0;
    }
    unsigned char *bytes = (unsigned char *)out;
    while (length) {
        ssize_t got = pread(job->fd, bytes, length, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        bytes += got;
        offset += (uint64_t)got;
        length -= (size_t)got;
    }
    return 0;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// Copies stream bytes [offset, offset + length) (clipped to the stream) into `out`; returns the
// bytes copied, or -1 when the file could not be read.
static long copy_stream(const pk_pngp *job, uint64_t offset, unsigned char *out, size_t length) {
    if (offset >= job->stream_length) return 0;
    if (length > job->stream_length - offset) length = (size_t)(job->stream_length - offset);
    size_t lo = 0, hi = job->segment_count;
    while (hi - lo > 1) {  // the last segment starting at or before offset
        size_t mid = (lo + hi) / 2;
        if (job->segments[mid].logical <= offset) lo = mid; else hi = mid;
    }
    size_t done = 0;
    for (size_t i = lo; done < length && i < job->segment_count; i++) {
        const segment *s = &job->segments[i];
        uint64_t at = offset + done;
        if (at < s->logical || at >= s->logical + s->length) continue;
        size_t n = (size_t)(s->logical + s->length - at);
        if (n > length - done) n = length - done;
        if (read_bytes(job, s->file + (at - s->logical), out + done, n)) return -1;
        done += n;
    }
    return (long)done;
}

// Checks the CRC of segment `i`, from `copy` (stream bytes from `copy_base`, `copy_length` of
// them) when it holds the segment's data. Returns 0 when it matches.
static int check_crc(const pk_pngp *job, size_t i, const unsigned char *copy, uint64_t copy_base, size_t copy_length) {
    const segment *s = &job->segments[i];
    uLong crc = crc32(0L, (const Bytef *)"IDAT", 4);
    if (copy && s->logical >= copy_base && s->logical + s->length <= copy_base + copy_length) {
        crc = crc32_z(crc, copy + (s->logical - copy_base), s->length);
    } else if (job->data) {
        crc = crc32_z(crc, job->data + s->file, s->length);
    } else {
        unsigned char buffer[65536];
        for (uint32_t done = 0; done < s->length;) {
            uint32_t n = s->length - done < sizeof buffer ? s->length - done : (uint32_t)sizeof buffer;
            if (read_bytes(job, s->file + done, buffer, n)) return -1;
            crc = crc32_z(crc, buffer, n);
            done += n;
        }
    }
    return (uint32_t)crc == s->crc ? 0 : -1;
}

// ---- Inflating ---------------------------------------------------------------------------------

typedef struct {
    pk_pngp *job;
    part *p;
    uint64_t bits;       // the bit buffer
    unsigned count;      // bits in it
    const unsigned char *at, *end;  // next input byte; end of the input copied so far
    // 1 once zero bits past the copied input were used: past the stream's end (an error only if
    // they are consumed), or where the file could not be read or memory ran out (`broken`).
    int overrun, broken;
} reader;

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

// Reads more of the stream into the part's input. Returns 1 if more came; 0 at the stream's end,
// or with `broken` set when the file could not be read or memory ran out.
static int extend(reader *r) {
    part *p = r->p;
    uint64_t have_end = p->in_base + p->in_length;
    if (have_end >= r->job->stream_length) return 0;
    r->broken = 1;  // until more came
    size_t consumed = (size_t)(r->at - p->in);
    size_t more = MARGIN;
    if (p->in_length + more + PAD > p->in_capacity) {
        size_t capacity = (p->in_length + more + PAD) * 2;
        unsigned char *grown = (unsigned char *)realloc(p->in, capacity);
        if (!grown) return 0;
        p->in = grown;
        p->in_capacity = capacity;
    }
    long got = copy_stream(r->job, have_end, p->in + p->in_length, more);
    if (got <= 0) return 0;
    r->broken = 0;
    p->in_length += (size_t)got;
    memset(p->in + p->in_length, 0, PAD);
    r->at = p->in + consumed;
    r->end = p->in + p->in_length;
    return 1;
}

// Fills the bit buffer to at least 56 bits. Past the end of the stream zero bits come, and
// `overrun` is set once they are used (checked where blocks end).
static inline void refill(reader *r) {
    if (r->end - r->at < 8) {  // signed: `at` runs past `end` over zero bits
        if (r->broken || (!extend(r) && r->end - r->at < 8)) {
            if (r->broken) r->overrun = 1;
            while (r->count <= 56) {
                if (r->at < r->end) r->bits |= (uint64_t)*r->at << r->count;
                else r->overrun = 1;  // noted; `position` tells whether the bits were consumed
                r->at++;
                r->count += 8;
            }
            return;
        }
    }
    r->bits |= load64(r->at) << r->count;
    r->at += (63 - r->count) >> 3;
    r->count |= 56;
}

// The stream position (bits) of the next unread bit.
static inline uint64_t position(const reader *r) {
    return (r->p->in_base + (uint64_t)(r->at - r->p->in)) * 8 - r->count;
}

static inline uint32_t take(reader *r, unsigned n) {
    uint32_t v = (uint32_t)(r->bits & ((1ull << n) - 1));
    r->bits >>= n;
    r->count -= n;
    return v;
}

// Positions the reader at stream bit `bit`, copying input from there up to `until` (bytes) unless
// the part's input already holds that byte.
static int seek(reader *r, uint64_t bit, uint64_t until) {
    part *p = r->p;
    uint64_t base = bit / 8;
    if (!(p->in_valid && p->in_base <= base && base < p->in_base + p->in_length)) {
        size_t want = until > base ? (size_t)(until - base) : 0;
        want += MARGIN;
        if (want + PAD > p->in_capacity) {
            unsigned char *grown = (unsigned char *)realloc(p->in, want + PAD);
            if (!grown) return -1;
            p->in = grown;
            p->in_capacity = want + PAD;
        }
        long got = copy_stream(r->job, base, p->in, want);
        if (got < 0) return -1;
        p->in_base = base;
        p->in_length = (size_t)got;
        p->in_valid = 1;
        memset(p->in + p->in_length, 0, PAD);
    }
    r->at = p->in + (base - p->in_base);
    r->end = p->in + p->in_length;
    r->bits = 0;
    r->count = 0;
    r->overrun = r->broken = 0;
    refill(r);
    take(r, (unsigned)(bit & 7));
    return 0;
}

// Room for `need` values in the part's output; -1 past what the whole image holds, or out of memory.
static int grow_out(part *p, size_t need, uint64_t limit) {
    if (need <= p->out_capacity) return 0;
    if (need > limit + WINDOW + OUT_SLACK + 65536) return -1;
    size_t capacity = p->out_capacity * 2;
    if (capacity < need) capacity = need;
    uint16_t *grown = (uint16_t *)realloc(p->out, capacity * sizeof(uint16_t));
    if (!grown) return -1;
    p->out = grown;
    p->out_capacity = capacity;
    return 0;
}

// Reads a dynamic block's header into tables. Returns 0, or -1 when it is not a valid header.
static int read_dynamic(reader *r, uint32_t *lit, uint32_t *dist) {
    static const uint8_t order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    refill(r);
    int nlen = (int)take(r, 5) + 257, ndist = (int)take(r, 5) + 1, ncode = (int)take(r, 4) + 4;
    if (nlen > 286 || ndist > 30) return -1;
    uint8_t lens[320];
    memset(lens, 0, 19);
    refill(r);
    for (int i = 0; i < ncode; i++) {
        if (i == 10) refill(r);
        lens[order[i]] = (uint8_t)take(r, 3);
    }
    uint32_t codes[1 << CL_ROOT];
    if (build(codes, 1 << CL_ROOT, CL_ROOT, lens, 19, T_CODES)) return -1;
    int total = nlen + ndist;
    for (int i = 0; i < total;) {
        refill(r);
        uint32_t e = codes[r->bits & ((1 << CL_ROOT) - 1)];
        if (E_KIND(e) == K_INVALID) return -1;
        take(r, E_LEN(e));
        int symbol = (int)E_VALUE(e);
        if (symbol < 16) {
            lens[i++] = (uint8_t)symbol;
            continue;
        }
        int value = 0, repeat;
        if (symbol == 16) {
            if (i == 0) return -1;
            value = lens[i - 1];
            repeat = 3 + (int)take(r, 2);
        } else if (symbol == 17) {
            repeat = 3 + (int)take(r, 3);
        } else {
            repeat = 11 + (int)take(r, 7);
        }
        if (i + repeat > total) return -1;
        while (repeat--) lens[i++] = (uint8_t)value;
    }
    if (lens[256] == 0) return -1;
    if (build(lit, LIT_TABLE, LIT_ROOT, lens, nlen, T_LENS)) return -1;
    if (build(dist, DIST_TABLE, DIST_ROOT, lens + nlen, ndist, T_DISTS)) return -1;
    return 0;
}

// Inflates blocks from stream bit `start` (a block's first bit) until a block starts at or after
// bit `stop` or after CAP_VALUES of output, or the final block ends, into p->out after its window. Distances may reach `history`
// values into the window. The output is capped at the whole image's bytes. Returns 0 (p->end, p->final, p->out_length
// set), or -1 on anything zlib would call an error, or a read failure.
static int inflate_part(pk_pngp *job, part *p, uint64_t start, uint64_t stop, uint32_t history) {
    const uint64_t limit = job->expected;
    reader r = {job, p, 0, 0, NULL, NULL, 0, 0};
    if (seek(&r, start, stop / 8 + 1)) return -1;
    if (grow_out(p, WINDOW + 65536, limit)) return -1;
    size_t out = WINDOW;
    uint32_t lit[LIT_TABLE], dist[DIST_TABLE];
    p->final = 0;
    for (;;) {
        uint64_t here = position(&r);
        if (here >= stop || out - WINDOW >= CAP_VALUES) {
            p->end = here;
            break;
        }
        if (r.overrun && (r.broken || here > job->stream_length * 8)) return -1;
        refill(&r);
        int final = (int)take(&r, 1), type = (int)take(&r, 2);
        const uint32_t *lt = lit, *dt = dist;
        if (type == 0) {
            take(&r, r.count & 7);  // to a byte boundary
            refill(&r);
            uint32_t length = take(&r, 16), check = take(&r, 16);
            if (length != (~check & 0xffff)) return -1;
            if (grow_out(p, out + length + OUT_SLACK, limit)) return -1;
            if (out - WINDOW + length > limit) return -1;
            for (uint32_t i = 0; i < length; i++) {
                if (r.count < 8) refill(&r);
                p->out[out++] = (uint16_t)take(&r, 8);
            }
        } else if (type == 3) {
            return -1;
        } else {
            if (type == 1) {
                lt = fixed_lit;
                dt = fixed_dist;
            } else if (read_dynamic(&r, lit, dist)) {
                return -1;
            }
            uint16_t *o = p->out + out;
            uint16_t *o_end = p->out + p->out_capacity - OUT_SLACK;
            for (;;) {
                if (o >= o_end) {
                    out = (size_t)(o - p->out);
                    if (grow_out(p, out + out / 2 + OUT_SLACK + 65536, limit)) return -1;
                    o = p->out + out;
                    o_end = p->out + p->out_capacity - OUT_SLACK;
                }
                refill(&r);
                if (__builtin_expect(r.overrun, 0) && (r.broken || position(&r) > job->stream_length * 8)) return -1;
                uint32_t e = lt[r.bits & ((1u << LIT_ROOT) - 1)];
                if (E_KIND(e) == K_SUB) {
                    take(&r, LIT_ROOT);
                    e = lt[E_VALUE(e) + (r.bits & ((1u << E_EXTRA(e)) - 1))];
                }
                unsigned kind = E_KIND(e);
                r.bits >>= E_LEN(e);
                r.count -= E_LEN(e);
                if (kind == K_LITERAL) {
                    *o++ = (uint16_t)E_VALUE(e);
                    // More literals without refilling while the bits are there (a literal in the
                    // first table has at most LIT_ROOT bits; at most 63 come: OUT_SLACK covers them).
                    while (r.count >= LIT_ROOT) {
                        uint32_t e2 = lt[r.bits & ((1u << LIT_ROOT) - 1)];
                        if (E_KIND(e2) != K_LITERAL) break;
                        r.bits >>= E_LEN(e2);
                        r.count -= E_LEN(e2);
                        *o++ = (uint16_t)E_VALUE(e2);
                    }
                    continue;
                }
                if (kind == K_END) break;
                if (kind != K_LENGTH) return -1;
                uint32_t length = E_VALUE(e) + take(&r, E_EXTRA(e));
                uint32_t d = dt[r.bits & ((1u << DIST_ROOT) - 1)];
                if (E_KIND(d) == K_SUB) {
                    take(&r, DIST_ROOT);
                    d = dt[E_VALUE(d) + (r.bits & ((1u << E_EXTRA(d)) - 1))];
                }
                if (E_KIND(d) != K_LENGTH) return -1;
                r.bits >>= E_LEN(d);
                r.count -= E_LEN(d);
                uint32_t distance = E_VALUE(d) + take(&r, E_EXTRA(d));
                size_t produced = (size_t)(o - p->out) - WINDOW;
                if (distance > produced + history) return -1;
                const uint16_t *from = o - distance;
                if (distance >= 8) {
                    uint16_t *stop_at = o + length;
                    do {
                        memcpy(o, from, 16);
                        o += 8;
                        from += 8;
                    } while (o < stop_at);
                    o = stop_at;
                } else if (distance >= 4) {
                    uint16_t *stop_at = o + length;
                    do {
                        memcpy(o, from, 8);
                        o += 4;
                        from += 4;
                    } while (o < stop_at);
                    o = stop_at;
                } else {
                    for (uint32_t i = 0; i < length; i++) o[i] = from[i];
                    o += length;
                }
            }
            out = (size_t)(o - p->out);
        }
        if (out - WINDOW > limit) return -1;
        if (r.overrun && (r.broken || position(&r) > job->stream_length * 8)) return -1;
        if (final) {
            p->final = 1;
            p->end = position(&r);
            break;
        }
    }
    p->out_length = out - WINDOW;
    return 0;
}

// Whether a dynamic block header that is not the last one starts at stream bit `bit`: cheap tests
// first (the type, the counts, the code-length code complete, as zlib requires), then the whole
// header. Most bit positions fail the first tests.
static int header_at(reader *r, uint64_t bit, uint32_t *lit, uint32_t *dist) {
    uint64_t offset = bit - r->p->in_base * 8;
    const unsigned char *at = r->p->in + offset / 8;
    r->end = r->p->in + r->p->in_length;  // a failed try may have moved the input
    if (at + 16 > r->end) return 0;
    uint64_t bits = load64(at) >> (offset & 7);
    if ((bits & 7) != 4) return 0;  // not final, type 2
    if (((bits >> 3) & 31) > 29 || ((bits >> 8) & 31) > 29) return 0;
    unsigned __int128 wide = ((unsigned __int128)load64(at + 8) << 64 | load64(at)) >> (offset & 7);
    unsigned ncode = (unsigned)((bits >> 13) & 15) + 4, kraft = 0;
    for (unsigned i = 0; i < ncode; i++) {
        unsigned len = (unsigned)(wide >> (17 + 3 * i)) & 7;
        if (len) kraft += 128u >> len;
    }
    if (kraft != 128) return 0;
    r->at = at;
    r->bits = 0;
    r->count = 0;
    r->overrun = r->broken = 0;
    refill(r);
    take(r, (unsigned)(offset & 7) + 3);
    return read_dynamic(r, lit, dist) == 0;
}

// A part other than the first of a step: finds a block start in [first, next) and inflates from
// there, with the window unknown.
static void guess_part(pk_pngp *job, part *p) {
    p->ok = 0;
    reader r = {job, p, 0, 0, NULL, NULL, 0, 0};
    if (seek(&r, p->first * 8, p->next)) return;
    uint32_t lit[LIT_TABLE], dist[DIST_TABLE];
    int tries = 0;
    for (uint64_t bit = p->first * 8; bit < p->next * 8; bit++) {
        if (!header_at(&r, bit, lit, dist)) continue;
        // A few false headers happen; many are data made to look like them: leave the part to be
        // inflated in order rather than try each.
        if (++tries > MAX_TRIES) return;
        for (size_t i = 0; i < WINDOW; i++) p->out[i] = (uint16_t)(256 + i);
        if (inflate_part(job, p, bit, p->next * 8, WINDOW) == 0) {
            p->start = bit;
            p->ok = 1;
            return;
        }
    }
}

// ---- Rows --------------------------------------------------------------------------------------

static int paeth(int a, int b, int c) {
    int p = a + b - c;
    int pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    if (pa <= pb && pa <= pc) return a;
    return pb <= pc ? b : c;
}

#if defined(__SSE2__)
// The filters whose bytes depend on the pixel to the left, a pixel (3 or 4 bytes) at a time in
// SSE2 lanes, as libpng's filter_sse2_intrinsics.c does them (the same results: integer
// arithmetic, Paeth's ties broken towards a, then b).
// Each is called with bpp a constant 3 or 4 (finish_row), so that these copies are moves.
#define PK_INLINE static inline __attribute__((always_inline))

PK_INLINE __m128i load_pixel(const unsigned char *p, int bpp) {
    uint32_t v;
    if (bpp == 4) {
        memcpy(&v, p, 4);
    } else {  // composed in a register: three bytes through memory stall the load after them
        uint16_t low;
        memcpy(&low, p, 2);
        v = (uint32_t)low | (uint32_t)p[2] << 16;
    }
    return _mm_cvtsi32_si128((int)v);
}

PK_INLINE void store_pixel(unsigned char *p, __m128i v, int bpp) {
    uint32_t w = (uint32_t)_mm_cvtsi128_si32(v);
    if (bpp == 4) {
        memcpy(p, &w, 4);
    } else {
        uint16_t low = (uint16_t)w;
        memcpy(p, &low, 2);
        p[2] = (unsigned char)(w >> 16);
    }
}

PK_INLINE void unfilter_sub(unsigned char *x, size_t n, int bpp) {
    __m128i a = _mm_setzero_si128();
    for (size_t i = 0; i < n; i += (size_t)bpp) {
        a = _mm_add_epi8(a, load_pixel(x + i, bpp));
        store_pixel(x + i, a, bpp);
    }
}

PK_INLINE void unfilter_avg(unsigned char *x, const unsigned char *up, size_t n, int bpp) {
    const __m128i one = _mm_set1_epi8(1);
    __m128i a = _mm_setzero_si128();
    for (size_t i = 0; i < n; i += (size_t)bpp) {
        __m128i b = load_pixel(up + i, bpp);
        __m128i average = _mm_avg_epu8(a, b);  // rounds up: take back the odd bit
        average = _mm_sub_epi8(average, _mm_and_si128(_mm_xor_si128(a, b), one));
        a = _mm_add_epi8(load_pixel(x + i, bpp), average);
        store_pixel(x + i, a, bpp);
    }
}

PK_INLINE void unfilter_paeth(unsigned char *x, const unsigned char *up, size_t n, int bpp) {
    const __m128i zero = _mm_setzero_si128();
    __m128i a = zero, c = zero;
    for (size_t i = 0; i < n; i += (size_t)bpp) {
        __m128i b = _mm_unpacklo_epi8(load_pixel(up + i, bpp), zero);
        __m128i d = _mm_unpacklo_epi8(load_pixel(x + i, bpp), zero);
        __m128i pa = _mm_sub_epi16(b, c), pb = _mm_sub_epi16(a, c);
        __m128i pc = _mm_add_epi16(pa, pb);
        pa = _mm_max_epi16(pa, _mm_sub_epi16(zero, pa));
        pb = _mm_max_epi16(pb, _mm_sub_epi16(zero, pb));
        pc = _mm_max_epi16(pc, _mm_sub_epi16(zero, pc));
        __m128i smallest = _mm_min_epi16(pc, _mm_min_epi16(pa, pb));
        __m128i is_a = _mm_cmpeq_epi16(smallest, pa), is_b = _mm_cmpeq_epi16(smallest, pb);
        __m128i b_or_c = _mm_or_si128(_mm_and_si128(is_b, b), _mm_andnot_si128(is_b, c));
        __m128i nearest = _mm_or_si128(_mm_and_si128(is_a, a), _mm_andnot_si128(is_a, b_or_c));
        d = _mm_add_epi8(d, nearest);
        store_pixel(x + i, _mm_packus_epi16(_mm_and_si128(d, _mm_set1_epi16(0xFF)), zero), bpp);
        a = _mm_and_si128(d, _mm_set1_epi16(0xFF));
        c = b;
    }
}
#endif

// Unfilters the assembled row and hands it out. Returns -1 on a bad filter byte.
static int finish_row(pk_pngp *job) {
    unsigned char *x = job->row_current + 1;
    const unsigned char *up = job->row_previous + 1;
    size_t n = job->row_bytes;
    int bpp = job->channels;
#if defined(__SSE2__)
    switch (job->row_current[0] * 8 + bpp) {
    case 1 * 8 + 3: unfilter_sub(x, n, 3); goto done;
    case 1 * 8 + 4: unfilter_sub(x, n, 4); goto done;
    case 3 * 8 + 3: unfilter_avg(x, up, n, 3); goto done;
    case 3 * 8 + 4: unfilter_avg(x, up, n, 4); goto done;
    case 4 * 8 + 3: unfilter_paeth(x, up, n, 3); goto done;
    case 4 * 8 + 4: unfilter_paeth(x, up, n, 4); goto done;
    default: break;
    }
#endif
    switch (job->row_current[0]) {
    case 0: break;
    case 1:
        for (size_t i = (size_t)bpp; i < n; i++) x[i] = (unsigned char)(x[i] + x[i - bpp]);
        break;
    case 2:
        for (size_t i = 0; i < n; i++) x[i] = (unsigned char)(x[i] + up[i]);
        break;
    case 3:
        for (int i = 0; i < bpp; i++) x[i] = (unsigned char)(x[i] + (up[i] >> 1));
        for (size_t i = (size_t)bpp; i < n; i++) x[i] = (unsigned char)(x[i] + ((x[i - bpp] + up[i]) >> 1));
        break;
    case 4:
        for (int i = 0; i < bpp; i++) x[i] = (unsigned char)(x[i] + up[i]);
        for (size_t i = (size_t)bpp; i < n; i++) x[i] = (unsigned char)(x[i] + paeth(x[i - bpp], up[i], up[i - bpp]));
        break;
    default: return -1;
    }
#if defined(__SSE2__)
done:
#endif
    job->row(job->context, x);
    unsigned char *t = job->row_previous;
    job->row_previous = job->row_current;
    job->row_current = t;
    job->rows_done++;
    return 0;
}

// Hands out the rows of one step's decoded parts (markers replaced by their window's bytes).
static int consume(pk_pngp *job, step_set *set) {
    const size_t row_length = job->row_bytes + 1;
    const size_t piece = 65536;
    for (int k = 0; k < set->count; k++) {
        part *p = &set->parts[k];
        const uint16_t *values = p->out + WINDOW;
        const uint32_t unknown = WINDOW - p->history;  // markers below this reach before the stream
        for (size_t done = 0; done < p->out_length;) {
            size_t n = p->out_length - done < piece ? p->out_length - done : piece;
            const uint16_t *v = values + done;
            unsigned char *b = job->narrow;
            for (size_t i = 0; i < n;) {
                if (i + 16 <= n) {  // 16 values without markers at a time
#if defined(__SSE2__)
                    __m128i low = _mm_loadu_si128((const __m128i *)(v + i)), high = _mm_loadu_si128((const __m128i *)(v + i + 8));
                    __m128i above = _mm_srli_epi16(_mm_or_si128(low, high), 8);
                    if (_mm_movemask_epi8(_mm_cmpeq_epi8(above, _mm_setzero_si128())) == 0xFFFF) {
                        _mm_storeu_si128((__m128i *)(b + i), _mm_packus_epi16(low, high));
                        i += 16;
                        continue;
                    }
#else
                    uint16_t any = 0;
                    for (int j = 0; j < 16; j++) any |= v[i + j];
                    if (any < 256) {
                        for (int j = 0; j < 16; j++) b[i + j] = (unsigned char)v[i + j];
                        i += 16;
                        continue;
                    }
#endif
                }
                uint16_t value = v[i];
                if (value < 256) {
                    b[i] = (unsigned char)value;
                } else {
                    uint32_t index = value - 256u;
                    if (index < unknown) return -1;
                    b[i] = p->window[index];
                }
                i++;
            }
            for (size_t i = 0; i < n;) {
                if (job->rows_done >= job->height) return -1;  // more data than rows
                size_t want = row_length - job->row_fill;
                if (want > n - i) want = n - i;
                memcpy(job->row_current + job->row_fill, b + i, want);
                job->row_fill += want;
                i += want;
                if (job->row_fill == row_length) {
                    job->row_fill = 0;
                    if (finish_row(job)) return -1;
                }
            }
            done += n;
        }
    }
    return 0;
}

// ---- Steps -------------------------------------------------------------------------------------

static void plan_step(pk_pngp *job);

pk_pngp *pk_pngp_open(const unsigned char *data, int fd, size_t size, int parts, size_t part_bytes,
                      pk_pngp_row_fn row, void *context) {
    static const unsigned char signature[8] = {137, 80, 78, 71, 13, 10, 26, 10};
    pthread_once(&fixed_once, build_fixed);
    if (parts < 1) parts = 1;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    if (part_bytes < 1024) part_bytes = 1024;
    pk_pngp *job = (pk_pngp *)calloc(1, sizeof(pk_pngp));
    if (!job) return NULL;
    job->data = data;
    job->fd = fd;
    job->size = size;
    job->max_parts = parts;
    job->part_bytes = part_bytes;
    job->row = row;
    job->context = context;
    unsigned char head[33];
    if (read_bytes(job, 0, head, 33) || memcmp(head, signature, 8) || be32(head + 8) != 13 || memcmp(head + 12, "IHDR", 4))
        goto decline;
    job->width = be32(head + 16);
    job->height = be32(head + 20);
    if (head[24] != 8 || (head[25] != 2 && head[25] != 6) || head[26] || head[27] || head[28]) goto decline;
    if (!job->width || !job->height || job->width > 0x7fffffff || job->height > 0x7fffffff) goto decline;
    job->channels = head[25] == 6 ? 4 : 3;
    job->row_bytes = (size_t)job->width * (size_t)job->channels;
    job->expected = (uint64_t)job->height * (job->row_bytes + 1);
    // The chunks: up to the first IDAT, then the run of IDATs.
    uint64_t at = 33;
    size_t capacity = 0;
    int in_idat = 0;
    for (;;) {
        unsigned char chunk[8];
        if (read_bytes(job, at, chunk, 8)) goto decline;
        uint32_t length = be32(chunk);
        if (length > 0x7fffffff || at + 12 + length > size) goto decline;
        int idat = memcmp(chunk + 4, "IDAT", 4) == 0;
        if (!idat && in_idat) break;
        if (!idat) {
            if (!memcmp(chunk + 4, "tRNS", 4) || !memcmp(chunk + 4, "IEND", 4)) goto decline;
        } else {
            in_idat = 1;
            if (job->segment_count == capacity) {
                capacity = capacity ? capacity * 2 : 256;
                segment *grown = (segment *)realloc(job->segments, capacity * sizeof(segment));
                if (!grown) goto decline;
                job->segments = grown;
            }
            unsigned char crc[4];
            if (read_bytes(job, at + 8 + length, crc, 4)) goto decline;
            segment *s = &job->segments[job->segment_count++];
            s->file = at + 8;
            s->logical = job->stream_length;
            s->length = length;
            s->crc = be32(crc);
            job->stream_length += length;
        }
        at += 12 + (uint64_t)length;
        if (at + 8 > size) {
            if (in_idat) break;
            goto decline;
        }
    }
    // The zlib header: deflate with a 32 KB window, no dictionary.
    unsigned char zhead[2];
    if (job->stream_length < 6 || copy_stream(job, 0, zhead, 2) != 2) goto decline;
    if (zhead[0] != 0x78 || (zhead[1] & 0x20) || ((unsigned)zhead[0] << 8 | zhead[1]) % 31) goto decline;
    job->row_current = (unsigned char *)calloc(1, job->row_bytes + 1);
    job->row_previous = (unsigned char *)calloc(1, job->row_bytes + 1);
    job->narrow = (unsigned char *)malloc(65536);
    if (!job->row_current || !job->row_previous || !job->narrow) goto decline;
    job->part_bytes_max = part_bytes;
    job->part_bytes = part_bytes / 4 > 65536 ? part_bytes / 4 : (part_bytes < 65536 ? part_bytes : 65536);
    job->decoding = 0;
    job->consuming = -1;
    job->step_start = 16;
    plan_step(job);
    return job;
decline:
    pk_pngp_free(job);
    return NULL;
}

void pk_pngp_size(const pk_pngp *job, uint32_t *width, uint32_t *height, int *channels) {
    *width = job->width;
    *height = job->height;
    *channels = job->channels;
}

uint64_t pk_pngp_redone(const pk_pngp *job) { return job->redone; }

// Sets up the parts of the next decoding step.
static void plan_step(pk_pngp *job) {
    step_set *set = &job->sets[job->decoding];
    uint64_t first = job->step_start / 8;
    set->count = 0;
    for (int k = 0; k < job->max_parts; k++) {
        uint64_t from = first + (uint64_t)k * job->part_bytes;
        if (from >= job->stream_length) break;
        part *p = &set->parts[k];
        p->first = from;
        p->next = from + job->part_bytes;
        p->ok = p->final = p->in_valid = 0;
        p->out_length = 0;
        p->bad_crc = 0;
        set->count++;
    }
}

int pk_pngp_tasks(const pk_pngp *job) {
    int n = job->consuming >= 0 ? 1 : 0;
    if (job->decoding >= 0 && !job->failed) n += job->sets[job->decoding].count;
    return n;
}


// Checks the CRCs of the segments starting in [from, to), from part `p`'s input where it holds them.
static int check_range(const pk_pngp *job, uint64_t from, uint64_t to, const part *p) {
    size_t lo = 0, hi = job->segment_count;
    while (lo < hi) {  // first segment starting at or after `from`
        size_t mid = (lo + hi) / 2;
        if (job->segments[mid].logical < from) lo = mid + 1; else hi = mid;
    }
    for (size_t i = lo; i < job->segment_count && job->segments[i].logical < to; i++)
        if (p && p->in_valid ? check_crc(job, i, p->in, p->in_base, p->in_length) : check_crc(job, i, NULL, 0, 0)) return -1;
    return 0;
}

void pk_pngp_task(pk_pngp *job, int i) {
    if (job->consuming >= 0) {
        if (i == 0) {
            if (consume(job, &job->sets[job->consuming])) __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
            return;
        }
        i--;
    }
    step_set *set = &job->sets[job->decoding];
    part *p = &set->parts[i];
    if (!p->out && !(p->out = (uint16_t *)malloc((WINDOW + 65536 + OUT_SLACK) * sizeof(uint16_t)))) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);  // tasks of a step run side by side
        return;
    }
    if (!p->out_capacity) p->out_capacity = WINDOW + 65536 + OUT_SLACK;
    // The part's input, then the CRCs of the IDATs that start in its range (the range beyond the
    // last part's is checked when the step is settled).
    reader r = {job, p, 0, 0, NULL, NULL, 0, 0};
    if (seek(&r, p->first * 8, p->next)) {
        p->ok = 0;
        p->bad_crc = 1;
        return;
    }
    if (check_range(job, i == 0 ? job->crc_done : p->first, p->next, p)) p->bad_crc = 1;
    if (i == 0) {
        memcpy(p->window, job->step_window, WINDOW);
        for (size_t k = 0; k < WINDOW; k++) p->out[k] = job->step_window[k];
        p->history = job->step_before < WINDOW ? (uint32_t)job->step_before : WINDOW;
        p->before = job->step_before;
        p->start = job->step_start;
        p->ok = inflate_part(job, p, job->step_start, p->next * 8, p->history) == 0;
    } else {
        guess_part(job, p);
    }
}

// The 32 KB that end part `p` (its window and output), as bytes: markers replaced from its window.
static void tail_of(const part *p, unsigned char *tail) {
    const uint16_t *v = p->out + WINDOW + p->out_length - WINDOW;  // the last WINDOW values
    for (size_t i = 0; i < WINDOW; i++) tail[i] = v[i] < 256 ? (unsigned char)v[i] : p->window[v[i] - 256];
}

int pk_pngp_settle(pk_pngp *job) {
    if (job->failed) return 0;
    job->consuming = -1;
    if (job->decoding < 0) {
        // Everything was handed out: every row, nothing left over.
        return job->rows_done == job->height && job->row_fill == 0 ? 2 : 0;
    }
    step_set *set = &job->sets[job->decoding];
    for (int k = 0; k < set->count; k++)
        if (set->parts[k].bad_crc) return 0;
    int used = 0;
    for (int k = 0; k < set->count; k++) {
        part *p = &set->parts[k];
        if (k > 0) {
            part *before = &set->parts[k - 1];
            tail_of(before, p->window);
            p->before = before->before + before->out_length;
            p->history = p->before < WINDOW ? (uint32_t)p->before : WINDOW;
            if (!(p->ok && p->start == before->end)) {
                // A wrong guess: inflate it again from where the part before stopped.
                job->redone += p->next - p->first;
                for (size_t i = 0; i < WINDOW; i++) p->out[i] = p->window[i];
                p->start = before->end;
                if (inflate_part(job, p, p->start, p->next * 8, p->history)) return 0;
            }
        } else if (!p->ok) {
            return 0;
        }
        used = k + 1;
        if (p->before + p->out_length > job->expected) return 0;
        if (p->final) break;
    }
    part *last = &set->parts[used - 1];
    uint64_t covered = set->parts[set->count - 1].next;
    set->count = used;
    job->consuming = job->decoding;
    if (last->final) {
        // The zlib stream ends: its Adler-32 (not checked, as libpng is told) must be the last
        // four bytes of the image data.
        if (job->stream_length != (last->end + 7) / 8 + 4) return 0;
        if (last->before + last->out_length != job->expected) return 0;
        if (check_range(job, covered, job->stream_length + 1, NULL)) return 0;
        job->decoding = -1;
        return 1;
    }
    job->step_start = last->end;
    job->step_before = last->before + last->out_length;
    tail_of(last, job->step_window);
    uint64_t first = job->step_start / 8;
    if (first > covered) {
        if (check_range(job, covered, first, NULL)) return 0;
        covered = first;
    }
    job->crc_done = covered;
    if (job->step_start >= job->stream_length * 8) return 0;  // ran out before the final block
    // Adapt the parts to the data: about TARGET_VALUES of output each.
    uint64_t in = last->end / 8 - set->parts[0].start / 8 + 1, out = last->before + last->out_length - set->parts[0].before;
    if (out > 0) {
        uint64_t want = in * TARGET_VALUES / out;
        if (want < 65536) want = 65536;
        if (want > job->part_bytes_max) want = job->part_bytes_max;
        job->part_bytes = (size_t)want;
    }
    job->decoding ^= 1;
    plan_step(job);
    return 1;
}

void pk_pngp_free(pk_pngp *job) {
    if (!job) return;
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < MAX_PARTS; k++) {
            free(job->sets[s].parts[k].in);
            free(job->sets[s].parts[k].out);
        }
    free(job->segments);
    free(job->row_current);
    free(job->row_previous);
    free(job->narrow);
    free(job);
}
