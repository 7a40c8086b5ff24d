#!/usr/bin/env bash
# graphs_device_check.sh: the device check of whole-step CUDA graphs (issue 22, item 2), one
# call of about 8 minutes: the build of .deps/gpu-check.sh, tests/gpu/test_gpu_cli_graphs
# (graphs auto == false bit for bit: single, DDP over NCCL world 1, fp16, resume; recordings
# counted), the other gpu tests but the hang and image ones, then one epoch of
# experiments/resnet50_cifar100.yaml (bf16, CIFAR-100-shaped synthetic data) with graphs false
# and auto in single mode and auto in DDP over NCCL world 1: seconds per epoch, images/s and
# the recording counts from summary.json. What decides flipping train.cuda_graphs' default to
# auto (runner/config.c): the tests pass and auto is faster.
#   here, once: bash ../shared/device/pack-deps.sh   (puts gpu-check.sh into .deps/)
#   on the GPU machine, from the project root, .deps/ carried: bash tests/gpu/graphs_device_check.sh
# Results (main.log, the test logs, the runs' logs) go to $OUT.
set -uo pipefail
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee "$O/main.log") 2>&1
ls runner/train_graph.c >/dev/null || { echo "this tree has no whole-step graphs (runner/train_graph.c)"; exit 3; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
R=$(pwd)
# the build of .deps/gpu-check.sh (whole tree, Ninja)
OUT=/tmp/gco STAGES=build BUDGET=200 bash .deps/gpu-check.sh >"$O/build.log" 2>&1 || { echo "build failed"; tail -30 "$O/build.log"; exit 1; }
echo "built $(el)s"
dl=/opt/deps/usr/lib/x86_64-linux-gnu
nvlib=""
for pkg in cudnn nccl; do
  d=$(python3 -c "import nvidia.$pkg as m; print(list(m.__path__)[0])" 2>/dev/null || true)
  [ -n "$d" ] && nvlib="$nvlib:$d/lib"
done
RLD="$dl:$dl/openblas-pthread$nvlib:/usr/local/cuda/lib64"
rr() { env LD_LIBRARY_PATH="$RLD" "$@"; }
B=$R/build-gpu
cd "$B"
echo "== test_gpu_cli_graphs $(el)s"
rr timeout 200 ctest -R test_gpu_cli_graphs --output-on-failure --timeout 190 >"$O/graphs.log" 2>&1
echo "rc=$?"; grep -E "^ok|FAIL|CHECK|expected|differ|passed|failed|Passed|Failed" "$O/graphs.log" | head -40
echo "== other gpu tests $(el)s"
rr timeout 170 ctest -L gpu -E "test_gpu_cli_graphs|hang|images" -j3 --output-on-failure --timeout 160 >"$O/others.log" 2>&1
echo "rc=$?"; grep -E "Test +#|tests passed" "$O/others.log" | head -30
cd "$R"
echo "== e2e $(el)s"
syn='data.synthetic={train_size: 50000, val_size: 10000, image: [3, 32, 32], classes: 100}'
for cfg in "single false" "single auto" "ddp auto"; do
  set -- $cfg
  [ $(el) -lt 470 ] || { echo "skip $cfg"; continue; }
  par="--set parallel.mode=single --set parallel.world_size=1"
  [ $1 = ddp ] && par="--set parallel.mode=ddp --set parallel.world_size=1 --set parallel.backend=nccl"
  n=e2e_$1_$2
  rr timeout 75 "$B/runner" experiments/resnet50_cifar100.yaml --set name=$n --set device=cuda \
    --set data.dataset=synthetic --set "$syn" $par --set amp.enabled=true --set amp.dtype=bf16 \
    --set train.epochs=1 --set train.cuda_graphs=$2 --set checkpoint.resume=never --set output.root=/tmp/runs >"/tmp/$n.log" 2>&1
  echo "$n rc=$?"; grep -E "graphs|^epoch 1 done|recording|error" "/tmp/$n.log" | head -5
  python3 -c "import json,glob,sys; s=json.load(open(glob.glob('/tmp/runs/$n/*/summary.json')[0])); print({k: s.get(k) for k in ('seconds_per_epoch','images_per_second','graph_recordings','graph_launches','status')})" 2>/dev/null
done
cp /tmp/e2e_*.log "$O/" 2>/dev/null
echo "== done $(el)s"
