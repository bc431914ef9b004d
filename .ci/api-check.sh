#!/usr/bin/env bash
# The public API is a promise (docs/library.md): within a major version it only grows. This
# compares the library products' Swift API with the last release's, named in .ci/api-baseline
# ("VERSION COMMIT": a commit is in every full clone, where a tag may not be), and fails on any
# break. `make test` runs it; the baseline's build is kept in .build/api-baseline-COMMIT.
# PipelineVapor is not compared: without its trait the module is empty.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r version commit < .ci/api-baseline
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "api-check: the baseline commit $commit (release $version, .ci/api-baseline) is not in this clone; a shallow clone cannot be compared" >&2
  exit 1
fi
echo "api-check: comparing the public API with release $version ($commit)"
.ci/quiet.sh swift package diagnose-api-breaking-changes "$commit" \
  --products PipelineKit Plugins MagickKit PipelineHummingbird \
  --baseline-dir ".build/api-baseline-$commit"
