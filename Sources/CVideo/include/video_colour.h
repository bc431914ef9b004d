#ifndef PK_VIDEO_COLOUR_H
#define PK_VIDEO_COLOUR_H

#include <stddef.h>
#include <stdint.h>

/// How a frame's light is coded: SDR (a BT.1886 display's gamma), HLG (ARIB STD-B67) or PQ
/// (SMPTE ST 2084).
enum { PK_VIDEO_SDR = 0, PK_VIDEO_HLG = 1, PK_VIDEO_PQ = 2 };

/// Which conversion a frame with libavutil's `transfer` and `primaries` needs: PK_VIDEO_HLG or
/// PK_VIDEO_PQ for HDR, PK_VIDEO_SDR for SDR in BT.2020 primaries, -1 for none (SDR in BT.709 or
/// unknown primaries: its RGB is shown as it is).
int pk_video_colour_kind(int transfer, int primaries);

/// Converts `pixels` RGB pixels of 16 bits a channel, as the stream codes them (`kind`; BT.2020
/// primaries when `wide`), to sRGB, 8 bits a channel: to linear light, HLG through its system
/// gamma for a 1000 cd/m2 display, relative to HDR's reference white (203 cd/m2, BT.2408), to
/// BT.709 primaries, highlights above 0.8 rolled off to the peak (1000 cd/m2) with one scale for
/// R, G and B (hue kept), then sRGB's curve. Reference white comes out at 95% of the signal.
void pk_video_to_srgb(const uint16_t *rgb48, uint8_t *rgb, size_t pixels, int kind, int wide);

#endif
