#ifndef PIPELINEKIT_CRESAMPLE_H
#define PIPELINEKIT_CRESAMPLE_H
// The inner loops of the Lanczos resampler (Plugins/Processors/Support/Resampler.swift), with an
// AVX2 version chosen at run time where the CPU has it. Both versions do the same operations in
// the same order (no fused multiply-add), so they give the same floats, bit for bit, on any
// machine: outputs do not depend on which CPU made them.
#include <stddef.h>
#include <stdint.h>

/// `sum[i] = weight * row[i]` when `first`, else `sum[i] += weight * row[i]`, for `count` floats.
void pk_resample_accumulate(const float *row, float weight, int first, float *sum, size_t count);

/// `width` RGB pixels of 8-bit samples as four floats each: `sample * scale` three times, then 1.
void pk_resample_convert_rgb8(const uint8_t *samples, float scale, float *pixels, size_t width);

/// The horizontal pass over one row of pixels (four floats each): output pixel `x` is the sum over
/// its `counts[x]` taps of `weights4[(x * max_count + k) * 4 ...]` (each tap's weight four times)
/// times pixel `starts[x] + k`, even taps and odd taps summed apart and added at the end.
void pk_resample_filter(const float *pixels, const int32_t *starts, const int32_t *counts, const float *weights4,
                        int32_t max_count, float *out, int32_t width);

/// 1 when the AVX2 versions run, 0 for the plain ones; `pk_resample_force_plain(1)` makes the plain
/// ones run from then on (for the test that compares the two).
int pk_resample_uses_avx2(void);
void pk_resample_force_plain(int plain);
#endif
