#!/usr/bin/env bash
# run_fuzzer.sh HARNESS CORPUS_DIR SECONDS OUT_DIR: fuzzes one libFuzzer harness for SECONDS,
# starting from the checked-in corpus (read only: new inputs go to OUT_DIR/work), and fails
# (exit 1) on any crash, leak, per-input timeout (10 s), out-of-memory (2 GiB) or
# sanitizer report; the input that did it is saved as OUT_DIR/crash-* (add it to the
# corpus once the reader is fixed). Prints the executions and the new coverage.
set -uo pipefail
harness=$1 corpus=$2 seconds=$3 out=$4
name=$(basename "$harness")
rm -rf "$out/work"
mkdir -p "$out/work"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
log="$out/fuzz.log"
"$harness" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
    -artifact_prefix="$out/" "$out/work" "$corpus" >"$log" 2>&1
rc=$?
runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
if [[ $rc -ne 0 ]]; then
  tail -n 60 "$log"
  echo "$name: FOUND A PROBLEM after ${runs:-?} executions (exit $rc); input saved under $out/"
  exit 1
fi
echo "$name: ${runs:-?} executions in ${seconds} s, ${cov:-cov ?}, nothing found"
