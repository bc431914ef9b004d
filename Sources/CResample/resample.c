#include "CResample.h"

#pragma clang fp contract(off)

// 8-bit RGB to four floats a pixel: the plain loop, which the AVX2 version matches float for float.
static void convert_rgb8_plain(const uint8_t *samples, float scale, float *pixels, size_t width) {
    for (size_t x = 0; x < width; x++) {
        const uint8_t *p = samples + x * 3;
        float *q = pixels + x * 4;
        q[0] = (float)p[0] * scale; q[1] = (float)p[1] * scale; q[2] = (float)p[2] * scale; q[3] = 1.0f;
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

// Written out with intrinsics, not left to the vectoriser, so that the order of the additions is
// the one documented in the header in both versions. Multiplications and additions stay apart:
// this file is compiled without -ffp-contract=fast and the AVX2 target does not include FMA.
#pragma clang fp contract(off)

static int forced_plain = 0;

int pk_resample_uses_avx2(void) { return !forced_plain && __builtin_cpu_supports("avx2"); }
void pk_resample_force_plain(int plain) { forced_plain = plain; }

__attribute__((target("avx2")))
static void accumulate_avx2(const float *row, float weight, int first, float *sum, size_t count) {
    __m256 w = _mm256_set1_ps(weight);
    size_t i = 0;
    if (first) {
        for (; i + 8 <= count; i += 8) _mm256_storeu_ps(sum + i, _mm256_mul_ps(w, _mm256_loadu_ps(row + i)));
        for (; i < count; i++) sum[i] = weight * row[i];
    } else {
        for (; i + 8 <= count; i += 8)
            _mm256_storeu_ps(sum + i, _mm256_add_ps(_mm256_loadu_ps(sum + i), _mm256_mul_ps(w, _mm256_loadu_ps(row + i))));
        for (; i < count; i++) sum[i] += weight * row[i];
    }
}

static void accumulate_sse(const float *row, float weight, int first, float *sum, size_t count) {
    __m128 w = _mm_set1_ps(weight);
    size_t i = 0;
    if (first) {
        for (; i + 4 <= count; i += 4) _mm_storeu_ps(sum + i, _mm_mul_ps(w, _mm_loadu_ps(row + i)));
        for (; i < count; i++) sum[i] = weight * row[i];
    } else {
        for (; i + 4 <= count; i += 4) _mm_storeu_ps(sum + i, _mm_add_ps(_mm_loadu_ps(sum + i), _mm_mul_ps(w, _mm_loadu_ps(row + i))));
        for (; i < count; i++) sum[i] += weight * row[i];
    }
}

void pk_resample_accumulate(const float *row, float weight, int first, float *sum, size_t count) {
    if (pk_resample_uses_avx2()) accumulate_avx2(row, weight, first, sum, count);
    else accumulate_sse(row, weight, first, sum, count);
}

// Two pixels a step: a 16-byte load holds pixels i...i+4 (and a third of the next), a shuffle
// spreads four of them over four bytes each (the fourth byte zero), and each half becomes two
// pixels of four floats; the fourth float is then set to 1. Each float is the one the plain loop
// makes (an exact conversion, then one multiplication by `scale`).
__attribute__((target("avx2")))
static void convert_rgb8_avx2(const uint8_t *samples, float scale, float *pixels, size_t width) {
    const __m128i spread = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    const __m256 s = _mm256_set1_ps(scale), one = _mm256_set1_ps(1.0f);
    size_t x = 0;
    for (; x + 6 <= width; x += 4) {
        __m128i four = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(samples + x * 3)), spread);
        __m256 low = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(four)), s);
        __m256 high = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(four, 8))), s);
        _mm256_storeu_ps(pixels + x * 4, _mm256_blend_ps(low, one, 0x88));
        _mm256_storeu_ps(pixels + x * 4 + 8, _mm256_blend_ps(high, one, 0x88));
    }
    convert_rgb8_plain(samples + x * 3, scale, pixels + x * 4, width - x);
}

void pk_resample_convert_rgb8(const uint8_t *samples, float scale, float *pixels, size_t width) {
    if (pk_resample_uses_avx2()) convert_rgb8_avx2(samples, scale, pixels, width);
    else convert_rgb8_plain(samples, scale, pixels, width);
}

// One 256-bit register holds an even tap's pixel (low half) and the next odd tap's (high half),
// with their weights: the low half is the even taps' sum and the high half the odd taps', as the
// two 128-bit sums of the plain version.
__attribute__((target("avx2")))
static void filter_avx2(const float *pixels, const int32_t *starts, const int32_t *counts, const float *weights4,
                        int32_t max_count, float *out, int32_t width) {
    for (int32_t x = 0; x < width; x++) {
        const float *q = pixels + (size_t)starts[x] * 4;
        const float *w = weights4 + (size_t)x * (size_t)max_count * 4;
        int32_t taps = counts[x], k = 0;
        __m256 sums = _mm256_setzero_ps();
        for (; k + 2 <= taps; k += 2) {
            sums = _mm256_add_ps(sums, _mm256_mul_ps(_mm256_loadu_ps(w + k * 4), _mm256_loadu_ps(q)));
            q += 8;
        }
        __m128 even = _mm256_castps256_ps128(sums), odd = _mm256_extractf128_ps(sums, 1);
        if (k < taps) even = _mm_add_ps(even, _mm_mul_ps(_mm_loadu_ps(w + k * 4), _mm_loadu_ps(q)));
        _mm_storeu_ps(out + (size_t)x * 4, _mm_add_ps(even, odd));
    }
}

static void filter_sse(const float *pixels, const int32_t *starts, const int32_t *counts, const float *weights4,
                       int32_t max_count, float *out, int32_t width) {
    for (int32_t x = 0; x < width; x++) {
        const float *q = pixels + (size_t)starts[x] * 4;
        const float *w = weights4 + (size_t)x * (size_t)max_count * 4;
        int32_t taps = counts[x], k = 0;
        __m128 even = _mm_setzero_ps(), odd = _mm_setzero_ps();
        for (; k + 2 <= taps; k += 2) {
            even = _mm_add_ps(even, _mm_mul_ps(_mm_loadu_ps(w + k * 4), _mm_loadu_ps(q)));
            odd = _mm_add_ps(odd, _mm_mul_ps(_mm_loadu_ps(w + k * 4 + 4), _mm_loadu_ps(q + 4)));
            q += 8;
        }
        if (k < taps) even = _mm_add_ps(even, _mm_mul_ps(_mm_loadu_ps(w + k * 4), _mm_loadu_ps(q)));
        _mm_storeu_ps(out + (size_t)x * 4, _mm_add_ps(even, odd));
    }
}

void pk_resample_filter(const float *pixels, const int32_t *starts, const int32_t *counts, const float *weights4,
                        int32_t max_count, float *out, int32_t width) {
    if (pk_resample_uses_avx2()) filter_avx2(pixels, starts, counts, weights4, max_count, out, width);
    else filter_sse(pixels, starts, counts, weights4, max_count, out, width);
}

#else
// Other architectures: the same operations in the same order, left to the compiler.
#pragma clang fp contract(off)

int pk_resample_uses_avx2(void) { return 0; }
void pk_resample_force_plain(int plain) { (void)plain; }

void pk_resample_accumulate(const float *row, float weight, int first, float *sum, size_t count) {
    if (first) for (size_t i = 0; i < count; i++) sum[i] = weight * row[i];
    else for (size_t i = 0; i < count; i++) sum[i] += weight * row[i];
}

void pk_resample_convert_rgb8(const uint8_t *samples, float scale, float *pixels, size_t width) {
    convert_rgb8_plain(samples, scale, pixels, width);
}

void pk_resample_filter(const float *pixels, const int32_t *starts, const int32_t *counts, const float *weights4,
                        int32_t max_count, float *out, int32_t width) {
    for (int32_t x = 0; x < width; x++) {
        const float *q = pixels + (size_t)starts[x] * 4;
        const float *w = weights4 + (size_t)x * (size_t)max_count * 4;
        float even[4] = {0, 0, 0, 0}, odd[4] = {0, 0, 0, 0};
        int32_t taps = counts[x], k = 0;
        for (; k + 2 <= taps; k += 2, q += 8)
            for (int c = 0; c < 4; c++) { even[c] += w[k * 4 + c] * q[c]; odd[c] += w[k * 4 + 4 + c] * q[4 + c]; }
        if (k < taps) for (int c = 0; c < 4; c++) even[c] += w[k * 4 + c] * q[c];
        for (int c = 0; c < 4; c++) out[(size_t)x * 4 + c] = even[c] + odd[c];
    }
}
#endif
