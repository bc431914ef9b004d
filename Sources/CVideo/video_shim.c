// Poster frames from video: see include/video_shim.h. Everything the file names (nested files,
// playlists, references) is refused: the demuxer gets the caller's I/O and nothing else.
#include "video_shim.h"
#include "video_colour.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pk_video {
    AVFormatContext *format;
    AVIOContext *io;
    AVCodecContext *codec;
    AVFrame *frame;
    AVPacket *packet;
    int stream;
    int rotation;
    int64_t position;
    int64_t deadline_ms;
    void *opaque;
    pk_video_read read;
    pk_video_seek seek;
};

int64_t pk_video_now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void say(char *error, int size, const char *what, int code) {
    if (!error || size <= 0) return;
    if (code < 0) {
        char reason[128];
        av_strerror(code, reason, sizeof reason);
        snprintf(error, (size_t)size, "%s: %s", what, reason);
    } else {
        snprintf(error, (size_t)size, "%s", what);
    }
}

static int io_read(void *opaque, uint8_t *buffer, int size) {
    pk_video *video = opaque;
    int count = video->read(video->opaque, buffer, size);
    if (count == 0) return AVERROR_EOF;
    if (count < 0) return AVERROR(EIO);
    video->position += count;
    return count;
}

static int64_t io_seek(void *opaque, int64_t offset, int whence) {
    pk_video *video = opaque;
    whence &= ~AVSEEK_FORCE;
    if (whence == AVSEEK_SIZE) return video->seek(video->opaque, PK_VIDEO_SIZE);
    int64_t target = offset;
    if (whence == SEEK_CUR) target = video->position + offset;
    else if (whence == SEEK_END) {
        int64_t size = video->seek(video->opaque, PK_VIDEO_SIZE);
        if (size < 0) return -1;
        target = size + offset;
    } else if (whence != SEEK_SET) return -1;
    if (target < 0) return -1;
    int64_t moved = video->seek(video->opaque, target);
    if (moved >= 0) video->position = moved;
    return moved;
}

// A demuxer that asks for another file (an HLS playlist's segments, a concat list, a QuickTime
// reference) gets none.
static int refuse_nested(struct AVFormatContext *s, AVIOContext **pb, const char *url, int flags, AVDictionary **options) {
    (void)s; (void)pb; (void)url; (void)flags; (void)options;
    return AVERROR(EPERM);
}

static int interrupted(void *opaque) {
    pk_video *video = opaque;
    return video->deadline_ms > 0 && pk_video_now_ms() > video->deadline_ms;
}

static int listed(const char *name, const char *list) {
    size_t length = strlen(name);
    for (const char *at = list; at && *at;) {
        const char *end = strchr(at, ',');
        size_t span = end ? (size_t)(end - at) : strlen(at);
        if (span == length && strncmp(at, name, length) == 0) return 1;
        at = end ? end + 1 : NULL;
    }
    return 0;
}

static int rotation_of(AVStream *stream) {
    const uint8_t *matrix = av_stream_get_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, NULL);
    if (!matrix) return 0;
    double theta = -av_display_rotation_get((const int32_t *)matrix);
    if (isnan(theta)) return 0;
    theta -= 360 * floor(theta / 360 + 0.9 / 360);
    int quarter = (int)lround(theta / 90) % 4;
    return quarter * 90;
}

void pk_video_close(pk_video *video) {
    if (!video) return;
    if (video->packet) av_packet_free(&video->packet);
    if (video->frame) av_frame_free(&video->frame);
    if (video->codec) avcodec_free_context(&video->codec);
    if (video->format) avformat_close_input(&video->format);
    if (video->io) {
        av_freep(&video->io->buffer);
        avio_context_free(&video->io);
    }
    free(video);
}

static int open_stream(pk_video *video, const char *codecs, pk_video_info *info, int *kind, char *error, int error_size) {
    int found = -1;
    for (unsigned index = 0; index < video->format->nb_streams; index++) {
        AVStream *stream = video->format->streams[index];
        if (stream->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && !(stream->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
            found = (int)index;
            break;
        }
    }
    if (found < 0) {
        *kind = 1;
        say(error, error_size, "the file has no video stream", 0);
        return -1;
    }
    AVStream *stream = video->format->streams[found];
    const AVCodec *decoder = avcodec_find_decoder(stream->codecpar->codec_id);
    const char *codec = avcodec_get_name(stream->codecpar->codec_id);
    if (!decoder || !listed(codec, codecs)) {
        *kind = 2;
        snprintf(error, (size_t)error_size, "the video's codec (%s) is not one this build decodes", codec);
        return -1;
    }
    video->stream = found;
    video->codec = avcodec_alloc_context3(decoder);
    if (!video->codec) return say(error, error_size, "no decoder context", 0), -1;
    int result = avcodec_parameters_to_context(video->codec, stream->codecpar);
    if (result < 0) return say(error, error_size, "the codec's parameters", result), -1;
    video->codec->thread_count = 1;  // the engine's workers decode items side by side
    result = avcodec_open2(video->codec, decoder, NULL);
    if (result < 0) return say(error, error_size, "opening the decoder", result), -1;
    video->rotation = rotation_of(stream);
    info->width = stream->codecpar->width;
    info->height = stream->codecpar->height;
    info->rotation = video->rotation;
    info->duration = video->format->duration != AV_NOPTS_VALUE ? (double)video->format->duration / AV_TIME_BASE
        : stream->duration != AV_NOPTS_VALUE ? stream->duration * av_q2d(stream->time_base) : -1;
    info->frame_rate = stream->avg_frame_rate.den ? av_q2d(stream->avg_frame_rate) : 0;
    info->bit_rate = video->format->bit_rate > 0 ? video->format->bit_rate : stream->codecpar->bit_rate;
    snprintf(info->codec, sizeof info->codec, "%s", codec);
    snprintf(info->container, sizeof info->container, "%s", video->format->iformat->name);
    return 0;
}

pk_video *pk_video_open(void *opaque, pk_video_read read, pk_video_seek seek, const char *formats, const char *codecs,
                        int64_t deadline_ms, pk_video_info *info, int *kind, char *error, int error_size) {
    *kind = 0;
    memset(info, 0, sizeof *info);
    av_log_set_level(AV_LOG_QUIET);
    pk_video *video = calloc(1, sizeof *video);
    if (!video) return NULL;
    video->opaque = opaque;
    video->read = read;
    video->seek = seek;
    video->deadline_ms = deadline_ms;
    unsigned char *buffer = av_malloc(65536);
    video->io = buffer ? avio_alloc_context(buffer, 65536, 0, video, io_read, NULL, io_seek) : NULL;
    video->format = avformat_alloc_context();
    video->frame = av_frame_alloc();
    video->packet = av_packet_alloc();
    if (!video->io || !video->format || !video->frame || !video->packet) {
        if (!video->io) av_free(buffer);
        say(error, error_size, "out of memory", 0);
        pk_video_close(video);
        return NULL;
    }
    video->format->pb = video->io;
    video->format->flags |= AVFMT_FLAG_CUSTOM_IO;
    video->format->io_open = refuse_nested;
    video->format->format_whitelist = av_strdup(formats);
    video->format->protocol_whitelist = av_strdup("none");
    video->format->interrupt_callback.callback = interrupted;
    video->format->interrupt_callback.opaque = video;
    int result = avformat_open_input(&video->format, NULL, NULL, NULL);
    if (result < 0) {
        // avformat_open_input freed the context; the I/O is ours.
        video->format = NULL;
        say(error, error_size, interrupted(video) ? "reading the header ran past its time limit" : "not a video this build reads", result);
        pk_video_close(video);
        return NULL;
    }
    result = avformat_find_stream_info(video->format, NULL);
    if (result < 0) {
        say(error, error_size, interrupted(video) ? "reading the streams ran past its time limit" : "reading the streams", result);
        pk_video_close(video);
        return NULL;
    }
    if (open_stream(video, codecs, info, kind, error, error_size) < 0) {
        pk_video_close(video);
        return NULL;
    }
    return video;
}

// The frame, turned upright and scaled to width x height (the upright size) as RGB.
static int convert(pk_video *video, AVFrame *frame, int width, int height, uint8_t *rgb, char *error, int error_size) {
    int turned = video->rotation == 90 || video->rotation == 270;
    int scaledWidth = turned ? height : width, scaledHeight = turned ? width : height;
    // At its own size or near it, bicubic as ffmpeg's CLI converts (the same pixels); reduced
    // to half or less, area averaging, which does not alias.
    int flags = frame->width >= 2 * scaledWidth ? SWS_AREA : SWS_BICUBIC;
    // HDR (HLG, PQ) and BT.2020 frames go through 16-bit RGB to sRGB (video_colour.c).
    int transfer = frame->color_trc != AVCOL_TRC_UNSPECIFIED ? frame->color_trc : video->codec->color_trc;
    int primaries = frame->color_primaries != AVCOL_PRI_UNSPECIFIED ? frame->color_primaries : video->codec->color_primaries;
    int kind = pk_video_colour_kind(transfer, primaries);
    struct SwsContext *scaler = sws_getContext(frame->width, frame->height, frame->format, scaledWidth, scaledHeight,
                                               kind >= 0 ? AV_PIX_FMT_RGB48 : AV_PIX_FMT_RGB24, flags, NULL, NULL, NULL);
    if (!scaler) return say(error, error_size, "the frame's pixel format cannot be converted", 0), -1;
    int space = frame->colorspace == AVCOL_SPC_BT709 ? SWS_CS_ITU709
        : frame->colorspace == AVCOL_SPC_BT2020_NCL || frame->colorspace == AVCOL_SPC_BT2020_CL ? SWS_CS_BT2020
        : frame->colorspace == AVCOL_SPC_SMPTE240M ? SWS_CS_SMPTE240M : SWS_CS_DEFAULT;
    sws_setColorspaceDetails(scaler, sws_getCoefficients(space), frame->color_range == AVCOL_RANGE_JPEG,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    uint8_t *scaled = video->rotation ? malloc((size_t)scaledWidth * scaledHeight * 3) : rgb;
    if (!scaled) {
        sws_freeContext(scaler);
        return say(error, error_size, "out of memory", 0), -1;
    }
    uint16_t *deep = kind >= 0 ? malloc((size_t)scaledWidth * scaledHeight * 6) : NULL;
    if (kind >= 0 && !deep) {
        if (scaled != rgb) free(scaled);
        sws_freeContext(scaler);
        return say(error, error_size, "out of memory", 0), -1;
    }
    uint8_t *planes[4] = {deep ? (uint8_t *)deep : scaled, NULL, NULL, NULL};
    int strides[4] = {scaledWidth * (deep ? 6 : 3), 0, 0, 0};
    sws_scale(scaler, (const uint8_t *const *)frame->data, frame->linesize, 0, frame->height, planes, strides);
    sws_freeContext(scaler);
    if (deep) {
        pk_video_to_srgb(deep, scaled, (size_t)scaledWidth * scaledHeight, kind, primaries == AVCOL_PRI_BT2020);
        free(deep);
    }
    if (!video->rotation) return 0;
    for (int y = 0; y < scaledHeight; y++) {
        for (int x = 0; x < scaledWidth; x++) {
            int tx, ty;
            switch (video->rotation) {
            case 90: tx = scaledHeight - 1 - y; ty = x; break;
            case 180: tx = scaledWidth - 1 - x; ty = scaledHeight - 1 - y; break;
            default: tx = y; ty = scaledWidth - 1 - x; break;
            }
            memcpy(rgb + ((size_t)ty * width + tx) * 3, scaled + ((size_t)y * scaledWidth + x) * 3, 3);
        }
    }
    free(scaled);
    return 0;
}

static double time_of(pk_video *video, AVFrame *frame) {
    AVStream *stream = video->format->streams[video->stream];
    int64_t pts = frame->best_effort_timestamp != AV_NOPTS_VALUE ? frame->best_effort_timestamp : frame->pts;
    if (pts == AV_NOPTS_VALUE) return -1;
    int64_t start = stream->start_time != AV_NOPTS_VALUE ? stream->start_time : 0;
    return (pts - start) * av_q2d(stream->time_base);
}

// The next decoded frame: 1 when one came, 0 at the end of the stream, -1 on an error. With
// `keyframes_only`, packets that are not keyframes are not decoded, and each keyframe is decoded
// alone (the decoder drained, then reset).
static int next_frame(pk_video *video, int keyframes_only, char *error, int error_size) {
    for (;;) {
        if (video->deadline_ms > 0 && pk_video_now_ms() > video->deadline_ms) {
            return say(error, error_size, "the decode ran past its time limit", 0), -1;
        }
        int result = avcodec_receive_frame(video->codec, video->frame);
        if (result == 0) return 1;
        if (result == AVERROR_EOF) return 0;
        if (result != AVERROR(EAGAIN)) return say(error, error_size, "decoding a frame", result), -1;
        result = av_read_frame(video->format, video->packet);
        if (result == AVERROR_EOF) {
            avcodec_send_packet(video->codec, NULL);
            continue;
        }
        if (result < 0) return say(error, error_size, "reading the video", result), -1;
        int wanted = video->packet->stream_index == video->stream && (!keyframes_only || (video->packet->flags & AV_PKT_FLAG_KEY));
        if (wanted) {
            if (keyframes_only) avcodec_flush_buffers(video->codec);
            result = avcodec_send_packet(video->codec, video->packet);
            if (keyframes_only && result >= 0) result = avcodec_send_packet(video->codec, NULL);
        }
        av_packet_unref(video->packet);
        if (wanted && result < 0 && result != AVERROR(EAGAIN)) return say(error, error_size, "decoding a packet", result), -1;
    }
}

int pk_video_frame_at(pk_video *video, double seconds, int width, int height, uint8_t *rgb, double *frame_time,
                      int64_t deadline_ms, char *error, int error_size) {
    video->deadline_ms = deadline_ms;
    AVStream *stream = video->format->streams[video->stream];
    int64_t start = stream->start_time != AV_NOPTS_VALUE ? stream->start_time : 0;
    int64_t target = start + (int64_t)llround(seconds / av_q2d(stream->time_base));
    if (seconds > 0) {
        int result = av_seek_frame(video->format, video->stream, target, AVSEEK_FLAG_BACKWARD);
        if (result < 0) result = av_seek_frame(video->format, video->stream, target, AVSEEK_FLAG_BACKWARD | AVSEEK_FLAG_ANY);
        if (result < 0) return say(error, error_size, "seeking", result), -1;
    }
    avcodec_flush_buffers(video->codec);
    AVFrame *last = av_frame_alloc();
    if (!last) return say(error, error_size, "out of memory", 0), -1;
    int have = 0, result;
    while ((result = next_frame(video, 0, error, error_size)) == 1) {
        double at = time_of(video, video->frame);
        av_frame_unref(last);
        av_frame_move_ref(last, video->frame);
        have = 1;
        if (at < 0 || at + 1e-6 >= seconds) break;
    }
    if (result < 0 || !have) {
        av_frame_free(&last);
        if (result == 0) say(error, error_size, "the video has no frame to show", 0);
        return -1;
    }
    *frame_time = time_of(video, last);
    int converted = convert(video, last, width, height, rgb, error, error_size);
    av_frame_free(&last);
    return converted;
}

int pk_video_next_keyframe(pk_video *video, int width, int height, uint8_t *rgb, double *frame_time,
                           int64_t deadline_ms, char *error, int error_size) {
    video->deadline_ms = deadline_ms;
    int result = next_frame(video, 1, error, error_size);
    if (result <= 0) return result;
    *frame_time = time_of(video, video->frame);
    result = convert(video, video->frame, width, height, rgb, error, error_size);
    av_frame_unref(video->frame);
    avcodec_flush_buffers(video->codec);
    return result < 0 ? -1 : 1;
}

double pk_video_sharpness(const uint8_t *rgb, int width, int height) {
    if (width < 3 || height < 3) return 0;
    double sum = 0, squares = 0;
    long count = 0;
    for (int y = 1; y < height - 1; y++) {
        for (int x = 1; x < width - 1; x++) {
#define GREY(px, py) (0.299 * rgb[((size_t)(py) * width + (px)) * 3] + 0.587 * rgb[((size_t)(py) * width + (px)) * 3 + 1] \
                      + 0.114 * rgb[((size_t)(py) * width + (px)) * 3 + 2])
            double laplacian = GREY(x - 1, y) + GREY(x + 1, y) + GREY(x, y - 1) + GREY(x, y + 1) - 4 * GREY(x, y);
#undef GREY
            sum += laplacian;
            squares += laplacian * laplacian;
            count++;
        }
    }
    double mean = sum / count;
    return squares / count - mean * mean;
}
