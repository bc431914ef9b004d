#!/usr/bin/env bash
# Loader benchmark (issue 4): N URLs against a loopback server that waits 50 ms before each
# response, max_concurrent 16, loader and data cache only (`pipelinectl fetch`, no decode).
# Prints wall time against the ideal N x 50 ms / 16, and peak RSS for two list lengths.
# Usage: bench/loader.sh [N...]   (default: 1000 5000)
set -euo pipefail
cd "$(dirname "$0")/.."
make -s release >/dev/null
bin=.build/release/pipelinectl
work=$(mktemp -d)
trap 'kill $server_pid 2>/dev/null || true; rm -rf "$work"' EXIT

convert -size 320x240 plasma: -quality 85 "$work/image.jpg"
python3 bench/slow_server.py "$work/image.jpg" 50 > "$work/port" &
server_pid=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(head -1 "$work/port")

cat > "$work/fetch.yaml" <<YAML
version: 1
name: fetch-bench
loader:
  http: { max_concurrent: 16, allow_loopback: true }
data_cache:
  disk: { path: $work/cache, size_limit: 10GB }
encoder: jpeg
YAML

printf '%-8s %10s %10s %8s %12s\n' urls wall_s ideal_s ratio peak_rss_MB
for n in "${@:-1000 5000}"; do
  for count in $n; do
    rm -rf "$work/cache"
    seq "$count" | sed "s|.*|http://127.0.0.1:$port/img.jpg?n=&|" > "$work/urls.txt"
    /usr/bin/time -f "%e %M" -o "$work/time" "$bin" fetch "$work/fetch.yaml" "$work/urls.txt" > "$work/out" 2>&1 || { cat "$work/out"; exit 1; }
    read -r wall rss < "$work/time"
    ideal=$(python3 -c "print(f'{$count * 0.05 / 16:.2f}')")
    ratio=$(python3 -c "print(f'{$wall / ($count * 0.05 / 16):.2f}')")
    printf '%-8s %10s %10s %8s %12s\n' "$count" "$wall" "$ideal" "$ratio" "$((rss / 1024))"
    grep -q "$count items: $count ok" "$work/out" || { echo "not every item succeeded:"; cat "$work/out"; exit 1; }
  done
done
