#!/usr/bin/env bash
# Hostile and exotic inputs: how many files of DIR pipelinectl thumbnails, by outcome kind, against
# vipsthumbnail, on the same files. Nothing is timed; every file runs with a time limit, and a
# crash or hang shows as such. Writes bench/results/hostile.md.
#
#   bench/hostile.sh DIR          e.g. Pillow's Tests/images (about 1,000 files: rare formats,
#                                 fuzzer-found crashers, truncated files, decompression bombs)
#
# pipelinectl runs twice: with the decoder's defaults, and with fail_on: none and every opt-in
# format allowed (the setting comparable with vipsthumbnail, whose loaders default to fail_on none).
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$(cd "${1:?usage: bench/hostile.sh DIR}" && pwd)
bin=${PIPELINECTL:-.build/release/pipelinectl}
work=$(mktemp -d); [ -n "${KEEP:-}" ] && echo "keeping $work" >&2 || trap 'rm -rf "$work"' EXIT
find "$dir" -type f | sort > "$work/list.txt"
total=$(wc -l < "$work/list.txt")

pipeline() {  # $1 name, $2 decoder options
  cat > "$work/$1.yaml" <<YAML
version: 1
name: $1
decoder:
  imagemagick: $2
processors:
  - resize: { width: 128, height: 128 }
encoder: png
output:
  dir: $work/out-$1
  name: "{hash8}.{ext}"
YAML
  local start=$(date +%s.%N)
  timeout 1800 "$bin" run "$work/$1.yaml" "$work/list.txt" --item-timeout 30s --report "$work/$1.json" > "$work/$1.log" 2>&1
  echo "pipelinectl ($1): exit $?, $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" >&2
}
pipeline defaults "{}"
pipeline permissive "{ fail_on: none, formats: [jpeg, png, gif, webp, tiff, bmp, ico, heic, avif, jp2, pnm, tga, pcx, psd, sgi, sun, dds, fits, xbm, xpm] }"

mkdir -p "$work/vips"
vips_ok=0; vips_crash=0; vips_timeout=0
while IFS= read -r file; do
  timeout 30 vipsthumbnail "$file" -s 128 -o "$work/vips/$(echo "$file" | md5sum | cut -c1-12).png" >/dev/null 2>&1
  status=$?
  # vipsthumbnail exits 255 (-1) on a file it cannot read; a signal is a crash.
  case $status in
    0) vips_ok=$((vips_ok + 1)); echo "$file" >> "$work/vips-ok.txt";;
    124) vips_timeout=$((vips_timeout + 1));;
    129|13[0-9]|1[4-9][0-9]) vips_crash=$((vips_crash + 1));;
  esac
done < "$work/list.txt"
touch "$work/vips-ok.txt"

python3 - "$work" "$total" "$vips_ok" "$vips_crash" "$vips_timeout" "$dir" <<'PY' | tee bench/results/hostile.md
import json, sys, collections
work, total, vips_ok, vips_crash, vips_timeout, source = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
print(f"# Hostile and exotic inputs\n\n{total} files from `{source}`; thumbnails fitted to 128x128, each file with a 30 s limit.\n")
print("| run | thumbnailed | degraded | failed, by kind |\n|---|---|---|---|")
for name in ["defaults", "permissive"]:
    try:
        report = json.load(open(f"{work}/{name}.json"))
    except Exception as error:
        print(f"| pipelinectl {name} | no report ({error}) | | |"); continue
    items = report["items"]
    ok = sum(1 for i in items if i["status"] == "ok")
    degraded = sum(1 for i in items if i.get("degraded"))
    kinds = collections.Counter(i["error"]["kind"] for i in items if i["status"] == "failed")
    print(f"| pipelinectl {name} | {ok} of {len(items)} | {degraded} | " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()) + " |")
print(f"| vipsthumbnail (fail_on none) | {vips_ok} of {total} | | crashed {vips_crash}, timed out {vips_timeout} |")
vips = set(open(f"{work}/vips-ok.txt").read().split("\n")) - {""}
try:
    ours = {i["source"]: i for i in json.load(open(f"{work}/permissive.json"))["items"]}
    missed = sorted((s, i["error"]) for s, i in ours.items() if i["status"] != "ok" and s in vips)
    extra = sum(1 for s, i in ours.items() if i["status"] == "ok" and s not in vips)
    print(f"\nThumbnailed by pipelinectl (permissive) and not by vipsthumbnail: {extra}. "
          f"By vipsthumbnail and not by pipelinectl: {len(missed)}:\n")
    for source, error in missed:
        print(f"- `{source.replace(source.rsplit('/', 1)[0] + '/', '')}`: {error['kind']}: {error['message'][:160]}")
except Exception as error:
    print(f"\n(no comparison: {error})")
PY
