#!/usr/bin/env bash
# ddp_scaling.sh: the same small training (resnet20, CIFAR-shaped synthetic 3x32x32, global
# batch 64, STEPS optimizer steps, CPU) as one process (parallel.mode single, all cores)
# and as DDP on 1 and 2 ranks over shm (cores split between the ranks), REPEATS times each.
# Prints one markdown row per run: images/s (summary.json images_per_second: the images of
# every step after the first 10 of each epoch over their time; bench/results/ddp.md was
# measured when it was the median over the steps after the first 5), wall seconds, and for DDP the total time the gradient all-reduces
# ran vs the time the steps waited for them (summary.json comm_allreduce_seconds /
# comm_exposed_seconds; the difference was hidden behind backward).
#
# usage: [OMP_WAIT_POLICY=passive] bench/ddp_scaling.sh [RUNNER] [STEPS] [REPEATS]
#   RUNNER  the runner binary (default build-dist/runner, else build/runner)
#   OMP_WAIT_POLICY=passive: see bench/results/ddp.md (libgomp's spinning threads against
#   the CPU backend's own pool make a 2-thread process many times slower on a busy host)
# Results of this machine: bench/results/ddp.md. Needs python3 (reads summary.json).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runner=${1:-}
if [ -z "$runner" ]; then
  for c in "$here/build-dist/runner" "$here/build/runner"; do [ -x "$c" ] && { runner=$c; break; }; done
fi
[ -x "${runner:-}" ] || { echo "ddp_scaling.sh: no runner binary; build one and pass its path" >&2; exit 2; }
steps=${2:-20}
repeats=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat > "$work/ddp_bench.yaml" <<EOF
name: ddp_bench
seed: 0
device: cpu
data:
  dataset: synthetic
  synthetic: {train_size: 2048, val_size: 64, image: [3, 32, 32], classes: 10}
  workers: 1
  shuffle: true
  augment: {random_crop: {size: 32, padding: 4}, horizontal_flip: true, rotation: 0}
model: {arch: resnet20}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 5.0e-4}
schedule: {name: constant, warmup_epochs: 0}
train: {epochs: 1, batch_size: 64, max_steps: $steps}
parallel: {mode: ddp, world_size: 2}
logging: {print_every: 1000}
checkpoint: {every_epochs: 1, keep_last: 0, keep_best: false, resume: never}
EOF

summary() {   # summary.json of the single run under $1 -> "ips wall allreduce exposed fraction"
  python3 - "$1" <<'PY'
import glob, json, sys
s = json.load(open(glob.glob(sys.argv[1] + "/ddp_bench/*/summary.json")[0]))
print("%.1f %.2f %.3f %.3f %.3f" % (s["images_per_second"], s["wall_seconds"],
      s.get("comm_allreduce_seconds", 0), s.get("comm_exposed_seconds", 0), s["comm_exposed_fraction"]))
PY
}

echo "runner: $runner ($("$runner" --version)); $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)}"
echo "resnet20, synthetic 3x32x32, global batch 64, $steps steps, $repeats runs each"
echo
echo "| setup | run | images/s | wall s | all-reduce s | exposed s | hidden | exposed / step time |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for setup in "single 1" "ddp 1" "ddp 2"; do
  set -- $setup
  mode=$1 world=$2
  for r in $(seq 1 "$repeats"); do
    out="$work/$mode$world-$r"
    "$runner" "$work/ddp_bench.yaml" --set output.root="$out" --set parallel.mode="$mode" \
      --set parallel.world_size="$world" > "$out.log" 2>&1 || { echo "run failed:"; cat "$out.log"; exit 1; }
    read -r ips wall ar ex frac <<< "$(summary "$out")"
    if [ "$mode" = single ]; then
      echo "| 1 process (single) | $r | $ips | $wall | - | - | - | - |"
    else
      hidden=$(python3 -c "print('%.0f%%' % (100 * (1 - $ex / $ar)) if $ar > 0 else '-')")
      echo "| ddp, $world rank(s) | $r | $ips | $wall | $ar | $ex | $hidden | $frac |"
    fi
  done
done
