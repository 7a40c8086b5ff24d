#!/usr/bin/env bash
# device_session.sh: the whole GPU check of issue 22 in ONE device call of under 9 minutes:
# build, the gpu test suite, compute-sanitizer, the model-only benchmarks against
# PyTorch (with the op-kind profile), the flagship's end-to-end epochs, and the
# Fashion-MNIST accuracy check against PyTorch; torch.compile's rows with what time is
# left. Stages run in that order (by value), each time-boxed with `timeout`, and a stage
# that fails or runs out of time is reported while the next still runs; whatever was
# measured is assembled into the result files at the end.
#
# On this machine, once per session (the libraries and Fashion-MNIST travel in .deps/):
#     echo /.deps/ >> .git/info/exclude; FASHION=1 bash tests/gpu/pack-gpu-deps.sh
# then the device call (carry [".deps"], timeout_s 560):
#     bash .deps/device_session.sh          (or: bash tests/gpu/device_session.sh)
# and copy the results from the reply's files_at into bench/results/ (see docs/benchmarks.md).
#
# Budget: BUDGET seconds from the start (default 530; the call's limit is its timeout_s);
# STAGES picks stages (default "build test sanitize bench e2e fashion compile"; also
# "tb" and "allreduce", for a later call).
# Everything goes to $OUT (else out-gpu/session), at most 8 files:
#   session.log                    this script's output (the summary table last)
#   gpu_tests.json                 {device, driver, cuda, cudnn, nccl, commit, date, passed,
#                                  failed, skipped, sanitizer_errors, ...} (gpu_tests_json.py)
#   gpu_resnet50_cifar.json        runner vs PyTorch rows (bench/gpu_vs_torch.py --assemble),
#                                  the 224-px ImageNet-shaped row included
#   gpu_e2e.json                   end-to-end epochs (bench/gpu_e2e_json.py) and the checks
#   fashion_mnist_gpu_vs_torch.json  accuracy vs PyTorch (bench/fashion_mnist_gpu_vs_torch.py)
#   bench.jsonl                    every raw benchmark line (runner lines carry the profile)
#   logs.tgz                       every log, the ctest and sanitizer logs, run directories
#                                  without checkpoints
#
# SESSION_DRYRUN=cpu: the same control flow on a machine without a GPU, small: the build
# folder given by RUNNER_BUILD_DIR is used as it is, benchmarks and epochs run on the CPU
# backend with resnet20 and a few steps, PyTorch is not measured, Fashion-MNIST runs
# 1 epoch of 1 seed on a subset (tests/gpu/test_device_session.sh runs it).
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-530}
el() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(el))); }
R=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$R/tests/gpu/device_session.sh" ] || R=$(pwd)   # run as .deps/device_session.sh
cd "$R" || exit 1
DRY=${SESSION_DRYRUN:-}
O=${OUT:-$R/out-gpu/session}
L=$(mktemp -d /tmp/gpu-session.XXXXXX)
mkdir -p "$O" "$L/runs"
exec > >(tee "$O/session.log") 2>&1
stages=" ${STAGES:-build test sanitize bench e2e fashion compile} "
declare -a summary=()
note() { summary+=("$(printf '%-10s %s' "$1" "$2")"); echo "== $1: $2, at $(el) s"; }
PY=${PYTHON:-python3}
COMMIT=$(git -C "$R" describe --always --dirty --abbrev=12 2>/dev/null || cat "$R/.deps/commit.txt" 2>/dev/null || echo unknown)
DATE=$(date +%F)
export PYTHONUNBUFFERED=1

# ---- the device ----
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "device: ${GPU_NAME:-none} (driver ${DRIVER:-?}), commit $COMMIT, budget $BUDGET s, stages:$stages"

# ---- libraries: Debian .debs into /opt/deps, used only by the runner's processes ----
RLD=""
if [ -d "$R/.deps/debs" ] && [ -z "$DRY" ]; then
    mkdir -p /opt/deps
    for f in "$R"/.deps/debs/*.deb; do dpkg -x "$f" /opt/deps; done
    dl=/opt/deps/usr/lib/x86_64-linux-gnu
    export CMAKE_PREFIX_PATH=/opt/deps/usr CMAKE_LIBRARY_PATH=$dl:$dl/openblas-pthread \
        CMAKE_INCLUDE_PATH=/opt/deps/usr/include:/opt/deps/usr/include/x86_64-linux-gnu:/opt/deps/usr/include/x86_64-linux-gnu/openblas-pthread
    RLD="$dl:$dl/openblas-pthread"
fi
# cuDNN / NCCL: /usr/local/cuda, else the Python wheels (tests/gpu/cuda_env.sh)
. "$R/tests/gpu/cuda_env.sh"
LD_LIBRARY_PATH_BEFORE=${LD_LIBRARY_PATH:-}
runner_cuda_env 2>/dev/null
RLD="$RLD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64"
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH_BEFORE   # Debian's libraries must not reach PyTorch
RENV="LD_LIBRARY_PATH=$RLD"
rr() { env "$RENV" "$@"; }
# box SECONDS CMD...: CMD under timeout, at most SECONDS and never past the budget
box() {
    local s=$1 l
    shift
    l=$(left)
    [ "$s" -gt "$((l - 5))" ] && s=$((l - 5))
    [ "$s" -ge 5 ] || { echo "   (no time left for: $*)"; return 124; }
    timeout -k 5 "$s" "$@"
}

B=${RUNNER_BUILD_DIR:-$R/build-gpu}
FM=$R/.deps/fashion-mnist
[ -n "$DRY" ] && FM=${SESSION_DRYRUN_FASHION:-/tmp/fm_tiny}
if [ -n "$DRY" ]; then
    DEV=cpu; ARCH=resnet20; BENCH_STEPS="--warmup 1 --steps 2 --profile-steps 1"; E2E_SYN='{train_size: 256, val_size: 128, image: [3, 32, 32], classes: 10}'
    BENCH_CFGS="bf16:8"; IMNET=""; FM_EPOCHS=1; FM_SEEDS="0"; BACKEND_OPT="--backend cpu"
else
    DEV=cuda; ARCH=resnet50; BENCH_STEPS="--warmup 15 --steps 40 --profile-steps 3"; E2E_SYN='{train_size: 50000, val_size: 10000, image: [3, 32, 32], classes: 100}'
    BENCH_CFGS="bf16:128 fp16:128 bf16:256 fp16:256"; IMNET="bf16:256:224"; FM_EPOCHS=""; FM_SEEDS="0 1 2"; BACKEND_OPT=""
fi
BJ=$O/bench.jsonl; RJ=$L/runner.jsonl; TJ=$L/torch.jsonl
: >"$BJ"; : >"$RJ"; : >"$TJ"

stage_build() {
    if [ -n "$DRY" ]; then [ -x "$B/runner" ] && [ -x "$B/bench/bench_gpu_bench" ]; return; fi
    # shellcheck disable=SC2086
    rr cmake -G Ninja -S "$R" -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
        $RUNNER_CUDA_CMAKE_FLAGS >"$L/configure.log" 2>&1 || { tail -20 "$L/configure.log"; return 1; }
    grep -q "runner: CUDA backend ON" "$L/configure.log" || { echo "CMake built without CUDA"; return 1; }
    # the runner, the benchmark and every test `ctest -L gpu` runs (the targets that exist)
    local known want t targets="runner bench_gpu_bench"
    known=$(cmake --build "$B" --target help 2>/dev/null | sed -E 's/^(\.\.\. )?([A-Za-z0-9_]+)(:.*| .*)?$/\2/')
    want=$(cd "$B" && ctest -N -L gpu | sed -nE 's/.*Test +#[0-9]+: +([A-Za-z0-9_]+).*/\1/p')
    for t in $want; do grep -qx "$t" <<<"$known" && targets="$targets $t"; done
    # shellcheck disable=SC2086
    box 200 env "$RENV" cmake --build "$B" -j"$(nproc)" --target $targets >"$L/build.log" 2>&1 ||
        { grep -iE "error|FAILED" "$L/build.log" | head -20; return 1; }
    echo "build warnings: $(grep -c "warning:" "$L/build.log")"
}

stage_test() {
    (cd "$B" && box 170 env "$RENV" RUNNER_TEST_PYTHON="$(command -v "$PY")" RUNNER_FASHION_MNIST="$FM" \
        ctest -L gpu -j3 --output-on-failure --timeout 150) >"$L/ctest.log" 2>&1
    local rc=$?
    grep -E "tests passed|\*\*\*|Test +#" "$L/ctest.log" | tail -25
    return $rc
}

stage_sanitize() {
    command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not on PATH"; return 1; }
    local rc=0 t only
    for t in test_gpu_ops test_gpu_norm test_gpu_conv; do
        # test_gpu_conv: the half-precision cases, the accumulation, graphs and conv_engine
        # (cudnnFind runs every algorithm under memcheck: fp32 and TF32 would not fit the box)
        only=""
        [ "$t" = test_gpu_conv ] && only="test_conv_fp16,test_conv_bf16,test_bwd_filter_accumulates,test_clear_caches_stales_graphs,test_conv_engine_reported"
        (cd "$B/tests/gpu" && box 60 env "$RENV" RUNNER_TEST_ONLY="$only" compute-sanitizer --tool memcheck \
            --leak-check no --error-exitcode 9 "./$t") >"$L/sanitize_$t.log" 2>&1 || rc=1
        echo "$t: $(grep -E 'ERROR SUMMARY' "$L/sanitize_$t.log" | tail -1)"
    done
    return $rc
}

# the device, driver and library versions, then gpu_tests.json from the logs
write_gpu_tests() {
    rr "$B/bench/bench_gpu_bench" --versions >"$L/versions.json" 2>/dev/null
    [ -n "$DRIVER" ] && $PY - "$L/versions.json" "$DRIVER" "$GPU_NAME" <<'PY'
import json, sys
p = sys.argv[1]
try:
    v = json.load(open(p))
except (OSError, ValueError):
    v = {}
v["driver"], v["device"] = sys.argv[2], v.get("device") if v.get("device") not in (None, "unknown") else sys.argv[3]
json.dump(v, open(p, "w"))
PY
    local san=()
    for f in "$L"/sanitize_*.log; do [ -f "$f" ] && san+=("$f"); done
    $PY "$R/tests/gpu/gpu_tests_json.py" --ctest "$L/ctest.log" --versions "$L/versions.json" --commit "$COMMIT" \
        --date "$DATE" --out "$O/gpu_tests.json" ${san[@]+--sanitizer "${san[@]}"}
}

# runner rows: normal + graphs + profile per configuration; the ImageNet-shaped one
stage_bench() {
    local cfg rc=0
    for cfg in $BENCH_CFGS; do
        # shellcheck disable=SC2086
        box 45 env "$RENV" "$B/bench/bench_gpu_bench" $BACKEND_OPT --arch "$ARCH" --precision "${cfg%%:*}" --batch "${cfg##*:}" \
            $BENCH_STEPS --profile 1 >>"$RJ" 2>"$L/bench_${cfg/:/_}.err" || { rc=1; tail -3 "$L/bench_${cfg/:/_}.err"; }
        grep -A40 "^op kind" "$L/bench_${cfg/:/_}.err" | head -40 >"$L/profile_${cfg/:/_}.txt"
    done
    if [ -n "$IMNET" ]; then
        box 70 env "$RENV" "$B/bench/bench_gpu_bench" --arch resnet50 --classes 1000 --precision bf16 --batch 256 \
            --image-size 224 --warmup 8 --steps 20 --profile 1 --profile-steps 1 >>"$RJ" 2>"$L/bench_imagenet.err" ||
            { rc=1; tail -3 "$L/bench_imagenet.err"; }
    fi
    cat "$RJ" >>"$BJ"
    # PyTorch eager, every configuration in one process
    if [ -z "$DRY" ]; then
        local confs=""
        for cfg in $BENCH_CFGS; do confs="$confs ${cfg}:eager"; done
        box 150 "$PY" "$R/bench/gpu_vs_torch.py" --configs "$confs bf16:256:eager:224:1000" --warmup 15 --steps 40 \
            >>"$TJ" 2>"$L/torch_eager.err" || { rc=1; tail -3 "$L/torch_eager.err"; }
        cat "$TJ" >>"$BJ"
    fi
    for f in "$L"/profile_*.txt; do [ -s "$f" ] && { echo "-- $(basename "$f" .txt)"; cat "$f"; }; done
    return $rc
}

# the flagship, one epoch per configuration (label: extra --set arguments)
e2e_run() {
    local name=$1 amp=$2
    shift 2
    # shellcheck disable=SC2086
    box 60 env "$RENV" "$B/runner" experiments/resnet50_cifar100.yaml --set name="$name" --set device=$DEV \
        --set model.arch=$ARCH --set data.dataset=synthetic --set "data.synthetic=$E2E_SYN" --set train.epochs=1 \
        --set checkpoint.resume=never --set output.root="$L/runs" --set logging.print_every=100 $amp "$@" \
        >"$L/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc $(grep -E '^epoch 1 done' "$L/$name.log" | sed 's/.*val_top5 [0-9.]* *//')"
    return $rc
}

stage_e2e() {
    local bf16="--set amp.enabled=true --set amp.dtype=bf16" fp16="--set amp.enabled=true --set amp.dtype=fp16"
    local single="--set parallel.mode=single --set parallel.world_size=1" rc=0
    local ddp="--set parallel.mode=ddp --set parallel.world_size=1 --set parallel.backend=nccl"
    [ -n "$DRY" ] && ddp="--set parallel.mode=ddp --set parallel.world_size=1 --set parallel.backend=shm"
    # shellcheck disable=SC2086
    {
        e2e_run e2e_bf16_default "$bf16" $single || rc=1
        e2e_run e2e_bf16_graphs_true "$bf16" $single --set train.cuda_graphs=true || rc=1
        e2e_run e2e_ddp1_nccl_bf16_default "$bf16" $ddp || rc=1
        e2e_run e2e_fp16_default "$fp16" $single || rc=1
        # what the default resolved to: a run with the same value again would repeat one
        local dflt="" res
        for res in "$L"/runs/e2e_bf16_default/*/resolved.yaml; do
            [ -f "$res" ] && dflt=$(sed -nE 's/^\s+cuda_graphs:\s*([a-z]+).*/\1/p' "$res" | head -1)
        done
        echo "train.cuda_graphs defaults to ${dflt:-?}"
        [ "$dflt" != false ] && { e2e_run e2e_bf16_graphs_false "$bf16" $single --set train.cuda_graphs=false || rc=1; }
        if rr "$B/runner" plan experiments/resnet50_cifar100.yaml --set device=$DEV --set data.dataset=synthetic \
            --set "data.synthetic=$E2E_SYN" $single --set train.cuda_graphs=auto >/dev/null 2>&1; then
            if [ "$dflt" != auto ]; then
                e2e_run e2e_bf16_graphs_auto "$bf16" $single --set train.cuda_graphs=auto || rc=1
                e2e_run e2e_ddp1_nccl_bf16_graphs_auto "$bf16" $ddp --set train.cuda_graphs=auto || rc=1
            fi
            e2e_run e2e_ddp1_nccl_bf16_graphs_true "$bf16" $ddp --set train.cuda_graphs=true || rc=1
        else
            echo "train.cuda_graphs: auto is not a value this build knows (graphs22 adds it, and DDP graphs)"
        fi
    }
    return $rc
}

stage_fashion() {
    [ -f "$FM/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST in $FM (FASHION=1 pack-gpu-deps.sh)"; return 1; }
    local l epochs=${FM_EPOCHS}
    l=$(left)
    # runner ~1 s and PyTorch ~1 s per epoch on an H100/H200 (estimated from the first
    # run's rates: 94 host-bound steps of ~7 ms), plus ~5 s per runner start and ~15 s
    # for PyTorch's: the epochs that fit the time left, the same for both
    if [ -z "$epochs" ]; then
        if [ "$l" -ge 150 ]; then epochs=12; elif [ "$l" -ge 100 ]; then epochs=8; else epochs=5; fi
    fi
    local extra=""
    [ -n "$DRY" ] && extra="--precision fp32 --threads 2 --python ${TORCH_PYTHON:-/usr/bin/python3}"
    # shellcheck disable=SC2086
    box $((l - 15)) "$PY" "$R/bench/fashion_mnist_gpu_vs_torch.py" --runner "$B/runner" --root "$FM" \
        --epochs "$epochs" --seeds $FM_SEEDS --device $DEV --work "$L/fm" --out "$O/fashion_mnist_gpu_vs_torch.json" \
        --commit "$COMMIT" --deadline $((l - 25)) --runner-env "LD_LIBRARY_PATH=$RLD" $extra 2>&1 | tail -12
}

# torch.compile rows, what time allows (each configuration compiles for ~40 s)
stage_compile() {
    [ -n "$DRY" ] && { echo "no PyTorch in a dry run"; return 0; }
    local confs="" cfg
    for cfg in $BENCH_CFGS; do confs="$confs ${cfg}:compile"; done
    box $(($(left) - 20)) "$PY" "$R/bench/gpu_vs_torch.py" --configs "$confs" --warmup 15 --steps 40 \
        >"$L/torch_compile.jsonl" 2>"$L/torch_compile.err"
    local rc=$?
    cat "$L/torch_compile.jsonl" >>"$TJ"
    cat "$L/torch_compile.jsonl" >>"$BJ"
    echo "torch.compile rows: $(grep -c torch_img_per_s "$L/torch_compile.jsonl")"
    return $rc
}

# optional stages (not in the default list; a later call): TensorBoard's own reader on a GPU
# run's event file, and bench/allreduce_suite.sh (NCCL rows, the DDP bucket timeline)
stage_tb() {
    box 90 env "$RENV" "$B/runner" experiments/ci_smoke.yaml --set device=$DEV --set logging.tensorboard=true \
        --set name=tb_check --set output.root="$L/tb" --set checkpoint.resume=never >"$L/tb-run.log" 2>&1 ||
        { tail -n 5 "$L/tb-run.log"; return 1; }
    "$PY" - "$L"/tb/tb_check/*/tensorboard <<'PY'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1])
acc.Reload()
tags = acc.Tags()["scalars"]
print("tensorboard EventAccumulator read", len(tags), "scalar tags:", ", ".join(sorted(tags)[:8]))
assert tags, "no scalars"
PY
}
stage_allreduce() { box $(($(left) - 20)) env "$RENV" bash bench/allreduce_suite.sh "$B" >"$L/allreduce.log" 2>&1; tail -n 30 "$L/allreduce.log"; }

for st in build test sanitize bench e2e fashion compile tb allreduce; do
    [[ $stages == *" $st "* ]] || continue
    t0=$(date +%s)
    echo "== $st ($(el) s, $(left) s left)"
    if [ "$(left)" -lt 15 ]; then note "$st" "SKIPPED (no time left)"; continue; fi
    "stage_$st"
    rc=$?
    if [ $rc -eq 0 ]; then note "$st" "ok ($(($(date +%s) - t0)) s)"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then note "$st" "TIMED OUT ($(($(date +%s) - t0)) s)"
    else note "$st" "FAILED, exit $rc ($(($(date +%s) - t0)) s)"; fi
    [ "$st" = build ] && [ $rc -ne 0 ] && [ ! -x "$B/runner" ] && { echo "no build: nothing else can run"; break; }
done

# ---- results ----
echo "== results ($(el) s)"
[ -f "$L/ctest.log" ] && write_gpu_tests
default_graphs=off
for res in "$L"/runs/e2e_bf16_default/*/resolved.yaml; do
    [ -f "$res" ] && grep -qE '^\s+cuda_graphs:\s*(auto|true)' "$res" && default_graphs=on
done
[ -s "$RJ" ] && $PY "$R/bench/gpu_vs_torch.py" --assemble "$RJ" "$TJ" --out "$O/gpu_resnet50_cifar.json" \
    --commit "$COMMIT" --default-graphs "$default_graphs"
compgen -G "$L/runs/*/*/summary.json" >/dev/null &&
    $PY "$R/bench/gpu_e2e_json.py" --runs "$L/runs" --out "$O/gpu_e2e.json" --device "${GPU_NAME:-$DEV}" --commit "$COMMIT"
[ -f "$O/fashion_mnist_gpu_vs_torch.json" ] && $PY - "$O/fashion_mnist_gpu_vs_torch.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("fashion-mnist:", {k: r.get(k) for k in ("epochs", "runner_mean", "torch_mean", "torch_min", "torch_max", "verdict")})
PY
tar czf "$O/logs.tgz" --exclude='*.ckpt' --exclude='checkpoints' -C "$L" . 2>/dev/null
files=("$O"/*)
echo "== summary ($(el) s of $BUDGET; files in $O: ${files[*]##*/})"
printf '%s\n' "${summary[@]}"
sleep 1   # let tee finish session.log
