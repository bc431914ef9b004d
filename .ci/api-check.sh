#!/usr/bin/env bash
# The public API is a promise (docs/library.md): within a major version it only grows. This
# compares the library products' Swift API with the last release's, named in .ci/api-baseline
# ("VERSION COMMIT": a commit is in every full clone, where a tag may not be), and fails on any
# break. `make test` runs it; the baseline's build is kept in .build/api-baseline-COMMIT.
# PipelineVapor is not compared: without its trait the module is empty. API_CHECK_TRAITS: the
# package traits the current tree is built with (make passes --traits OTLP, so that the check
# reuses the tests' build instead of rebuilding .build/debug without them).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r version commit < .ci/api-baseline
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "api-check: the baseline commit $commit (release $version, .ci/api-baseline) is not in this clone; a shallow clone cannot be compared" >&2
  exit 1
fi
echo "api-check: comparing the public API with release $version ($commit)"
# One kind of change is announced rather than avoided: a new case of `Slot` (a new kind of
# plugin) or of `Gravity` (a new placement). docs/library.md says both grow and that a switch
# over them needs `default:`.
# .ci/api-accepted lists each such change, one line as the tool prints it after "API breakage: ";
# any other break fails.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
.ci/quiet.sh swift package ${API_CHECK_TRAITS:-} diagnose-api-breaking-changes "$commit" \
  --products PipelineKit Plugins MagickKit PipelineHummingbird \
  --baseline-dir ".build/api-baseline-$commit" > "$out" 2>&1 || status=$?
cat "$out"
[ "$status" = 0 ] && exit 0
unaccepted=$(grep -o 'API breakage: .*' "$out" | sed 's/^API breakage: //' | grep -vxF -f <(grep -v '^#' .ci/api-accepted | sed '/^$/d') || true)
if [ -n "$unaccepted" ] || ! grep -q 'API breakage: ' "$out"; then
  echo "api-check: breaking changes not listed in .ci/api-accepted:" >&2
  echo "${unaccepted:-(the tool failed without naming a change)}" >&2
  exit 1
fi
echo "api-check: every change the tool names is an announced one (.ci/api-accepted)"
