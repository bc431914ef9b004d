// Poster frames from video through libavformat, libavcodec and libswscale 5.1 (Debian 12), with
// the caller's own I/O only: no protocol, no nested file, no format outside the allowed demuxers.
#ifndef PK_VIDEO_SHIM_H
#define PK_VIDEO_SHIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Reads up to `size` bytes at the caller's current position into `buffer`: the count read,
/// 0 at the end, -1 on an error (the caller keeps why).
typedef int (*pk_video_read)(void *opaque, uint8_t *buffer, int size);
/// Moves to `offset` from the start; returns the new position, or the file's size when `offset`
/// is -1 (PK_VIDEO_SIZE), or -1 when it cannot.
typedef int64_t (*pk_video_seek)(void *opaque, int64_t offset);
#define PK_VIDEO_SIZE (-1)

typedef struct pk_video pk_video;

typedef struct {
    int width, height;            /// as coded, before rotation
    int rotation;                 /// clockwise degrees to show it upright: 0, 90, 180 or 270
    double duration;              /// seconds; negative when the container does not say
    double frame_rate;            /// frames a second; 0 when unknown
    int64_t bit_rate;             /// bits a second; 0 when unknown
    char codec[32];               /// libavcodec's name of the video stream's codec
    char container[32];           /// the demuxer's name (mov,mp4,... or matroska,webm)
} pk_video_info;

/// Opens a video through `read` and `seek` only, with one of `formats` (libavformat's demuxer
/// names, comma-separated), and finds its first video stream and a decoder among `codecs`
/// (libavcodec's codec names, comma-separated). NULL on failure, with why in `error` and, in
/// `kind`, 1 for "no video stream", 2 for "codec not allowed", 0 for anything else. Reading the
/// header stops at `deadline_ms` (a CLOCK_MONOTONIC time in ms, 0 for none).
pk_video *pk_video_open(void *opaque, pk_video_read read, pk_video_seek seek, const char *formats, const char *codecs,
                        int64_t deadline_ms, pk_video_info *info, int *kind, char *error, int error_size);

/// Decodes the first frame shown at or after `seconds` (from the keyframe before it), turned
/// upright and scaled to `width` x `height` as RGB, 3 bytes a pixel, into `rgb`. `frame_time`
/// receives the frame's time in seconds. `deadline_ms` (a CLOCK_MONOTONIC time in ms, 0 for none)
/// stops a decode that runs past it. 0 on success, -1 with why in `error`.
int pk_video_frame_at(pk_video *video, double seconds, int width, int height, uint8_t *rgb, double *frame_time,
                      int64_t deadline_ms, char *error, int error_size);

/// Decodes the next keyframe from the current position (after an open: the first), turned and
/// scaled as pk_video_frame_at does. 1 when one was decoded, 0 at the end, -1 on an error.
int pk_video_next_keyframe(pk_video *video, int width, int height, uint8_t *rgb, double *frame_time,
                           int64_t deadline_ms, char *error, int error_size);

/// The frame's sharpness: the variance of a Laplacian over its grey, in 0-255 units squared.
double pk_video_sharpness(const uint8_t *rgb, int width, int height);

/// CLOCK_MONOTONIC now, in milliseconds.
int64_t pk_video_now_ms(void);

void pk_video_close(pk_video *video);

#ifdef __cplusplus
}
#endif

#endif
