#!/usr/bin/env bash
# Runs a `swift build` or `swift test` command and passes its output through, less the lines that
# are not about our code, so that a warning on screen is one of ours (and our targets fail the
# build on any: Package.swift's treatAllWarnings):
#   - a dependency's manifest warnings ("'swift-distributed-tracing': found 1 file(s) which are
#     unhandled", and the path lines under it): theirs to fix, not ours;
#   - "prohibited flag(s): -fopenmp, -DMAGICKCORE_...": SwiftPM drops these from MagickWand's
#     pkg-config flags; Sources/CMagickWand/shim.h defines the two macros itself, and OpenMP is
#     ImageMagick's own business inside its library;
#   - the linker's "the use of `mktemp' is dangerous" about the toolchain's static Foundation
#     (libFoundationEssentials.a), linked by --static-swift-stdlib: Swift's, not ours.
# The command's exit status is kept. Usage: .ci/quiet.sh swift build --build-tests
set -o pipefail
"$@" 2>&1 | awk '
  /^warning: prohibited flag\(s\):/ && /-fopenmp|MAGICKCORE_/ { next }
  /^warning: .[A-Za-z0-9._-]+.: found [0-9]+ file\(s\) which are unhandled/ {
    if ($0 !~ /^warning: .pipelinekit.:/) { dropping = 1; next }
  }
  /libFoundationEssentials\.a\(.*warning: the use of .mktemp. is dangerous/ { next }
  dropping && /^    / { next }
  { dropping = 0; print; fflush() }
'
