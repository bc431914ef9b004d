// See include/CBuildInfo.h.
#include "CBuildInfo.h"

#ifndef PIPELINECTL_REVISION
#define PIPELINECTL_REVISION "unknown"
#endif

const char *pk_build_revision(void) { return PIPELINECTL_REVISION; }
