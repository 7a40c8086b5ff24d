#!/usr/bin/env python3
"""test_gpu_bn_sweep.py: bench_gpu_bench --bn-sweep on a GPU (issue 25's BN geometry sweep,
bench/fusion/bn_sweep.c). On resnet20 (bf16, batch 8: three BN shapes, 8192 x 16, 2048 x
32 and 512 x 64 rows x channels, 7 layers each: the stem's and a stage's six, the second
and third stages' projection shortcuts' BN included) with 2 replays: a line per op, shape
and geometry (4 x 3 x 20, the reductions' one-pass form among them), each with a
positive time; the default geometry first per op
and shape, at vs_default 1; the apply ops' outputs the same bits under every geometry
and the reductions' within 1e-3 relative; the layer counts adding up to resnet20's 21
BNs; and a total line per op whose default is the sum of its shapes' default times x
layers and whose best per shape is no more than it; every line naming the backend's
options (the default all). Exit 77 (skipped) without a GPU.
Usage: test_gpu_bn_sweep.py BENCH_GPU_BENCH
"""
import json
import subprocess
import sys

from pycheck import check, finish, gpu_or_skip

bench = sys.argv[1]
gpu_or_skip(bench)

r = subprocess.run([bench, "--arch", "resnet20", "--classes", "10", "--batch", "8", "--precision", "bf16",
                    "--bn-sweep", "2"], capture_output=True, text=True, timeout=240)
check(r.returncode == 0, f"bench exit {r.returncode}: {r.stderr[-2000:]}")
lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
rows = [x for x in lines if x.get("bench") == "bn_sweep"]
tot = {x["op"]: x for x in lines if x.get("bench") == "bn_sweep_total"}
ops = ["bn_stats", "bn_apply", "bn_bwd_reduce", "bn_bwd_apply"]
ALL = "graph_conv,dgrad_accum,bn_remask,bn_wide_final,bn_fold_running,pdl,bn_mask_bits,bn_dual_add"
check(all(x.get("fusion") == ALL for x in rows + list(tot.values())), "every line names the default options")
shapes = sorted({(x["rows"], x["channels"], x["layers"]) for x in rows})
check(shapes == [(512, 64, 7), (2048, 32, 7), (8192, 16, 7)], f"shapes {shapes}")
check(len(rows) == 4 * 3 * 20, f"{len(rows)} rows, want 240")
check(sorted(tot) == sorted(ops), f"totals for {sorted(tot)}")
for op in ops:
    dflt = 0.0
    for m, c, n in shapes:
        mine = [x for x in rows if x["op"] == op and x["rows"] == m]
        check(len(mine) == 20, f"{op} {m}x{c}: {len(mine)} geometries")
        if not mine:
            continue
        first = mine[0]
        check((first["rows_min"], first["blocks_per_sm"], first["v_max"], first["one_pass"]) == (0, 0, 0, 0) and
              abs(first["vs_default"] - 1) < 1e-9, f"{op} {m}x{c}: the default first, {first}")
        dflt += first["us"] * n / 1e3
        for x in mine:
            check(x["us"] > 0 and x["gb_s"] > 0, f"{op} {m}x{c}: a time, {x}")
            if op in ("bn_apply", "bn_bwd_apply"):
                check(x["same_bits"], f"{op} {m}x{c} geometry {x['rows_min'], x['blocks_per_sm'], x['v_max']}: "
                                      "not the default's bits")
            else:
                check(x["max_rel_diff"] < 1e-3, f"{op} {m}x{c}: reductions differ by {x['max_rel_diff']}")
    t = tot.get(op, {})
    check(abs(t.get("default_ms", -1) - dflt) <= 1e-3 * max(dflt, 1e-3) + 1e-4,
          f"{op}: total default {t.get('default_ms')} vs the rows' {dflt}")
    check(0 < t.get("best_per_shape_ms", 0) <= t.get("default_ms", 0) + 1e-9 and
          t.get("best_per_shape_ms", 0) <= t.get("best_single_ms", 0) + 1e-9, f"{op}: totals {t}")
check("best single geometry" in r.stderr, "the table on stderr")
finish()
