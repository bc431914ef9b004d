#!/usr/bin/env bash
# PNG with libdeflate (Sources/CPNGImageData), against libpng and zlib alone, on every PNG in both
# bench corpora. Compiled with clang -O2 as SwiftPM compiles the C target.
# 1. Answers written: libpng through zlib against libdeflate whole (the PNG writer's two paths),
#    on the 512 px thumbnails (ImageMagick's Lanczos), at levels 5 (the default) and 6: a line per
#    image, then the medians of the ratios to zlib at 5.
# 2. Sources read: libpng's rows from the file against from the copy libdeflate inflated (the
#    reducer's two paths), the copy's making included: a line per file, then the ratios.
# Usage: bench/png-deflate.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus=$(bash "$here/corpus.sh" | tail -1)
formats=$(bash "$here/../../shared/bench/formats.sh" | tail -1)
clang -O2 -I"$here/../Sources/CPNGImageData/include" "$here/png-deflate/compare.c" \
  "$here/../Sources/CPNGImageData/png_image_data.c" -o "$work/compare" -lpng16 -ldeflate -lz
clang -O2 -I"$here/../Sources/CPNGImageData/include" "$here/png-deflate/inflate.c" \
  "$here/../Sources/CPNGImageData/png_image_data.c" -o "$work/inflate" -lpng16 -ldeflate -lz
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
echo
for f in "$corpus"/*.png "$formats"/png/*.png; do "$work/inflate" "$f"; done | tee "$work/reads"
python3 - "$work/reads" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
taken = [r for r in rows if len(r) == 5]
ratios = [float(r[3]) / float(r[2]) for r in taken]
print(f"\n{len(taken)} of {len(rows)} files read from the copy ({len(rows) - len(taken)} declined: interlaced, or over 24 MiB inflated); "
      f"rows {'all the same' if all(r[4] == 'same' for r in taken) else 'DIFFER'}; time x{statistics.median(ratios):.2f} "
      f"(x{min(ratios):.2f} to x{max(ratios):.2f}) of libpng's from the file")
PY
