#ifndef PIPELINEKIT_CHEIF_SHIM_H
#define PIPELINEKIT_CHEIF_SHIM_H
// libheif, for AVIF and HEIC shrink-on-load (Plugins/Decoders/HEIFReducer.swift): the primary
// image decoded to interleaved 8-bit RGB(A), reduced in Swift before ImageMagick sees it.
#include <libheif/heif.h>
#endif
