#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the quickstart experiment
# (Fashion-MNIST, CPU or GPU as available). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" --target runner
exec ./build/runner experiments/quickstart.yaml "$@"
