#!/usr/bin/env bash
# The service benchmark (issue 32): `pipelinectl serve` against thumbor 7.8 and two vipsthumbnail
# processes on the same photos, through a loopback nginx origin, load from wrk (bench/serve.py).
# Installs what is missing (Debian: nginx-light wrk libvips-tools imagemagick; PyPI: thumbor 7.8),
# builds the release binary. About 25 minutes on two cores.
# Usage: bench/serve.sh   (env: BENCH_SERVE_SECONDS=20 BENCH_OVERLOAD_SECONDS=60 BENCH_KEEP=1,
#                         BENCH_SERVE_ONLY=load: only stored results and overload,
#                         BENCH_SERVE_GROUPS="corpus JPEG,formats PNG": only these groups, table not saved)
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
missing=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
command -v wrk >/dev/null || missing+=(wrk)
command -v vipsthumbnail >/dev/null || missing+=(libvips-tools)
command -v convert >/dev/null || missing+=(imagemagick)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! python3 -c 'import thumbor, sys; sys.exit(0 if thumbor.__version__.startswith("7.8") else 1)' 2>/dev/null; then
  echo "installing thumbor 7.8"
  python3 -m pip install --quiet "thumbor==7.8.0" 2>/dev/null || python3 -m pip install --quiet --break-system-packages "thumbor==7.8.0"
fi
export PATH="$PATH:/usr/sbin"
make -s release >/dev/null
exec python3 bench/serve.py
