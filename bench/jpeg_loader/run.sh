#!/usr/bin/env bash
# run.sh [BUILD_DIR] [IMAGES] [ROUNDS]: the JPEG loader benchmark, runner vs torchvision, in
# one run on the same files and the same cores.
#
# Work per image, both sides: read the file, decode the JPEG (runner: libjpeg-turbo, DCT
# scaling when the crop allows; torchvision: PIL on the same libjpeg-turbo), RandomResizedCrop
# (224, scale (0.08, 1), ratio (3/4, 4/3)), horizontal flip, normalise to float32, batches of
# 64. Files: IMAGES (default 3000) ImageNet-like JPEGs (500x375, q90) made from scikit-image's
# photographs by make_images.py (python3-skimage), in $JPEG_BENCH_DIR (default
# /tmp/runner-jpeg-bench).
#
# Two configurations, interleaved round by round (runner, torchvision, runner, ...) so a
# machine whose load changes (the shared CI/dev machine) hits both alike:
#   1 core:     taskset to CPU 0; runner loader workers 0 (the calling thread decodes),
#               torchvision DataLoader num_workers 0
#   all cores:  taskset to CPUs 0..N-1; runner workers N, torchvision num_workers N
# Per-core rate = images / wall seconds / cores. Also images per CPU-second (process + worker
# CPU time), which a loaded machine distorts less. Medians over the rounds.
# Writes bench/results/jpeg_loader.json (rows {cpu, cores, images, runner_img_per_s_per_core,
# torchvision_img_per_s_per_core, commit, ...}; the rows of this CPU and core count are
# replaced) and prints a markdown table for docs/benchmarks.md. Also runs --dct-error.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
images=${2:-3000}
rounds=${3:-3}
data=${JPEG_BENCH_DIR:-/tmp/runner-jpeg-bench}
export RUNNER_CACHE_DIR=${RUNNER_CACHE_DIR:-$data/cache}
py=/usr/bin/python3
bench=$build/bench/bench_jpeg_loader_bench
[ -x "$bench" ] || { echo "build $bench first (cmake --build $build --target bench_jpeg_loader_bench)" >&2; exit 2; }
$py "$root/bench/jpeg_loader/make_images.py" "$data" "$images"
ncores=$(nproc)
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
cat "$data"/train/*/*.jpg > /dev/null   # page cache warm for both
"$bench" "$data" 0 1 > /dev/null        # the index cache too
for r in $(seq "$rounds"); do
  for cfg in "1 0 0" "$ncores $ncores 0-$((ncores - 1))"; do
    set -- $cfg
    cores=$1 workers=$2 cpus=$3
    echo "round $r, $cores core(s): runner" >&2
    echo "runner $cores $(taskset -c "$cpus" "$bench" "$data" "$workers" 1)" >> "$raw"
    echo "round $r, $cores core(s): torchvision" >&2
    echo "torchvision $cores $(taskset -c "$cpus" $py "$root/bench/jpeg_loader/torchvision_loader.py" "$data" "$workers")" >> "$raw"
    if [ "$cores" = 1 ]; then
      echo "runner_nodct $cores $(taskset -c "$cpus" "$bench" "$data" 0 0)" >> "$raw"
    fi
  done
done
dct=$("$bench" --dct-error "$data" 224; "$bench" --dct-error "$data" 112)
commit=$(git -C "$root" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
$py - "$raw" "$root/bench/results/jpeg_loader.json" "$commit" "$cpu" "$rounds" "$(cut -d' ' -f1 /proc/loadavg)" "$dct" <<'PY'
import json, statistics, sys, datetime
raw, out, commit, cpu, rounds, load, dct = sys.argv[1:8]
runs = {}
for line in open(raw):
    who, cores, js = line.split(" ", 2)
    runs.setdefault((who, int(cores)), []).append(json.loads(js))
rows = []
for cores in sorted({c for _, c in runs}):
    def med(who, key):
        v = [r["images"] / r[key] / (cores if key == "wall_s" else 1) for r in runs.get((who, cores), [])]
        return statistics.median(v) if v else None
    row = {"cpu": cpu, "cores": cores, "images": runs[("runner", cores)][0]["images"],
           "runner_img_per_s_per_core": round(med("runner", "wall_s"), 1),
           "torchvision_img_per_s_per_core": round(med("torchvision", "wall_s"), 1),
           "commit": commit,
           "ratio": round(med("runner", "wall_s") / med("torchvision", "wall_s"), 2),
           "runner_img_per_cpu_s": round(med("runner", "cpu_s"), 1),
           "torchvision_img_per_cpu_s": round(med("torchvision", "cpu_s"), 1),
           "ratio_cpu_time": round(med("runner", "cpu_s") / med("torchvision", "cpu_s"), 2),
           "rounds": int(rounds), "load_avg_1m": float(load),
           "date": datetime.date.today().isoformat()}
    if ("runner_nodct", cores) in runs:
        row["runner_no_dct_img_per_s_per_core"] = round(med("runner_nodct", "wall_s"), 1)
    rows.append(row)
try:
    old = json.load(open(out))
except Exception:
    old = []
old = [r for r in old if not (r.get("cpu") == cpu and r.get("cores") in [x["cores"] for x in rows])]
json.dump(old + rows, open(out, "w"), indent=1)
open(out, "a").write("\n")
print("| CPU | cores | images | runner img/s/core | torchvision img/s/core | ratio | runner img/CPU-s | torchvision img/CPU-s | ratio (CPU time) |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %d | %d | %.0f | %.0f | %.2fx | %.0f | %.0f | %.2fx |" % (r["cpu"], r["cores"], r["images"],
          r["runner_img_per_s_per_core"], r["torchvision_img_per_s_per_core"], r["ratio"],
          r["runner_img_per_cpu_s"], r["torchvision_img_per_cpu_s"], r["ratio_cpu_time"]))
print("\nDCT-domain scaling vs full decode (same draws):")
for line in dct.strip().splitlines():
    print("  " + line)
PY
