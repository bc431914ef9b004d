#!/usr/bin/env bash
# The worker benchmark (issue 31): `pipelinectl work` on SQS (moto's S3 and SQS on loopback) and on
# PostgreSQL 15 against `pipelinectl run` over the same sources; upload-to-output latency at a
# steady 10 uploads/s; peak RSS (bench/work.py says how each figure is taken). Installs what is
# missing (make test-deps: moto, boto3, PostgreSQL), builds the release binary. About 15 minutes on
# two cores. Writes bench/results/work.md.
# Usage: bench/work.sh   (env: BENCH_WORK_UPLOADS=1000 BENCH_WORK_PG_ROWS=100000 BENCH_WORK_RATE=10
#                        BENCH_WORK_SECONDS=60 BENCH_WORK_ONLY=sqs|postgres)
set -euo pipefail
cd "$(dirname "$0")/.."
make -s test-deps
make -s release >/dev/null
exec python3 bench/work.py
