#!/usr/bin/env bash
# PNG answers' compression: libpng through zlib against libdeflate whole (the PNG writer's two
# paths), on the 512 px thumbnails (ImageMagick's Lanczos) of every PNG in both bench corpora, at
# levels 5 (the default) and 6. Compiled with clang -O2 as SwiftPM compiles the C target.
# Prints a line per image and the medians of the ratios to zlib at 5. Usage: bench/png-deflate.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus=$(bash "$here/corpus.sh" | tail -1)
formats=$(bash "$here/../../shared/bench/formats.sh" | tail -1)
clang -O2 -I"$here/../Sources/CPNGImageData/include" "$here/png-deflate/compare.c" \
  "$here/../Sources/CPNGImageData/png_image_data.c" -o "$work/compare" -lpng16 -ldeflate -lz
for f in "$corpus"/*.png "$formats"/png/*.png; do
  case "$(identify -format '%[channels]' "$f[0]")" in *a*) map=RGBA; channels=4 ;; *) map=RGB; channels=3 ;; esac
  convert "$f[0]" -resize 512x512 -depth 8 "$map:$work/raw"
  size=$(convert "$f[0]" -resize 512x512 -format '%w %h' info:)
  "$work/compare" "$(basename "$f")" "$work/raw" $size $channels
done | tee "$work/lines"
python3 - "$work/lines" <<'PY'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    f = line.split()
    rows.append({(f[i], int(f[i + 1])): (float(f[i + 2]), int(f[i + 3])) for i in range(2, len(f), 4)})
base = ("zlib", 5)
print(f"\n{len(rows)} thumbnails; zlib at 5: median {statistics.median(r[base][0] for r in rows):.1f} ms, {sum(r[base][1] for r in rows):,} bytes in all")
for key in [("zlib", 6), ("libdeflate", 5), ("libdeflate", 6)]:
    times = [r[key][0] / r[base][0] for r in rows]
    sizes = [r[key][1] / r[base][1] - 1 for r in rows]
    print(f"{key[0]} at {key[1]}: time x{statistics.median(times):.2f} (x{min(times):.2f} to x{max(times):.2f}), "
          f"bytes {100 * statistics.median(sizes):+.1f}% ({100 * min(sizes):+.1f}% to {100 * max(sizes):+.1f}%), "
          f"{sum(r[key][1] for r in rows):,} in all")
PY
