#!/usr/bin/env bash
# dct_accuracy.sh [BUILD_DIR] [SEEDS]: does decoding JPEGs at reduced size in the DCT domain
# (data.jpeg_dct_scaling, on by default) change accuracy? Trains resnet20 for 10 epochs on
# Fashion-MNIST written as 112x112 JPEGs (fm_jpeg_folder.py), at image_size 28, so every
# evaluation image (Resize(32) of 112 px: decoded at 1/2) and most training crops
# (RandomResizedCrop scale 0.35-1: sides of 66-112 px, decoded at 1/2 from 56 px up) take
# the reduced decode; once with the key on and once off, for seeds 0..SEEDS-1 (default 4).
# Prints each run's final val_top1 and train_loss, and the means. CPU; ~45 s a run on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
seeds=${2:-4}
work=${DCT_BENCH_DIR:-/tmp/runner-dct-accuracy}
mkdir -p "$work"
[ -d "$work/fm112/val" ] || /usr/bin/python3 "$root/bench/jpeg_loader/fm_jpeg_folder.py" "$work/fm112"
cat > "$work/dct.yaml" <<YAML
name: dct_ab
seed: 0
device: cpu
data:
  dataset: image_folder
  root: $work/fm112
  image_size: 28
  workers: auto
  augment:
    random_resized_crop: {scale: [0.35, 1.0], ratio: [0.75, 1.3333]}
model: {arch: resnet20}
optimizer: {name: sgd, lr: 0.1, momentum: 0.9, weight_decay: 5.0e-4}
schedule: {name: cosine, warmup_epochs: 1}
train: {epochs: 10, batch_size: 128}
parallel: {mode: single}
output: {root: $work/runs}
YAML
for d in true false; do
  for s in $(seq 0 $((seeds - 1))); do
    "$build/runner" "$work/dct.yaml" --set seed=$s --set data.jpeg_dct_scaling=$d \
      --set name=dct_${d}_s$s > "$work/log_${d}_s$s.txt" 2>&1
    line=$(grep 'done  step' "$work/log_${d}_s$s.txt" | tail -1)
    echo "jpeg_dct_scaling $d seed $s: $(grep -o 'train_loss [0-9.]*' <<<"$line") $(grep -o 'val_top1 [0-9.]*' <<<"$line")"
  done
done | tee "$work/summary.txt"
awk '{v[$2]+=$NF; n[$2]++} END {for (k in v) printf "jpeg_dct_scaling %s: mean val_top1 %.4f over %d seeds\n", k, v[k]/n[k], n[k]}' "$work/summary.txt"
