#!/usr/bin/env python3
"""test_gpu_bench_dryrun.py: bench_gpu_bench --profile's counting, on the CPU backend.

The GPU times of the op-kind profiler (bench/gpu_prof) need a GPU; what it counts does
not: one resnet20 step (batch 4, fp16 AMP, 10 classes) with --backend cpu --profile 1
must report the calls each op kind gets from the net's structure (21 convolutions and
BN layers, 20 data gradients: the stem's input needs none, and the 9 that sum into a
block input's gradient go through the CPU's conv2d_bwd_data_accum (issue 25), counted as
conv_bwd_data_accum with their add's bytes under fused_fallback, none as add; one
classifier, loss, optimizer, shadow cast and unscale), the bn_apply and fused_fallback
bytes of gpu_prof.c's formulas worked out here by hand from resnet20's layers (4-byte
elements: the CPU backend's), the memory-bound total as the sum of its kinds, and one
conv_engines entry per distinct convolution shape (8), and the by-shape lines (calls and
bytes per (kind, rows, channels), summing to the kinds'). Usage: test_gpu_bench_dryrun.py
BENCH_GPU_BENCH

Then the graph mode on the cpu backend's recorder (RUNNER_CPU_GRAPHS=1): the trainer's
step (runner/train_bench.h) with graphs, 3 warm-up steps (normal, recorded, launched) and
--steps timed: one recording, 2 + steps launches, graphs_scope "step", a graph rate; with
train.cuda_graphs' default (auto) the default configuration is the replay
(default_graphs true, runner_img_per_s the graph rate), while without the recorder the
default is normal launches (default_graphs false, no graph rate).
"""
import os
import json
import subprocess
import sys

bench = sys.argv[1]
from pycheck import check, finish


B = 4
r = subprocess.run([bench, "--backend", "cpu", "--arch", "resnet20", "--classes", "10", "--batch", str(B),
                    "--precision", "fp16", "--warmup", "0", "--steps", "1", "--profile", "1", "--profile-steps", "1"],
                   capture_output=True, text=True, timeout=240)
check(r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}")
line = json.loads(r.stdout.strip().splitlines()[-1])
prof = line["profile"]
kinds = {k["kind"]: k for k in prof["kinds"]}
want_calls = {"conv_fwd": 21, "conv_bwd_data": 11, "conv_bwd_data_accum": 9, "fused_fallback": 9,
              "conv_bwd_filter": 21, "bn_stats": 21, "bn_apply": 21,
              "bn_update_running": 21, "bn_bwd_reduce": 21, "bn_bwd_apply": 21, "linear_fwd": 1, "linear_bwd": 1,
              "avgpool_fwd": 1, "avgpool_bwd": 1, "softmax_xent": 1, "sgd_step": 1, "step_ctl_update": 1,
              "cast": 1, "unscale_check_finite": 1}
for k, n in want_calls.items():
    check(kinds.get(k, {}).get("calls") == n, f"{k} calls {kinds.get(k, {}).get('calls')} != {n}")

# bn_apply: e*m*c*(2, or 3 with the shortcut z) + 16c per BN layer (e = 4 on the CPU)
e = 4
layers = []  # (rows x channels per sample, channels, has z)
layers.append((32 * 32 * 16, 16, False))                  # stem
for _ in range(3):                                          # layer1
    layers += [(32 * 32 * 16, 16, False), (32 * 32 * 16, 16, True)]
for hw, c in ((16, 32), (8, 64)):                           # layer2, layer3
    layers.append((hw * hw * c, c, False))                  # downsample BN
    for _ in range(3):
        layers += [(hw * hw * c, c, False), (hw * hw * c, c, True)]
want = sum(e * B * mc * (3 if z else 2) + 16 * c for mc, c, z in layers)
check(len(layers) == 21, f"{len(layers)} BN layers")
check(kinds["bn_apply"]["bytes"] == want, f"bn_apply bytes {kinds['bn_apply']['bytes']} != {want}")
# the residual sums: each block input (elements per sample) once, 3 e-byte passes (add)
inputs = [32 * 32 * 16] * 4 + [16 * 16 * 32] * 3 + [8 * 8 * 64] * 2
want = sum(3 * e * B * nx for nx in inputs)
check(kinds["fused_fallback"]["bytes"] == want, f"fused_fallback bytes {kinds['fused_fallback']['bytes']} != {want}")
check(kinds["fused_fallback"]["memory_bound"] and not kinds["conv_bwd_data_accum"]["memory_bound"],
      "fused_fallback is memory-bound, the accumulating conv is not")
check("add" not in kinds, "no separate gradient adds")
mem = sum(k["bytes"] for k in prof["kinds"] if k["memory_bound"])
check(abs(prof["nonconv_bytes"] - mem) <= 1, f"nonconv_bytes {prof['nonconv_bytes']} != {mem}")
check(not kinds["conv_fwd"]["memory_bound"] and kinds["bn_stats"]["memory_bound"], "memory_bound flags")
# conv FLOPs: forward of every conv = the net's forward FLOPs minus the classifier's
check(kinds["conv_fwd"]["flops"] > 0 and kinds["conv_bwd_filter"]["flops"] == kinds["conv_fwd"]["flops"],
      "conv flops")
check(len(line["conv_engines"]) == 8, f"{len(line['conv_engines'])} conv shapes")
check(all("fwd" in c for c in line["conv_engines"]), "every shape names its forward engine")
check(line["host_ms"] > 0 and line["step_ms"] > 0, "host_ms, step_ms")
check("memory-bound kinds:" in r.stderr and "op kind" in r.stderr, "the table on stderr")
# by shape: a line per (kind, rows, channels); untimed here, so calls and bytes only
shapes = prof["shapes"]
by = {(s["kind"], s["rows"], s["channels"]): s for s in shapes}
for rows, c in ((B * 32 * 32, 16), (B * 16 * 16, 32), (B * 8 * 8, 64)):   # 7 BN layers of each shape
    s = by.get(("bn_stats", rows, c), {})
    check(s.get("calls") == 7 and s.get("bytes") == 7 * (e * rows * c + 8 * c),
          f"bn_stats {rows} x {c}: {s}")
    check(by.get(("bn_update_running", 1, c), {}).get("calls") == 7, f"bn_update_running x {c}")
check(sorted(k for k, _, _ in by if k == "bn_stats") == ["bn_stats"] * 3, "3 bn_stats shapes")
for k in ("bn_apply", "bn_bwd_reduce", "bn_bwd_apply", "conv_fwd", "conv_bwd_filter"):
    sc = sum(s["calls"] for s in shapes if s["kind"] == k)
    sb = sum(s["bytes"] for s in shapes if s["kind"] == k)
    check(sc == kinds[k]["calls"] and abs(sb - kinds[k]["bytes"]) <= 1, f"{k}: shapes {sc} calls {sb} B vs kind's")
check(by.get(("conv_fwd", B * 32 * 32, 16), {}).get("calls") == 7, "conv_fwd 32 x 32 x 16: the stem and layer1's 6")
check("by shape" in r.stderr, "the by-shape table on stderr")

# the graph mode: the whole step recorded once, then launched
S = 3
env = dict(os.environ, RUNNER_CPU_GRAPHS="1")
r = subprocess.run([bench, "--backend", "cpu", "--arch", "resnet20", "--classes", "10", "--batch", str(B),
                    "--precision", "fp16", "--warmup", "1", "--steps", str(S)], capture_output=True, text=True,
                   timeout=240, env=env)
check(r.returncode == 0, f"graphs: exit {r.returncode}: {r.stderr[-2000:]}")
g = json.loads(r.stdout.strip().splitlines()[-1])
check(g["graph_recordings"] == 1, f"graph_recordings {g['graph_recordings']} != 1")
check(g["graph_launches"] == 2 + S, f"graph_launches {g['graph_launches']} != {2 + S}")
check(g["graphs_scope"] == "step", "graphs_scope")
check(g["runner_graphs_img_per_s"] and g["graphs_step_ms"] > 0, "a graph rate")
check(g["default_graphs"] is True and g["runner_img_per_s"] == g["runner_graphs_img_per_s"],
      "the default (auto) is the replay's rate")
check(g["last_loss"] > 0 and g["last_loss"] < 1e3, f"last_loss {g['last_loss']}")
check(line["default_graphs"] is False and line["runner_graphs_img_per_s"] is None and
      line["runner_img_per_s"] == line["runner_normal_img_per_s"] and line["graph_recordings"] == 0,
      "without the recorder: normal launches are the default")
finish()
