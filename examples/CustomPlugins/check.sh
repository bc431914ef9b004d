#!/usr/bin/env bash
# Builds this example and checks it end to end; `make test` in the repository runs it.
set -euo pipefail
cd "$(dirname "$0")"
# After source files are added to the repository (this example's path dependency), SwiftPM can
# keep a stale build plan for it here and fail once with "cannot find 'X' in scope"; a clean build
# of the example then succeeds. A clean clone (CI) never meets it.
# Built in the scratch path the repository's examples share, so that PipelineKit is compiled once.
scratch=../.build-examples
../../.ci/quiet.sh swift build --scratch-path "$scratch" || { echo "example: retrying with a clean build" >&2; rm -rf "$scratch"; ../../.ci/quiet.sh swift build --scratch-path "$scratch"; }
./make-catalog.sh
bin=$scratch/debug/custom-pipelinectl
fail() { echo "example check failed: $*" >&2; exit 1; }

"$bin" validate catalog.yaml >/dev/null
# Output captured first: with pipefail, `grep -q` closing the pipe early would fail the writer (SIGPIPE).
described=$("$bin" plugins describe duotone)
grep -qF "dark  (color, default #1d2b53)" <<< "$described" || fail "describe duotone"
listed=$("$bin" plugins)
grep -qF "catalog  Loads catalog://SKU" <<< "$listed" || fail "plugins lists catalog"

# A custom plugin's options get the same validation as a built-in's.
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
sed 's/- duotone: { dark: "#1d2b53", light: "#ffcc66" }/- duotone: { drak: "#1d2b53", light: notacolour }/' catalog.yaml > "$work/broken.yaml"
if "$bin" validate "$work/broken.yaml" 2> "$work/errors"; then fail "broken pipeline validated"; fi
grep -qF "broken.yaml:14:20: error: unknown option 'variants.image.processors.0.duotone.drak'; did you mean 'dark'?" "$work/errors" \
  || { cat "$work/errors"; fail "typo in a custom option"; }

rm -rf out
"$bin" run catalog.yaml skus.txt --report out/report.json > "$work/run" 2>&1 || { cat "$work/run"; fail "run"; }
grep -qF "catalog: 3 items: 3 ok, 0 failed" "$work/run" || fail "run summary"
[ "$(identify -format '%m %wx%h' out/catalog/SKU-1001-image.jpg)" = "JPEG 400x300" ] || fail "SKU-1001 image"
[ "$(identify -format '%m %wx%h' out/catalog/SKU-1002-image.jpg)" = "JPEG 320x400" ] || fail "SKU-1002 image"
python3 - <<'PY' || fail "facts sidecars"
import json
for sku, size in [("1001", (400, 300)), ("1002", (320, 400))]:
    facts = json.load(open(f"out/catalog/SKU-{sku}-facts.json"))
    assert (facts["width"], facts["height"]) == size, facts
    assert facts["dominant_color"].startswith("#") and len(facts["dominant_color"]) == 7, facts
PY
# The wizard's white background becomes the duotone's light colour, #ffcc66.
python3 - <<'PY' || fail "duotone colours"
import subprocess
out = subprocess.run(["convert", "out/catalog/SKU-1003-image.jpg", "-format", "%[fx:int(255*p{3,3}.r)] %[fx:int(255*p{3,3}.g)] %[fx:int(255*p{3,3}.b)]", "info:"],
                     capture_output=True, text=True, check=True).stdout.split()
r, g, b = map(int, out)
assert abs(r - 0xff) <= 8 and abs(g - 0xcc) <= 8 and abs(b - 0x66) <= 8, (r, g, b)
PY
"$bin" test catalog.yaml

# A custom destination: every output appended to one tar archive, with its fingerprint.
sed 's|dir: out/catalog|dir: tar://out/catalog.tar|' catalog.yaml > "$work/archive.yaml"
listed=$("$bin" plugins)
grep -qE "tar +Appends every output to one tar archive" <<< "$listed" || fail "plugins lists the tar destination"
"$bin" run "$work/archive.yaml" skus.txt > "$work/run" 2>&1 || { cat "$work/run"; fail "run into a tar archive"; }
grep -qF "catalog: 3 items: 3 ok, 0 failed" "$work/run" || { cat "$work/run"; fail "archive run summary"; }
[ "$(tar -tf out/catalog.tar | grep -v PaxHeaders | sort | tr '\n' ' ')" = "SKU-1001-facts.json SKU-1001-image.jpg SKU-1002-facts.json SKU-1002-image.jpg SKU-1003-facts.json SKU-1003-image.jpg " ] \
  || { tar -tvf out/catalog.tar; fail "archive entries"; }
mkdir -p "$work/x" && tar -xf out/catalog.tar -C "$work/x"
[ "$(identify -format '%m %wx%h' "$work/x/SKU-1001-image.jpg")" = "JPEG 400x300" ] || fail "image from the archive"
# The same run again keeps every entry (the archive records fingerprints); another quality replaces them.
"$bin" run "$work/archive.yaml" skus.txt > "$work/run" 2>&1 || { cat "$work/run"; fail "second archive run"; }
grep -qF "catalog: 3 items: 0 ok, 3 kept, 0 failed" "$work/run" || { cat "$work/run"; fail "kept from the archive"; }
sed -i 's/quality: 85/quality: 40/' "$work/archive.yaml"
"$bin" run "$work/archive.yaml" skus.txt > "$work/run" 2>&1 || { cat "$work/run"; fail "third archive run"; }
grep -qF "catalog: 3 items: 3 ok, 0 failed" "$work/run" || { cat "$work/run"; fail "a changed pipeline writes again"; }
[ "$(tar -tf out/catalog.tar | grep -c 'SKU-1001-image.jpg$')" = 2 ] || fail "the new entry appended"
rm -rf "$work/x" && mkdir -p "$work/x" && tar -xf out/catalog.tar -C "$work/x"
[ "$(identify -format '%Q' "$work/x/SKU-1001-image.jpg")" = 40 ] || fail "the newest entry wins on extraction"
echo "custom plugins example: ok"
