#!/usr/bin/env bash
# device_session.sh: everything a session with a lent GPU has to run, in stages that each
# fit one 10-minute device call. Logs and runs go to out-gpu/ (git-ignored); at the end
# the logs (no checkpoints) are packed into $OUT/gpu-logs.tgz, result JSONs copied to
# $OUT, and a short table printed last.
#
#   bash tests/gpu/device_session.sh build test            # first call (~6 min)
#   bash tests/gpu/device_session.sh sanitize epoch tb     # second call
#   bash tests/gpu/device_session.sh bench-amp             # one call each: torch.compile
#   bash tests/gpu/device_session.sh bench-fp32            #   compiles in every process
#   bash tests/gpu/device_session.sh allreduce
#
# Stages:
#   build      unpack .deps (tests/gpu/pack-gpu-deps.sh made it here; carry .deps) when
#              present, configure build-gpu (Release, CUDA sm_90, tests on), build everything
#   test       ctest -L gpu (then the unit label, as a check of the build on that machine)
#   sanitize   compute-sanitizer memcheck over the op-level GPU tests
#   epoch      seconds per epoch of experiments/resnet50_cifar100.yaml on one GPU, on
#              CIFAR-100-shaped synthetic data (the real files cannot travel), fp32/TF32,
#              AMP bf16 and fp16, each with train.cuda_graphs off and on
#   tb         TensorBoard's own EventAccumulator reads a run's event file
#   bench-amp  bench/gpu_vs_torch for fp16 and bf16    bench-fp32  for fp32 and tf32
#   allreduce  bench/allreduce_suite.sh (NCCL all-reduce, bucket timeline, scaling model)
# A stage that fails is reported and the next one still runs; the exit code is the
# number of failed stages. Calls should follow each other closely: the machine stays warm
# (keeping build-gpu) for 30 s after a call; a later call on a fresh machine rebuilds
# first (about 3 minutes on its 16 cores).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${RUNNER_BUILD_DIR:-$root/build-gpu}
out=$root/out-gpu
mkdir -p "$out"
export RUNNER_BUILD_DIR=$build PYTHONUNBUFFERED=1
declare -a summary=()
failed=0

note() { summary+=("$1"); echo "== $1" >&2; }

env_setup() {
    if [ -f .deps/unpack-deps.sh ] && [ ! -f /opt/deps/.unpacked ]; then
        bash .deps/unpack-deps.sh >"$out/deps.log" 2>&1 && touch /opt/deps/.unpacked
    fi
    # shellcheck disable=SC1091
    [ -f .deps/env.sh ] && . .deps/env.sh
    . "$root/tests/gpu/cuda_env.sh"
    runner_cuda_env
}

stage_build() {
    nvidia-smi -L || echo "nvidia-smi: no GPU listed"
    # shellcheck disable=SC2086
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
          $RUNNER_CUDA_CMAKE_FLAGS >"$out/configure.log" 2>&1 || { tail -n 30 "$out/configure.log"; return 1; }
    grep -q "runner: CUDA backend ON" "$out/configure.log" || { echo "CMake built without CUDA"; return 1; }
    cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -30; return 1; }
    echo "build warnings: $(grep -ci "warning" "$out/build.log" || true)"
}

stage_test() {
    (cd "$build" && ctest -L gpu --output-on-failure --timeout 300) >"$out/gpu-tests.log" 2>&1
    local rc=$?
    grep -E "tests passed|Skipped|Failed|\*\*\*" "$out/gpu-tests.log" | tail -30
    (cd "$build" && ctest -L unit -j8 --timeout 300) >"$out/unit-tests.log" 2>&1 || rc=1
    tail -n 3 "$out/unit-tests.log"
    return $rc
}

stage_sanitize() {
    command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not on PATH"; return 1; }
    local rc=0
    for t in test_gpu_ops test_gpu_norm test_gpu_augment test_gpu_conv; do
        timeout 240 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
            "$build/tests/gpu/$t" >"$out/sanitize-$t.log" 2>&1
        local r=$?
        echo "$t: memcheck exit $r ($(grep -c "Invalid\|ERROR SUMMARY: [1-9]" "$out/sanitize-$t.log") error lines)"
        [ $r -eq 0 ] || rc=1
    done
    return $rc
}

stage_epoch() {
    local syn='data.synthetic={train_size: 50000, val_size: 10000, image: [3, 32, 32], classes: 100}'
    local rc=0
    : >"$out/epoch.tsv"
    for prec in tf32 bf16 fp16; do
        for graphs in false true; do
            local amp="--set amp.enabled=false"
            [ "$prec" = tf32 ] || amp="--set amp.enabled=true --set amp.dtype=$prec"
            local name="epoch_${prec}_graphs_${graphs}"
            # shellcheck disable=SC2086
            "$build/runner" experiments/resnet50_cifar100.yaml --set name="$name" --set device=cuda \
                --set data.dataset=synthetic --set "$syn" --set parallel.mode=single \
                --set parallel.world_size=1 --set train.epochs=1 --set train.deterministic=false \
                --set train.cuda_graphs=$graphs --set logging.print_every=50 --set checkpoint.resume=never \
                --set output.root="$out/runs" $amp >"$out/$name.log" 2>&1 || { rc=1; tail -n 5 "$out/$name.log"; }
            local s
            s=$(ls "$out"/runs/"$name"/*/summary.json 2>/dev/null | head -1)
            [ -n "$s" ] && python3 - "$s" "$prec" "$graphs" >>"$out/epoch.tsv" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}\tgraphs={sys.argv[3]}\t{s.get('seconds_per_epoch')}\t{s.get('images_per_second')}\t"
      f"{s.get('peak_memory_bytes')}\t{s.get('status')}")
PY
        done
    done
    echo -e "precision\tgraphs\ts/epoch\timg/s(median step)\tpeak bytes\tstatus"
    cat "$out/epoch.tsv"
    return $rc
}

stage_tb() {
    "$build/runner" experiments/ci_smoke.yaml --set device=cuda --set logging.tensorboard=true \
        --set name=tb_check --set output.root="$out/runs" --set checkpoint.resume=never >"$out/tb-run.log" 2>&1 ||
        { tail -n 5 "$out/tb-run.log"; return 1; }
    python3 - "$out"/runs/tb_check/*/tensorboard <<'PY'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1])
acc.Reload()
tags = acc.Tags()["scalars"]
print("tensorboard EventAccumulator read", len(tags), "scalar tags:", ", ".join(sorted(tags)[:8]))
for t in ("train/loss", "epoch/val_top1"):
    if t in tags:
        ev = acc.Scalars(t)
        print(f"  {t}: {len(ev)} points, last step {ev[-1].step} value {ev[-1].value:.4f}")
assert tags, "no scalars"
PY
}

# One half of the benchmark matrix. It is stopped at BENCH_LIMIT seconds (default 520, so
# the logs still come back within a 600-second device call); the configurations measured
# by then are assembled into the results JSON all the same (their raw lines are kept).
bench_half() {
    local name=$1 precisions=$2 rc=0
    PRECISIONS="$precisions" timeout "${BENCH_LIMIT:-520}" bench/gpu_vs_torch >"$out/$name.log" 2>&1 || rc=$?
    tail -n 20 "$out/$name.log"
    cp bench/results/gpu_resnet50_cifar.runner.jsonl "$out/$name.runner.jsonl" 2>/dev/null
    cp bench/results/gpu_resnet50_cifar.torch.jsonl "$out/$name.torch.jsonl" 2>/dev/null
    if [ $rc -ne 0 ] && [ -s "$out/$name.runner.jsonl" ]; then
        echo "gpu_vs_torch ended with $rc; assembling what it measured"
        python3 bench/gpu_vs_torch.py --assemble "$out/$name.runner.jsonl" "$out/$name.torch.jsonl" \
            --out bench/results/gpu_resnet50_cifar.json \
            --commit "$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"
    fi
    return $rc
}
stage_bench_amp() { bench_half bench-amp "fp16 bf16"; }
stage_bench_fp32() { bench_half bench-fp32 "fp32 tf32"; }
stage_allreduce() { bash bench/allreduce_suite.sh "$build" 2>&1 | tee "$out/allreduce.log" | tail -n 30; }

env_setup
[ $# -gt 0 ] || set -- build test
# A machine given back between calls (it stays warm only 30 s) comes back bare: any stage
# builds first when the runner is missing.
case " $* " in
    *" build "*) ;;
    *) if [ ! -x "$build/runner" ]; then
           t0=$(date +%s)
           if stage_build; then note "build (missing, made first): ok ($(( $(date +%s) - t0 )) s)"
           else note "build (missing, made first): FAILED"; failed=$((failed + 1)); fi
       fi ;;
esac
for st in "$@"; do
    fn="stage_${st//-/_}"
    if ! declare -F "$fn" >/dev/null; then note "$st: unknown stage"; failed=$((failed + 1)); continue; fi
    t0=$(date +%s)
    if "$fn"; then note "$st: ok ($(( $(date +%s) - t0 )) s)"; else note "$st: FAILED ($(( $(date +%s) - t0 )) s)"; failed=$((failed + 1)); fi
done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    tar czf "$OUT/gpu-logs.tgz" -C "$out" --exclude='*.ckpt' --exclude='*.wandb' . 2>/dev/null
    for f in bench/results/gpu_resnet50_cifar.json bench/results/allreduce.json "$out/epoch.tsv"; do
        [ -f "$f" ] && cp "$f" "$OUT/"
    done
fi
exit $failed
