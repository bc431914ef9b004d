#!/usr/bin/env bash
# The cost of `analyze`: 256px JPEG thumbnails of both bench corpora with and without `analyze`
# first in the chain, in interleaved rounds (median of BENCH_ROUNDS, default 3): wall and CPU
# seconds for the whole list, and the per-item process time (mean, and the worst item) from the
# reports. Writes bench/results/analyze.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PIPELINECTL:-.build/release/pipelinectl}
rounds=${BENCH_ROUNDS:-3}
corpus=$(bash ../shared/bench/corpus.sh | tail -1); formats=$(bash ../shared/bench/formats.sh | tail -1)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
find "$corpus" "$formats" -type f -not -path "*/.*" | sort > "$work/list.txt"
for variant in plain analyze; do
  steps="  - resize: { width: 256, height: 256 }"
  [ $variant = analyze ] && steps=$'  - analyze\n'"$steps"
  cat > "$work/$variant.yaml" <<YAML
version: 1
name: $variant
decoder: imagemagick
processors:
$steps
encoder: { jpeg: { quality: 82 } }
output: { dir: $work/out-$variant, name: "{hash8}.{ext}", existing: replace }
YAML
done
. bench/rounds.sh
interleaved_rounds "$work" "$bin" "$rounds" plain analyze
python3 - "$work" "$rounds" "$(wc -l < "$work/list.txt")" <<'PY' | tee bench/results/analyze.md
import json, statistics, sys
work, rounds, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(f"# analyze: cost\n\n{files} files (both bench corpora), 256px JPEG thumbnails, median of {rounds} interleaved rounds.\n")
print("| chain | wall s | CPU s | process ms per item, mean | worst item |\n|---|---|---|---|---|")
rows = {}
for variant in ["plain", "analyze"]:
    walls, cpus, means, worsts = [], [], [], []
    for r in range(1, rounds + 1):
        e, u, s = map(float, open(f"{work}/{variant}-{r}.time").read().split())
        walls.append(e); cpus.append(u + s)
        items = [i for i in json.load(open(f"{work}/{variant}-{r}.json"))["items"] if i["status"] == "ok"]
        ms = [i["timings_ms"]["process"] for i in items]
        means.append(sum(ms) / len(ms)); worsts.append(max(ms))
    rows[variant] = [statistics.median(x) for x in (walls, cpus, means, worsts)]
    print(f"| {'resize' if variant == 'plain' else 'analyze, resize'} | " + " | ".join(f"{v:.2f}" for v in rows[variant]) + " |")
p, a = rows["plain"], rows["analyze"]
print(f"\nanalyze adds {a[2] - p[2]:.2f} ms of process time per item on average, {a[1] - p[1]:.2f} CPU s over {files} files "
      f"({(a[1] - p[1]) / files * 1000:.1f} ms per file); wall {a[0] / p[0]:.3f}x.")
PY
