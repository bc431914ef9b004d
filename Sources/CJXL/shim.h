// libjxl 0.7 (Debian 12's libjxl-dev): the decoder and the encoder, used without libjxl's thread
// pools (the engine's workers decode items side by side).
#include <jxl/decode.h>
#include <jxl/encode.h>
