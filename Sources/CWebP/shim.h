#ifndef PIPELINEKIT_CWEBP_SHIM_H
#define PIPELINEKIT_CWEBP_SHIM_H
// libwebp and libwebpdemux, for WebP shrink-on-load (Plugins/Formats/WebP/WebPReducer.swift): a still
// image or an animation's first frame decoded straight to a reduced size, 8 bits a channel.
#include <webp/decode.h>
#include <webp/demux.h>
#endif
