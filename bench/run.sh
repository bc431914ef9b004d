#!/usr/bin/env bash
# The throughput, memory and quality benchmark (issue 9): pipelinectl against vipsthumbnail and
# ImageMagick's convert on the corpus, in one run. Installs the peers when missing (Debian:
# libvips-tools, imagemagick, curl), builds the release binary, fetches the corpus, prints the
# table and writes it to bench/results/latest.md. Takes about fourteen minutes on two cores
# (BENCH_ONLY=formats: only the per-format table of both corpora, about four; BENCH_ONLY=huge:
# one 160 MP JPEG, PNG, strip TIFF and pyramidal TIFF at a time, made by vips, to bench/results/huge.md).
# Usage: bench/run.sh   (env: BENCH_ROUNDS=3 BENCH_LONG_LIST=20000 BENCH_SHORT_LIST=1000 BENCH_KEEP=1)
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v vipsthumbnail >/dev/null || missing+=(libvips-tools)
command -v compare >/dev/null && [ -x /usr/bin/convert ] || missing+=(imagemagick)
command -v curl >/dev/null || missing+=(curl)
command -v pngtopnm >/dev/null || missing+=(netpbm)        # codec floors (pngtopnm, tifftopnm)
command -v gif2rgb >/dev/null || missing+=(giflib-tools)   # codec floor for GIF
command -v cjxl >/dev/null || missing+=(libjxl-tools)      # the JPEG XL group (cjxl), its references and floor (djxl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  $( [ "$(id -u)" = 0 ] || echo sudo ) apt-get update -qq
  $( [ "$(id -u)" = 0 ] || echo sudo ) apt-get install -y -qq "${missing[@]}" >/dev/null
fi
make -s release >/dev/null
exec python3 bench/run.py
