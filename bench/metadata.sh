#!/usr/bin/env bash
# The cost of keeping metadata: 256px JPEG thumbnails of both bench corpora with the default
# policy (ICC only: the source's metadata is not read) and with `metadata: { keep: [all, gps] }`
# (the header pinged once more for EXIF, XMP and IPTC, EXIF rebuilt, all written back), in
# interleaved rounds (median of BENCH_ROUNDS, default 3): wall and CPU seconds for the whole list,
# decode and encode ms per item (mean, and the worst item) from the reports.
# Writes bench/results/metadata.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PIPELINECTL:-.build/release/pipelinectl}
rounds=${BENCH_ROUNDS:-3}
corpus=$(bash ../shared/bench/corpus.sh | tail -1); formats=$(bash ../shared/bench/formats.sh | tail -1)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
find "$corpus" "$formats" -type f -not -path "*/.*" | sort > "$work/list.txt"
for variant in default all; do
  section=""; [ $variant = all ] && section="metadata: { keep: [all, gps] }"
  cat > "$work/$variant.yaml" <<YAML
version: 1
name: $variant
decoder: imagemagick
processors:
  - resize: { width: 256, height: 256 }
encoder: { jpeg: { quality: 82 } }
$section
output: { dir: $work/out-$variant, name: "{hash8}.{ext}", existing: replace }
YAML
done
. bench/rounds.sh
interleaved_rounds "$work" "$bin" "$rounds" default all
python3 - "$work" "$rounds" "$(wc -l < "$work/list.txt")" <<'PY' | tee bench/results/metadata.md
import json, statistics, sys
work, rounds, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(f"# metadata: cost\n\n{files} files (both bench corpora), 256px JPEG thumbnails, median of {rounds} interleaved rounds.\n")
print("| metadata | wall s | CPU s | decode ms/item, mean | worst | encode ms/item, mean | worst |\n|---|---|---|---|---|---|---|")
rows = {}
for variant in ["default", "all"]:
    cols = [[] for _ in range(6)]
    for r in range(1, rounds + 1):
        e, u, s = map(float, open(f"{work}/{variant}-{r}.time").read().split())
        items = [i for i in json.load(open(f"{work}/{variant}-{r}.json"))["items"] if i["status"] == "ok"]
        decode = [i["timings_ms"]["decode"] for i in items]; encode = [i["timings_ms"]["encode"] for i in items]
        for c, v in zip(cols, [e, u + s, statistics.mean(decode), max(decode), statistics.mean(encode), max(encode)]): c.append(v)
    rows[variant] = [statistics.median(c) for c in cols]
    label = "ICC only (default)" if variant == "default" else "keep: [all, gps]"
    print(f"| {label} | " + " | ".join(f"{v:.2f}" for v in rows[variant]) + " |")
d, a = rows["default"], rows["all"]
print(f"\nKeeping everything adds {a[2] - d[2]:.2f} ms of decode and {a[4] - d[4]:.2f} ms of encode per item on average, "
      f"{a[1] - d[1]:.2f} CPU s over {files} files; wall {a[0] / d[0]:.3f}x.")
PY
