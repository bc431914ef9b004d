// libavif 0.11 (Debian 12's libavif-dev): writes AVIF image sequences (animations), which
// ImageMagick 6's HEIF coder cannot. Used with libaom, one thread per encode.
#include <avif/avif.h>
