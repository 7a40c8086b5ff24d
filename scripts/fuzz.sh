#!/usr/bin/env bash
# Fuzzes every reader of untrusted input (tests/fuzz, docs/testing.md) with libFuzzer:
# builds the harnesses with clang -fsanitize=fuzzer,address,undefined in build-fuzz/ (its
# own build folder) and runs each for N seconds, starting from tests/fuzz/corpus/<reader>/.
#   scripts/fuzz.sh [--seconds N] [--jobs J] [reader ...]     (default: 60 s, 2 at a time, all)
# Exit 0 when nothing was found; otherwise 1, with the inputs that crashed, leaked, hung or
# tripped a sanitizer under build-fuzz/fuzz-out/<reader>/ (fix the reader, then copy the
# input into tests/fuzz/corpus/<reader>/ as crash-<what> so it is replayed forever).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60 jobs=2 readers=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) readers+=("$1"); shift ;;
  esac
done
scripts/deps.sh --fuzz
CC=clang cmake -S . -B build-fuzz -DRUNNER_FUZZ=ON -DRUNNER_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRUNNER_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_harnesses
regex=fuzz_
if ((${#readers[@]})); then regex="^fuzz_($(IFS='|'; echo "${readers[*]}"))\$"; fi
(cd build-fuzz && ctest -L fuzz -R "$regex" -j"$jobs" --output-on-failure --timeout $((seconds + 300)))
