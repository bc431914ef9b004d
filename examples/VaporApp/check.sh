#!/usr/bin/env bash
# Builds this example and exercises it over real HTTP; `make test` in the repository runs it.
# The app mounts the repository's pipelines/; ../check-app.py says what is checked.
set -euo pipefail
cd "$(dirname "$0")"
# Its own scratch path: PipelineKit with the Vapor trait is compiled with other flags than the
# other examples' (a trait is defined for every target of the package), so sharing theirs would
# rebuild both on each run.
scratch=../.build-vapor
../../.ci/quiet.sh swift build --scratch-path "$scratch" --product vapor-app \
  || { echo "example: retrying with a clean build" >&2; rm -rf "$scratch"; ../../.ci/quiet.sh swift build --scratch-path "$scratch" --product vapor-app; }
bin="$scratch/debug/vapor-app"
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work" out .cache' EXIT
export PIPELINECTL_KEYS="main:$(python3 -c "import secrets; print(secrets.token_hex(32))")"
cd "$work"
"$OLDPWD/$bin" --pipelines "$OLDPWD/../../pipelines" --port 0 --jobs 1 --queue 0 > app.log 2> app.err &
pid=$!
for _ in $(seq 600); do grep -q "listening on" app.log 2>/dev/null && break; kill -0 $pid || { cat app.err; exit 1; }; sleep 0.1; done
port=$(sed -n 's/^listening on \([0-9]*\).*/\1/p' app.log)
[ -n "$port" ] || { cat app.log app.err; echo "example: the app did not start" >&2; exit 1; }
python3 "$OLDPWD/../check-app.py" "$port" app.log --upload multipart --disconnect completes
