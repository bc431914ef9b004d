#!/usr/bin/env bash
# Shard skip rate (issue 19): how many lines per second a shard reads and skips as other shards'.
# A list of LINES https URLs of realistic length (about 70 bytes); one run with --shard 0/1000000,
# so all but about LINES/1e6 lines are skipped (those few fail at once: the host does not exist
# on a test machine, and a 1 s timeout bounds them). Startup is measured on a 2,000-line list
# and reported separately. Prints each run, then min, mean and max lines/s.
# Usage: bench/shard-skip.sh [LINES] [RUNS]   (default: 2000000 5)
set -euo pipefail
cd "$(dirname "$0")/.."
lines=${1:-2000000}
runs=${2:-5}
make -s release >/dev/null 2>&1 || make release
bin=.build/release/pipelinectl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$lines" > "$work/urls.txt" <<'PY'
import sys
n = int(sys.argv[1])
out = sys.stdout
for i in range(n):
    out.write(f"http://127.0.0.1/photos/2026/{i % 977}/{i}-large-original.jpg?w=1600\n")
PY
head -2000 "$work/urls.txt" > "$work/short.txt"
cat > "$work/skip.yaml" <<YAML
loader:
  http: { retry_attempts: 1, timeout: 1s }
encoder: png
output: { dir: $work/out }
YAML
# pipelinectl exits 1 here (the few lines this shard owns fail): that is expected.
start_s=$( { /usr/bin/time -f "%e" $bin run "$work/skip.yaml" "$work/short.txt" --shard 0/1000000 --progress none >/dev/null || true; } 2>&1 | tail -1)
echo "list: $lines lines, $(du -m "$work/urls.txt" | cut -f1) MB; startup on 2000 lines: ${start_s} s"
rates=()
for r in $(seq "$runs"); do
  out=$( { /usr/bin/time -f "%e %U %M" $bin run "$work/skip.yaml" "$work/urls.txt" --shard 0/1000000 --progress none || true; } 2>&1 )
  read -r wall user rss <<< "$(echo "$out" | tail -1)"
  skipped=$(echo "$out" | sed -n 's/.*: \([0-9]*\) lines of the list belong to other shards/\1/p')
  rate=$(python3 -c "print(int($skipped / max($wall - $start_s, 0.001)))")
  rates+=("$rate")
  echo "run $r: $skipped skipped in $wall s wall ($user s user, peak RSS $((rss / 1024)) MB): $rate lines/s"
done
python3 -c "import sys; r=[int(x) for x in sys.argv[1:]]; print(f'lines/s: min {min(r)}, mean {sum(r)//len(r)}, max {max(r)}')" "${rates[@]}"
