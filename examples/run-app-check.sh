#!/usr/bin/env bash
# Builds an example app and exercises it over real HTTP with check-app.py; the apps' check.sh
# call it (`make test` runs those).
#   run-app-check.sh APP_DIR PRODUCT SCRATCH CHECK_APP_FLAGS...
set -euo pipefail
app_dir=$1 product=$2 scratch=$3
shift 3
cd "$app_dir"
../../.ci/quiet.sh swift build --scratch-path "$scratch" --product "$product" \
  || { echo "example: retrying with a clean build" >&2; rm -rf "$scratch"; ../../.ci/quiet.sh swift build --scratch-path "$scratch" --product "$product"; }
bin="$PWD/$scratch/debug/$product"
here=$PWD
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
export PIPELINECTL_KEYS="main:$(python3 -c "import secrets; print(secrets.token_hex(32))")"
cd "$work"
"$bin" --pipelines "$here/../../pipelines" --port 0 --jobs 1 --queue 0 > app.log 2> app.err &
pid=$!
for _ in $(seq 600); do grep -q "listening on" app.log 2>/dev/null && break; kill -0 $pid || { cat app.err; exit 1; }; sleep 0.1; done
port=$(sed -n 's/^listening on \([0-9]*\).*/\1/p' app.log)
[ -n "$port" ] || { cat app.log app.err; echo "example: the app did not start" >&2; exit 1; }
python3 "$here/../check-app.py" "$port" app.log "$@"
