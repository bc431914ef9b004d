#!/usr/bin/env bash
# The benchmark corpus: ../shared/bench/corpus.sh when it is there, else the same fetch (the
# wallpapers of Debian's plasma-workspace-wallpapers package: 39 JPEG + 33 PNG, 400x225 to
# 5120x2880). Prints the folder. Usage: bench/corpus.sh [DIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/../../shared/bench/corpus.sh" ] || [ -f "$here/../../shared/bench/corpus.sh" ]; then
  exec bash "$here/../../shared/bench/corpus.sh" "$@"
fi
dir=${1:-${BENCH_CORPUS:-${TMPDIR:-/tmp}/bench-corpus}}
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
mkdir -p "$dir/.deb"
( cd "$dir/.deb" && { ls plasma-workspace-wallpapers_*.deb >/dev/null 2>&1 || apt-get download plasma-workspace-wallpapers >/dev/null 2>&1; } )
dpkg -x "$dir"/.deb/plasma-workspace-wallpapers_*.deb "$dir/.deb/x"
n=0
find "$dir/.deb/x" -type f \( -iname '*.jpg' -o -iname '*.png' \) | sort | while read -r f; do
  n=$((n + 1)); cp "$f" "$dir/$(printf 'w%03d' "$n").${f##*.}"
done
rm -rf "$dir/.deb/x"
touch "$dir/.complete"
echo "$dir"
