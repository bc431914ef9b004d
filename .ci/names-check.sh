#!/usr/bin/env bash
# Format names ("jpeg", .png, "webp", ...) and backend plugin names ("s3", "sqs", "postgres",
# "http", "imagemagick") belong to the format table, the registry and the plugins' own folders:
# anywhere else they are a switch over names that the next format or backend gets wrong. This
# lists every other place that names one, except the places below, each with its reason.
# Part of `make test`; exits 1 when it finds one.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='"(jpe?g|png|webp|gif|tiff?|avif|heic|heif|s3|sqs|postgres(ql)?|https?|imagemagick)"|[^A-Za-z0-9_]\.(jpeg|png|webp|gif|tiff|avif|heic)\b'
# path (a folder ends with /)             reason
exceptions=(
  "Sources/Plugins/"                       # the plugins' own folders
  "Sources/MagickKit/"                     # ImageMagick's wrapper: its coders' names are its vocabulary
  "Sources/PipelineKit/Core/ImageFormat.swift"   # the format table
  "Sources/PipelineKit/Core/FormatSniffer.swift" # the format table's signatures
  "Sources/PipelineKit/Registry/"          # the registry
  "Sources/PipelineKit/Serving/SourceBoundary.swift"  # URL schemes where sources are parsed (default ports)
  "Sources/PipelineKit/Serving/Pipeline+Service.swift" # media types where formats are negotiated (Accept), and the web URL scheme
  "Sources/PipelineKit/Stages/OutputDestination.swift" # media types of outputs by extension (Content-Type)
)
found=0
while IFS= read -r hit; do
  file=${hit%%:*}
  skip=0
  for allowed in "${exceptions[@]}"; do
    if [[ "$allowed" == */ && "$file" == "$allowed"* ]] || [[ "$file" == "$allowed" ]]; then skip=1; break; fi
  done
  # Comments may name formats and plugins.
  line=${hit#*:*:}
  [[ "$line" =~ ^[[:space:]]*/// || "$line" =~ ^[[:space:]]*// ]] && skip=1
  if [ $skip = 0 ]; then echo "names-check: $hit"; found=1; fi
done < <(grep -rnE "$pattern" Sources --include='*.swift' || true)
if [ $found = 1 ]; then
  echo "names-check: a format or plugin name outside the format table, the registry and the plugins' folders (see .ci/names-check.sh)"
  exit 1
fi
echo "names-check: no format or backend names outside their places"
