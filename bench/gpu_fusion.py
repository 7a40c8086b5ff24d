#!/usr/bin/env python3
"""gpu_fusion.py: the table assembler of bench/gpu_fusion (issue 25).

Reads bench_gpu_bench's JSON lines of one bench/gpu_fusion run (training rows with
"fusion", and "conv_host_us" rows), writes
  --out FILE: the training rows as {device, precision, batch, fusion, torch_mode:
    "runner-fusion", commit, runner_img_per_s, step_ms, runner_graphs_img_per_s,
    graphs_step_ms, mfu, nonconv_gb_model, conv_epilogue_gb_model, peak_memory_bytes,
    recipe_min_model (200 epochs of 50000 images at the graph-replay rate: model only, no
    evaluation or data), torch_img_per_s: null, speedup: null}, replacing rows of the
    same (precision, batch, fusion) and keeping every other row (gpu_vs_torch's);
  --host-out FILE: the host-microseconds rows {device, precision, batch, api, dir,
    host_us_per_call, calls, graph_calls, commit};
and prints both tables, each training row with its change against "none" of the same
precision and batch (step_ms, graphs_step_ms, and the model's non-conv GB).
"""
import argparse
import json

from gpu_vs_torch import read_jsonl   # beside this file; imports torch only to measure


def merge(path, new, key):
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = []
    done = {key(r) for r in new}
    out = [r for r in old if key(r) not in done] + new
    out.sort(key=lambda r: json.dumps([str(r.get("torch_mode")), str(r.get("precision")), r.get("batch") or 0,
                                       str(r.get("fusion")), str(r.get("api")), str(r.get("dir"))]))
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw")
    ap.add_argument("--out", required=True)
    ap.add_argument("--host-out", required=True)
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    raw = read_jsonl(args.raw)
    train, host = [], []
    for r in raw:
        if r.get("bench") == "conv_host_us":
            host.append({k: r.get(k) for k in ("device", "precision", "batch", "arch", "api", "dir",
                                               "host_us_per_call", "calls", "graph_calls")} | {"commit": args.commit})
            continue
        if "fusion" not in r:
            continue
        gi = r.get("runner_graphs_img_per_s")
        train.append({
            "device": r.get("device"), "precision": r.get("precision"), "batch": r.get("batch"),
            "fusion": r.get("fusion"), "torch_mode": "runner-fusion", "commit": args.commit,
            "runner_img_per_s": r.get("runner_img_per_s"), "step_ms": r.get("step_ms"),
            "runner_graphs_img_per_s": gi, "graphs_step_ms": r.get("graphs_step_ms"), "mfu": r.get("mfu"),
            "nonconv_gb_model": r.get("nonconv_gb_model"), "conv_epilogue_gb_model": r.get("conv_epilogue_gb_model"),
            "peak_memory_bytes": r.get("peak_memory_bytes"),
            "recipe_min_model": round(200 * 50000 / gi / 60, 2) if gi else None,
            "torch_img_per_s": None, "speedup": None, "speedup_graphs": None,
        })
    merge(args.out, train, lambda r: (r.get("torch_mode"), r.get("precision"), r.get("batch"), r.get("fusion")))
    merge(args.host_out, host, lambda r: (r.get("precision"), r.get("batch"), r.get("api"), r.get("dir")))
    base = {(r["precision"], r["batch"]): r for r in train if r["fusion"] == "none"}

    def num(v, f="{:.3f}"):
        return f.format(v) if isinstance(v, (int, float)) else "-"

    def delta(r, k):
        b = base.get((r["precision"], r["batch"]))
        if not b or not isinstance(r.get(k), (int, float)) or not isinstance(b.get(k), (int, float)) or not b[k]:
            return "-"
        return f"{100 * (r[k] - b[k]) / b[k]:+.1f}%"

    print(f"{'prec':5} {'batch':>5} {'fusion':52} {'step_ms':>8} {'d':>7} {'graph_ms':>8} {'d':>7} {'mfu':>6} "
          f"{'GB model':>8} {'d':>7} {'recipe min':>10}")
    for r in train:
        print(f"{r['precision']:5} {r['batch']:5} {r['fusion']:52} {num(r['step_ms']):>8} {delta(r, 'step_ms'):>7} "
              f"{num(r['graphs_step_ms']):>8} {delta(r, 'graphs_step_ms'):>7} {num(r['mfu'], '{:.3f}'):>6} "
              f"{num(r['nonconv_gb_model'], '{:.2f}'):>8} {delta(r, 'nonconv_gb_model'):>7} "
              f"{num(r['recipe_min_model'], '{:.1f}'):>10}")
    if host:
        print(f"\n{'api':7} {'dir':10} {'host us/call':>12} {'calls':>6} {'on graph':>8}")
        for r in host:
            print(f"{r['api']:7} {r['dir']:10} {num(r['host_us_per_call'], '{:.1f}'):>12} {r['calls']:6} "
                  f"{r['graph_calls']:8}")
    print(f"wrote {args.out} and {args.host_out}")


if __name__ == "__main__":
    main()
