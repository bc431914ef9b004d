#ifndef PIPELINEKIT_CSPNG_SHIM_H
#define PIPELINEKIT_CSPNG_SHIM_H
// libspng: a PNG decoder whose errors are return codes (libpng's are longjmps, which Swift cannot
// call across). Used to decode large PNGs row by row, reducing while reading.
#include <stddef.h>
#include <stdint.h>
#include <spng.h>
#endif
