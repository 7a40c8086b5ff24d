#!/usr/bin/env bash
# allreduce_suite.sh: every measurement behind bench/results/allreduce.json, then the
# scaling MODEL (bench/scaling_model.py) from them. One command on the GPU machine:
#
#     bench/allreduce_suite.sh [BUILD_DIR]        (default: build-gpu; configured if missing)
#
# With a visible GPU (about 2-3 minutes after the build):
#   1. bench_allreduce --backend nccl      one rank per GPU (world 1 on a one-GPU machine:
#      NCCL then moves no data between GPUs; its rows say so), messages 1-100 MiB and the
#      ResNet-50 gradient in DDP buckets (fp32/fp16/bf16), then 20 DDP steps of resnet50
#      batch 128 (TF32) with the bucket-ready profile from CUDA events;
#   2. bench_allreduce --backend shm-cuda  two ranks on the GPU(s), gradients staged
#      through host memory (pinned and pageable) and reduced by comm/shm.c; DDP steps too;
#   3. bench_allreduce --backend shm --no-ddp   the host CPU's shm rows (world 2).
# Without a GPU: step 3 with the DDP record (resnet18, batch 16 per rank).
# Each step replaces its own rows (same device, backend, world) in the JSON and keeps the
# rest. Then bench/allreduce_table.py (the measured tables) and bench/scaling_model.py
# (the 2/4/8-GPU MODEL) print Markdown, also written to BUILD_DIR/allreduce_report.md, for
# docs/benchmarks.md ("All-reduce and DDP overlap").
#
# Environment: ALLREDUCE_JSON (results file, default bench/results/allreduce.json),
# JOBS (build parallelism, default nproc), STEP_TIMEOUT (seconds per step, default 420).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build-gpu}
out=${ALLREDUCE_JSON:-bench/results/allreduce.json}
jobs=${JOBS:-$(nproc)}
limit=${STEP_TIMEOUT:-420}
cd "$here"

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" --target bench_allreduce -j "$jobs"
bin=$build/bench/bench_allreduce
commit=$(git -C "$here" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit-dirty"; fi
echo "allreduce_suite: $bin, commit $commit, results $out"
t_start=$(date +%s)

gpu=0
set +e
timeout "$limit" "$bin" --backend nccl --out "$out" --commit "$commit" --ddp-steps 20 --ddp-warmup 5
rc=$?
set -e
if [ $rc -eq 2 ]; then
  echo "allreduce_suite: no GPU visible (or a build without CUDA): CPU measurements only"
else
  gpu=1
  [ $rc -eq 0 ] || echo "allreduce_suite: the nccl step failed (exit $rc); going on with the others" >&2
fi
if [ $gpu -eq 1 ]; then
  timeout "$limit" "$bin" --backend shm-cuda --out "$out" --commit "$commit" --ddp-steps 10 --ddp-warmup 3 ||
    echo "allreduce_suite: the shm-cuda step failed (exit $?)" >&2
  timeout "$limit" "$bin" --backend shm --no-ddp --out "$out" --commit "$commit" ||
    echo "allreduce_suite: the shm step failed (exit $?)" >&2
else
  timeout "$limit" "$bin" --backend shm --out "$out" --commit "$commit"
fi
echo "allreduce_suite: measurements took $(( $(date +%s) - t_start )) s"

report=$build/allreduce_report.md
{
  echo "## MEASURED (bench/allreduce_table.py)"
  echo
  python3 "$here/bench/allreduce_table.py" --json "$out"
  echo "## MODEL, NOT A MEASUREMENT (bench/scaling_model.py)"
  echo
  python3 "$here/bench/scaling_model.py" --json "$out"
} > "$report"
cat "$report"
echo "allreduce_suite: measured tables and the model written to $report (for docs/benchmarks.md); rows in $out"
