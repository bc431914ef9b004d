#!/usr/bin/env bash
# The Swift API documentation of PipelineKit, MagickKit and PipelineHummingbird (DocC), for plugin authors: symbol graphs
# from SwiftPM (public symbols only), converted by the toolchain's docc into static sites.
#
#   docs/tools/api-docs.sh OUTDIR     # writes OUTDIR/PipelineKit and OUTDIR/MagickKit
#
# `make docs` writes them to site/api/. A DocC site loads its pages by fetch, so serve it over HTTP
# (python3 -m http.server -d site) and open /api/PipelineKit/documentation/pipelinekit/. A link to
# a symbol that does not exist fails the build.
set -euo pipefail
out=$(realpath -m "$1")
cd "$(dirname "$0")/../.."
swift package dump-symbol-graph --minimum-access-level public >/dev/null 2>&1
graphs=$(swift build --show-bin-path)/../symbolgraph
work=$(mktemp -d "${TMPDIR:-/tmp}/pipelinekit-api.XXXXXX")
trap 'rm -rf "$work"' EXIT
for module in PipelineKit MagickKit PipelineHummingbird; do
    mkdir -p "$work/$module"
    cp "$graphs/$module.symbols.json" "$work/$module/"
    cp "$graphs/$module"@*.symbols.json "$work/$module/" 2>/dev/null || true
    docc convert --additional-symbol-graph-dir "$work/$module" --fallback-display-name "$module" \
        --fallback-bundle-identifier "dev.pipelinekit.$module" --output-path "$work/out-$module" \
        --transform-for-static-hosting --hosting-base-path "api/$module" > "$work/$module.log" 2>&1
    # Broken symbol links fail; missing parameter descriptions do not.
    if grep -E "doesn't exist at|can't be linked" "$work/$module.log"; then
        echo "api-docs: $module has broken symbol links (above)" >&2
        exit 1
    fi
    rm -rf "$out/$module" && mkdir -p "$out" && mv "$work/out-$module" "$out/$module"
done
echo "api-docs: $out/PipelineKit, $out/MagickKit and $out/PipelineHummingbird"
