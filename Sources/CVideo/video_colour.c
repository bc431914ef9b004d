// HDR and wide-gamut frames to sRGB: see video_colour.h.
#include "video_colour.h"

#include <math.h>
#include <pthread.h>

// The reference white of HDR video (ITU-R BT.2408): 203 cd/m2, HLG's 75% signal on a 1000 cd/m2
// display. It becomes SDR white's neighbourhood: 0.9 in linear light, 95% of the signal.
#define REFERENCE_WHITE 203.0
#define HLG_PEAK 1000.0
#define PQ_PEAK 1000.0
// Below this (relative to reference white) light is kept as it is; above, the Mobius curve of
// mpv and libplacebo rolls it off to the display's peak, keeping hue (one scale for R, G and B).
#define KNEE 0.8

static float linear[3][65536];
static float srgb_code[4097];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static double pq_eotf(double e) {  // cd/m2
    const double m1 = 2610.0 / 16384, m2 = 2523.0 / 4096 * 128, c1 = 3424.0 / 4096, c2 = 2413.0 / 4096 * 32,
                 c3 = 2392.0 / 4096 * 32;
    double p = pow(e, 1 / m2);
    return 10000 * pow(fmax(p - c1, 0) / (c2 - c3 * p), 1 / m1);
}

static double hlg_scene(double e) {  // scene light, 0 to 1
    const double a = 0.17883277, b = 1 - 4 * a, c = 0.5 - a * log(4 * a);
    return e <= 0.5 ? e * e / 3 : (exp((e - c) / a) + b) / 12;
}

static void build(void) {
    for (int code = 0; code < 65536; code++) {
        double e = code / 65535.0;
        linear[PK_VIDEO_SDR][code] = (float)pow(e, 2.4);  // BT.1886
        linear[PK_VIDEO_HLG][code] = (float)hlg_scene(e);
        linear[PK_VIDEO_PQ][code] = (float)(pq_eotf(e) / REFERENCE_WHITE);
    }
    for (int i = 0; i <= 4096; i++) {
        double v = i / 4096.0;
        double s = v <= 0.0031308 ? 12.92 * v : 1.055 * pow(v, 1 / 2.4) - 0.055;
        srgb_code[i] = (float)(s * 255);
    }
}

static double mobius(double x, double peak) {
    if (x <= KNEE || peak <= 1) return x;
    double j = KNEE;
    double a = -j * j * (peak - 1) / (j * j - 2 * j + peak);
    double b = (j * j - 2 * j * peak + peak) / (peak - 1);
    return (b * b + 2 * b * j + j * j) / (b - a) * (x + a) / (x + b);
}

int pk_video_colour_kind(int transfer, int primaries) {
    // AVColorTransferCharacteristic: 16 SMPTE ST 2084 (PQ), 18 ARIB STD-B67 (HLG);
    // AVColorPrimaries: 9 BT.2020.
    if (transfer == 16) return PK_VIDEO_PQ;
    if (transfer == 18) return PK_VIDEO_HLG;
    return primaries == 9 ? PK_VIDEO_SDR : -1;
}

static uint8_t encode(double v) {
    if (!(v > 0)) return 0;
    if (v >= 1) return 255;
    return (uint8_t)lrintf(srgb_code[(int)lrint(v * 4096)]);
}

void pk_video_to_srgb(const uint16_t *rgb48, uint8_t *rgb, size_t pixels, int kind, int wide) {
    pthread_once(&once, build);
    const float *table = linear[kind];
    // BT.2020 to BT.709 primaries in linear light (ITU-R BT.2087).
    static const double m[3][3] = {{1.6605, -0.5876, -0.0728}, {-0.1246, 1.1329, -0.0083}, {-0.0182, -0.1006, 1.1187}};
    double peak = kind == PK_VIDEO_HLG ? HLG_PEAK / REFERENCE_WHITE : kind == PK_VIDEO_PQ ? PQ_PEAK / REFERENCE_WHITE : 1;
    for (size_t i = 0; i < pixels; i++) {
        double r = table[rgb48[3 * i]], g = table[rgb48[3 * i + 1]], b = table[rgb48[3 * i + 2]];
        if (kind == PK_VIDEO_HLG) {
            // The HLG OOTF for a 1000 cd/m2 display (system gamma 1.2), then relative to
            // reference white.
            double ys = 0.2627 * r + 0.6780 * g + 0.0593 * b;
            double gain = ys > 0 ? HLG_PEAK * pow(ys, 0.2) / REFERENCE_WHITE : 0;
            r *= gain, g *= gain, b *= gain;
        }
        if (wide) {
            double r2 = m[0][0] * r + m[0][1] * g + m[0][2] * b;
            double g2 = m[1][0] * r + m[1][1] * g + m[1][2] * b;
            double b2 = m[2][0] * r + m[2][1] * g + m[2][2] * b;
            r = r2, g = g2, b = b2;
        }
        double most = fmax(r, fmax(g, b));
        if (most > KNEE && peak > 1) {
            double scale = mobius(most, peak) / most;
            r *= scale, g *= scale, b *= scale;
        }
        rgb[3 * i] = encode(r);
        rgb[3 * i + 1] = encode(g);
        rgb[3 * i + 2] = encode(b);
    }
}
