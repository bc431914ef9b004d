#!/usr/bin/env bash
# The example image pairs docs/stages.md shows for `gravity: faces`, `gravity: regions` and `redact`, made with the
# given pipelinectl from the face test set (Tests/PluginsTests/Fixtures/faces/make-face-set.py,
# whose photos `make test-deps` fetches). Written to docs/images/faces/ (not committed).
# Usage: docs/tools/face-examples.sh PIPELINECTL
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: docs/tools/face-examples.sh PIPELINECTL}
photos=.build/test-data/face_recognition-1.3.0/tests/test_images
[ -f "$photos/obama.jpg" ] || { echo "face-examples: no face photos at $photos (make test-deps fetches them)" >&2; exit 1; }
out=docs/images/faces
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
skimage=$(python3 -c 'import os, skimage.data; print(os.path.dirname(skimage.data.__file__))') \
  || { echo "face-examples: scikit-image is missing (make test-deps installs it)" >&2; exit 1; }
python3 Tests/PluginsTests/Fixtures/faces/make-face-set.py "$photos" "$skimage" "$work/set" >/dev/null
mkdir -p "$out"
pipeline() {  # name, processors
  cat > "$work/$1.yaml" <<YAML
version: 1
name: $1
decoder: imagemagick
processors: $2
encoder: { jpeg: { quality: 82 } }
output: { dir: $work/$1, name: "{stem}.{ext}" }
YAML
  printf '%s\n' "$work/set/group-1.jpg" "$work/set/group-3.jpg" > "$work/list.txt"
  "$bin" run "$work/$1.yaml" "$work/list.txt" --progress none >/dev/null 2>"$work/log" || { cat "$work/log" >&2; exit 1; }
}
pipeline original '[ { resize: { width: 480 } } ]'
pipeline faces '[ { resize: { width: 240, height: 240, mode: fill, gravity: faces, upscale: false } } ]'
pipeline smart '[ { resize: { width: 240, height: 240, mode: fill, gravity: smart, upscale: false } } ]'
pipeline redacted '[ { redact: { mode: pixelate } }, { resize: { width: 480 } } ]'
cp "$work/original/group-1.jpg" "$out/group.jpg"
cp "$work/faces/group-1.jpg" "$out/group-faces.jpg"
cp "$work/smart/group-1.jpg" "$out/group-smart.jpg"
# A region a person marked (with exiftool, as Lightroom or digiKam would): the rightmost face, as the subject.
# (`gravity: faces` takes a marked face too: its picture is made before the mark.)
pipeline portrait-faces '[ { resize: { width: 160, height: 240, mode: fill, gravity: faces, upscale: false } } ]'
exiftool -q -overwrite_original '-XMP-mwg-rs:RegionInfo={AppliedToDimensions={W=1600,H=900,Unit=pixel},RegionList=[{Area={X=0.4616,Y=0.4528,W=0.0719,H=0.1278,Unit=normalized},Name=Subject,Type=Face}]}' "$work/set/group-1.jpg"
pipeline portrait-regions '[ { resize: { width: 160, height: 240, mode: fill, gravity: regions, upscale: false } } ]'
cp "$work/portrait-faces/group-1.jpg" "$out/portrait-faces.jpg"
cp "$work/portrait-regions/group-1.jpg" "$out/portrait-regions.jpg"
cp "$work/original/group-3.jpg" "$out/redact-before.jpg"
cp "$work/redacted/group-3.jpg" "$out/redact-after.jpg"
echo "face-examples: $(ls "$out" | wc -l) images in $out"
