#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer harness (Fuzz/Harness, with -sanitize=fuzzer,address) and
# fuzzes every target for FUZZ_SECONDS each (default 60), FUZZ_JOBS targets at a time (default:
# one per core). The corpora grow across runs in .build/fuzz/corpus; every run is appended to
# .build/fuzz/history.tsv (date, target, seconds, executions, corpus files, crashes).
#
# A crash (or leak, timeout, out-of-memory) is copied to Tests/PluginsTests/Fixtures/fuzz/TARGET/,
# where FuzzRegressionTests replays it through the same target on every `make test`: fix the
# code, commit the input. Exits 1 when a target found one.
#   FUZZ_SECONDS=600 make fuzz                  ten minutes each
#   FUZZ_TARGETS="png jpeg" make fuzz           some targets only
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"sniffer header-probe png jpeg webp heif tiff gif svg icc exif xmp-regions jxl video"}
jobs=${FUZZ_JOBS:-$(nproc)}
build=.build/fuzz

echo "building the fuzz harness (debug, -sanitize=fuzzer,address)"
PIPELINEKIT_FUZZ=1 ${SWIFT:-swift} build --build-path "$build" --product pipelinekit-fuzz \
  -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library 2>&1 | grep -v "Cannot export local symbol" | grep -E "error|warning: |Compiling pipelinekit" ; \
  [ -x "$build/debug/pipelinekit-fuzz" ] || { echo "fuzz harness did not build"; exit 2; }
# Seeds are made again when a target has none (a target added since).
for target in $targets; do [ -n "$(ls -A "$build/seeds/$target" 2>/dev/null)" ] || { Fuzz/seeds.sh "$build/seeds"; break; }; done

fuzz_one() {
  target=$1
  corpus="$build/corpus/$target" artifacts="$build/artifacts/$target/" log="$build/logs/$target.log"
  mkdir -p "$corpus" "$artifacts" "$build/logs"
  FUZZ_TARGET=$target SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=symbolize=1:detect_leaks=1 LSAN_OPTIONS=suppressions=$PWD/Fuzz/lsan.supp \
    nice "$build/debug/pipelinekit-fuzz" "$corpus" "$build/seeds/$target" -max_total_time="$seconds" \
    -max_len=65536 -timeout=10 -rss_limit_mb=3072 -print_final_stats=1 -artifact_prefix="$artifacts" > "$log" 2>&1
  status=$?
  execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo 0)
  found=0
  for crash in "$artifacts"*; do
    [ -f "$crash" ] || continue
    mkdir -p "Tests/PluginsTests/Fixtures/fuzz/$target"
    cp "$crash" "Tests/PluginsTests/Fixtures/fuzz/$target/"
    found=$((found + 1))
  done
  rm -f "$artifacts"*
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$target" "$seconds" "${execs:-0}" "$(ls "$corpus" | wc -l)" "$found" >> "$build/history.tsv"
  printf '%-13s %4ss %10s executions, %5s corpus files, %s crashes%s\n' "$target" "$seconds" "${execs:-0}" \
    "$(ls "$corpus" | wc -l)" "$found" "$([ "$status" != 0 ] && echo " (exit $status, see $log)")"
  [ "$found" = 0 ] && [ "$status" = 0 ]
}
export -f fuzz_one
export build seconds

failed=0
printf '%s\n' $targets | xargs -P "$jobs" -I{} bash -c 'fuzz_one {}' || failed=1
echo "total fuzzing so far, seconds per target (.build/fuzz/history.tsv):"
awk -F'\t' '{ s[$2] += $3; c[$2] += $6 } END { for (t in s) printf "  %-13s %6d s, %d crashes\n", t, s[t], c[t] }' "$build/history.tsv" | sort
[ $failed = 0 ] || { echo "crashes copied to Tests/PluginsTests/Fixtures/fuzz/: fix them, then commit the inputs (FuzzRegressionTests replays them)"; exit 1; }
