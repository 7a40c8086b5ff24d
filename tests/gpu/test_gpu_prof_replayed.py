#!/usr/bin/env python3
"""test_gpu_prof_replayed.py: bench_gpu_bench --profile's replayed table on a GPU (the
profiler's replayed mode, bench/gpu_prof: events as nodes of the recorded step's CUDA
graph). One resnet20 configuration (bf16 AMP, batch 32, 10 classes) with --profile 1
--profile-steps 3 must give, besides the eager table ("profile", mode "eager"), a
"profile_replayed" object (mode "replayed", 3 steps) whose op kinds are the eager step's
with the same calls and bytes per step (but the host transfers and the record's copy,
which run outside the recorded graph), a GPU time for the kinds that do the work (the
convolutions, BN, the loss, the optimizer, the weight cast), by-shape lines whose calls add up to their
kinds', and op times that add up to no more than the same replays' span from the first
event to the last ("span_ms": the events bracket disjoint parts of one replay, so a call
counted twice or a kind nested in another would exceed it; the slack is the events'
resolution, ~0.5 us each, not a timing margin: the bound compares times of the same
replays, so GPU tests running beside it cannot break it, as they did when the bound was
the un-instrumented replay measured at another moment). Exit 77 (skipped) without a GPU.
Usage: test_gpu_prof_replayed.py BENCH_GPU_BENCH
"""
import json
import subprocess
import sys

from pycheck import check, finish, gpu_or_skip

bench = sys.argv[1]
gpu_or_skip(bench)


r = subprocess.run([bench, "--arch", "resnet20", "--classes", "10", "--batch", "32", "--precision", "bf16",
                    "--warmup", "3", "--steps", "5", "--profile", "1", "--profile-steps", "3"],
                   capture_output=True, text=True, timeout=240)
check(r.returncode == 0, f"bench exit {r.returncode}: {r.stderr[-2000:]}")
line = json.loads(r.stdout.strip().splitlines()[-1])
eager, rep = line.get("profile"), line.get("profile_replayed")
check(eager is not None and eager.get("mode") == "eager", "the eager table, mode eager")
check(rep is not None, "a profile_replayed object: " + r.stderr[-1500:])
if rep is None:
    finish()
check(rep["mode"] == "replayed" and rep["steps"] == 3, f"mode {rep.get('mode')} steps {rep.get('steps')}")
check("replayed: per step (3 replays" in r.stderr, "the replayed table on stderr")
outside = {"upload", "download", "copy"}   # the host's writes and the record's copy: not in the graph
ek = {k["kind"]: k for k in eager["kinds"] if k["kind"] not in outside}
rk = {k["kind"]: k for k in rep["kinds"]}
check(sorted(ek) == sorted(k for k in rk if k not in outside), f"kinds {sorted(ek)} vs {sorted(rk)}")
for name, k in ek.items():
    q = rk.get(name)
    if not q:
        continue
    check(abs(q["calls"] - k["calls"]) < 1e-9, f"{name}: calls {q['calls']} vs eager {k['calls']}")
    check(abs(q["bytes"] - k["bytes"]) <= 1e-9 * max(1.0, k["bytes"]), f"{name}: bytes {q['bytes']} vs {k['bytes']}")
    check(q["gpu_ms"] >= 0, f"{name}: replayed GPU time {q['gpu_ms']}")
    # the kinds that move megabytes or do the convolutions take measurable time (the
    # one-thread step control or a memset may be under the events' resolution)
    if name.startswith(("conv_", "bn_")) or name in ("sgd_step", "softmax_xent", "cast"):
        check(q["gpu_ms"] > 0, f"{name}: replayed GPU time {q['gpu_ms']}, none measured")
check(rk.get("conv_fwd", {}).get("calls") == 21, f"resnet20: 21 forward convolutions, got {rk.get('conv_fwd')}")
for name in ("bn_stats", "bn_apply", "bn_bwd_reduce", "bn_bwd_apply", "softmax_xent", "sgd_step"):
    check(name in rk, f"{name} in the replayed step")
shape_calls = {}
for s in rep["shapes"]:
    shape_calls[s["kind"]] = shape_calls.get(s["kind"], 0) + s["calls"]
for name in ("conv_fwd", "bn_stats", "bn_bwd_reduce"):
    check(abs(shape_calls.get(name, 0) - rk[name]["calls"]) < 1e-9,
          f"{name}: by-shape calls {shape_calls.get(name)} vs {rk[name]['calls']}")
calls = sum(k["calls"] for k in rep["kinds"])
span = rep.get("span_ms", 0)
check(span > 0 and rep["gpu_ms"] <= span + 1e-3 * calls,
      f"ops {rep['gpu_ms']} ms within the replays' span {span} ms ({calls:.0f} calls)")
check(rep["gpu_ms"] > 0, "a replayed total")
check("first event to last" in r.stderr, "the span in the replayed table")
finish()
