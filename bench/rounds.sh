# Sourced by the A/B benchmarks (analyze.sh, metadata.sh): runs WORK/VARIANT.yaml over WORK/list.txt
# for each variant in turn, ROUNDS times interleaved, each run into a fresh output directory
# (WORK/out-VARIANT), keeping WORK/VARIANT-ROUND.time (wall, user and system seconds) and
# WORK/VARIANT-ROUND.json (the report).
# Usage: interleaved_rounds WORK BIN ROUNDS VARIANT...
interleaved_rounds() {
  local work=$1 bin=$2 rounds=$3 round variant
  shift 3
  for round in $(seq 1 "$rounds"); do
    for variant in "$@"; do
      rm -rf "$work/out-$variant"
      /usr/bin/time -f "%e %U %S" -o "$work/$variant-$round.time" "$bin" run "$work/$variant.yaml" "$work/list.txt" \
        --report "$work/$variant-$round.json" --progress none > /dev/null || true
    done
  done
}
