#!/usr/bin/env bash
# Quality by a visual target against fixed qualities, on both bench corpora, for JPEG and WebP
# (and AVIF on the first BENCH_AVIF_FILES files of each corpus, default 12: its encodes are slow).
#
# Every source is resized to fit 1024x1024 once, then encoded by variants: the target
# (quality: { target_ssim: TARGET, min: 30, max: 95 }) and every fixed quality from 30 to 95, each
# scored with the same SSIM (a target with min = max reports its score). Per corpus and format:
# bytes of the target's outputs against the fixed quality of the same mean SSIM (the lowest whose
# mean reaches the target run's), and against the lowest fixed quality whose worst image still
# reaches TARGET; mean and worst SSIM. The time cost is from two more runs, target alone and
# quality 85 alone: encode ms per image (mean and worst) from the reports.
# Writes bench/results/quality-target.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PIPELINECTL:-.build/release/pipelinectl}
target=${TARGET:-0.98}
avif_files=${BENCH_AVIF_FILES:-12}
corpus=$(bash ../shared/bench/corpus.sh | tail -1); formats=$(bash ../shared/bench/formats.sh | tail -1)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

pipeline() {  # name encoder-plugin variants-yaml
  cat > "$work/$1.yaml" <<YAML
version: 1
name: $1
decoder: imagemagick
processors:
  - resize: { width: 1024, height: 1024 }
encoder: $2
output: { dir: $work/out-$1, name: "{hash8}-{variant}.{ext}", existing: replace }
variants:
$3
YAML
}

for format in jpeg webp avif; do
  grid="    target: { encoder: { $format: { quality: { target_ssim: $target, min: 30, max: 95 } } } }"
  for q in $(seq 30 95); do grid+=$'\n'"    q$q: { encoder: { $format: { quality: { target_ssim: 0.5, min: $q, max: $q } } } }"; done
  pipeline "grid-$format" "$format" "$grid"
  pipeline "time-target-$format" "$format" "    target: { encoder: { $format: { quality: { target_ssim: $target, min: 30, max: 95 } } } }"
  pipeline "time-fixed-$format" "$format" "    q85: { encoder: { $format: { quality: 85 } } }"
done

for name in corpus formats; do
  dir=$corpus; [ $name = formats ] && dir=$formats
  find "$dir" -type f -not -path "*/.*" | sort > "$work/$name.txt"
  head -n "$avif_files" "$work/$name.txt" > "$work/$name-avif.txt"
  for format in jpeg webp avif; do
    list="$work/$name.txt"; [ $format = avif ] && list="$work/$name-avif.txt"
    for run in grid time-target time-fixed; do
      rm -rf "$work/out-$run-$format"
      "$bin" run "$work/$run-$format.yaml" "$list" --report "$work/$name-$run-$format.json" --progress none > /dev/null 2>&1 || true
      [ $run = grid ] || continue
      # Output sizes by path, read before the next run replaces the directory.
      python3 - "$work/$name-$run-$format.json" > "$work/$name-sizes-$format.json" <<'PY'
import json, os, sys
report = json.load(open(sys.argv[1]))
print(json.dumps({o: os.path.getsize(o) for item in report["items"] for o in item.get("outputs", []) if os.path.exists(o)}))
PY
    done
  done
done

python3 - "$work" "$target" "$avif_files" <<'PY' | tee bench/results/quality-target.md
import json, statistics, sys
work, target, avif_files = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
qualities = list(range(30, 96))
print(f"# Quality by target: bytes and time against fixed qualities\n")
print(f"Target SSIM {target} (min 30, max 95), outputs fitted to 1024x1024. AVIF on the first {avif_files} files of each corpus.\n")
print("| corpus | format | images | target: KB total | mean SSIM | worst SSIM | missed | mean quality "
      "| fixed q, same mean SSIM | its KB | saved | its worst SSIM | fixed q, worst ≥ target | its KB | saved "
      "| encode ms/image, q85 | target, mean | target, worst |")
print("|" + "---|" * 18)
for name in ["corpus", "formats"]:
    for fmt in ["jpeg", "webp", "avif"]:
        try:
            grid = json.load(open(f"{work}/{name}-grid-{fmt}.json"))
            sizes = json.load(open(f"{work}/{name}-sizes-{fmt}.json"))
        except FileNotFoundError:
            continue
        items = [i for i in grid["items"] if not i.get("error") and len(i.get("outputs", [])) == 1 + len(qualities)]
        if not items:
            continue
        def column(index):
            return [(sizes[i["outputs"][index]], i["facts"]["encoding"][index]) for i in items]
        tgt = column(0)
        t_bytes = sum(b for b, _ in tgt); t_ssim = [e["ssim"] for _, e in tgt]
        missed = sum(1 for _, e in tgt if not e.get("target_met"))
        t_q = statistics.mean(e["quality"] for _, e in tgt)
        fixed = {q: column(1 + k) for k, q in enumerate(qualities)}
        mean_q = next((q for q in qualities if statistics.mean(e["ssim"] for _, e in fixed[q]) >= statistics.mean(t_ssim)), qualities[-1])
        floor_q = next((q for q in qualities if min(e["ssim"] for _, e in fixed[q]) >= target), None)
        def kb(q): return sum(b for b, _ in fixed[q]) / 1024
        def times(run):
            try:
                r = json.load(open(f"{work}/{name}-{run}-{fmt}.json"))
            except FileNotFoundError:
                return [0]
            return [i["timings_ms"]["encode"] for i in r["items"] if not i.get("error")] or [0]
        fixed_ms, target_ms = times("time-fixed"), times("time-target")
        floor_cells = (f"{floor_q} | {kb(floor_q):.0f} | {100 * (1 - t_bytes / 1024 / kb(floor_q)):.1f}%"
                       if floor_q else "none up to 95 | | ")
        print(f"| {name} | {fmt} | {len(items)} | {t_bytes / 1024:.0f} | {statistics.mean(t_ssim):.4f} | {min(t_ssim):.4f} | {missed} "
              f"| {t_q:.1f} | {mean_q} | {kb(mean_q):.0f} | {100 * (1 - t_bytes / 1024 / kb(mean_q)):.1f}% "
              f"| {min(e['ssim'] for _, e in fixed[mean_q]):.4f} | {floor_cells} "
              f"| {statistics.mean(fixed_ms):.1f} | {statistics.mean(target_ms):.1f} | {max(target_ms):.1f} |")
PY
