#ifndef PIPELINEKIT_CMAGICKWAND_SHIM_H
#define PIPELINEKIT_CMAGICKWAND_SHIM_H
// pkg-config passes these as -D flags to C compilers; Swift's importer does not always see them,
// and without them the headers warn and may size Quantum wrongly. Debian's build is Q16, no HDRI.
#ifndef MAGICKCORE_HDRI_ENABLE
#define MAGICKCORE_HDRI_ENABLE 0
#endif
#ifndef MAGICKCORE_QUANTUM_DEPTH
#define MAGICKCORE_QUANTUM_DEPTH 16
#endif
// Include the C library first, with the same feature macros every other module sees; MagickWand's
// config header defines its own, which would give fd_set a different shape in this module.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>
#include <sys/select.h>
#include <sys/time.h>
#include <unistd.h>
#include <malloc.h>
#include <wand/MagickWand.h>

// M_MMAP_THRESHOLD is a macro Swift cannot call mallopt with directly from every module.
static inline int pk_set_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }
static inline int pk_set_trim_threshold(int bytes) { return mallopt(M_TRIM_THRESHOLD, bytes); }
#endif
