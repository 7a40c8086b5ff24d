#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the quickstart experiment
# (Fashion-MNIST, CPU or GPU as available). Safe to run again.
set -euo pipefail
case "${1:-}" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" --target runner
exec ./build/runner experiments/quickstart.yaml "$@"
