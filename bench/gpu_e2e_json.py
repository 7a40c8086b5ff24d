#!/usr/bin/env python3
"""gpu_e2e_json.py: bench/results/gpu_e2e.json from the run directories of a GPU session's
end-to-end epochs (tests/gpu/device_session.sh, stage e2e).

Each run under --runs is one configuration of experiments/resnet50_cifar100.yaml (one
epoch on CIFAR-100-shaped synthetic data), its name the configuration's label
(e2e_bf16_default, e2e_ddp1_nccl_bf16_default, ...). Rows:

  {device, precision, batch, seconds_per_epoch, images_per_second, commit,
   config, mode, world_size, cuda_graphs, deterministic, status, val_top1,
   peak_memory_bytes}

(precision fp32 | fp16 | bf16 from amp; cuda_graphs and deterministic as resolved.yaml
says; batch the global batch). Then the checks of issue 22, printed and added as the
last element {"checks": {...}}: the flagship (bf16, default keys, world 1) at most 3.0 s
per epoch; DDP world 1 over NCCL within 5% of single (seconds per epoch, default keys);
with them the train.cuda_graphs the default resolved to (flagship_cuda_graphs) and, when
the session ran e2e_bf16_graphs_false, that row's seconds and the default's speedup over
it (graphs_false_seconds_per_epoch, speedup_vs_graphs_false).

Usage: gpu_e2e_json.py --runs DIR --out FILE [--device D] [--commit C]
"""
import argparse
import glob
import json
import os
import re
import sys


def resolved_value(text, section, key):
    """The value of `key` under top-level `section:` in resolved.yaml (block style)."""
    m = re.search(rf"^{section}:\s*\n((?:[ \t]+.*\n?)*)", text, re.M)
    if not m:
        return None
    k = re.search(rf"^[ \t]+{key}:\s*([^\n#]*)", m.group(1), re.M)
    return k.group(1).strip().strip("'\"") if k else None


def row_of(run, device, commit):
    with open(os.path.join(run, "summary.json")) as f:
        s = json.load(f)
    try:
        with open(os.path.join(run, "resolved.yaml")) as f:
            res = f.read()
    except OSError:
        res = ""
    amp = resolved_value(res, "amp", "enabled") == "true"
    prec = resolved_value(res, "amp", "dtype") if amp else "fp32"
    batch = resolved_value(res, "train", "batch_size")
    return {
        "device": device, "precision": prec, "batch": int(batch) if batch and batch.isdigit() else None,
        "seconds_per_epoch": s.get("seconds_per_epoch"), "images_per_second": s.get("images_per_second"),
        "commit": commit, "config": s.get("name") or os.path.basename(os.path.dirname(run)),
        "mode": resolved_value(res, "parallel", "mode"), "world_size": s.get("world_size"),
        "backend": resolved_value(res, "parallel", "backend"),
        "cuda_graphs": resolved_value(res, "train", "cuda_graphs"),
        "cuda_fusion": resolved_value(res, "train", "cuda_fusion"),
        "deterministic": resolved_value(res, "train", "deterministic"), "status": s.get("status"),
        "val_top1": s.get("val_top1"), "peak_memory_bytes": s.get("peak_memory_bytes"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default=None)
    ap.add_argument("--commit", default="unknown")
    a = ap.parse_args()
    rows = []
    for summ in sorted(glob.glob(os.path.join(a.runs, "*", "*", "summary.json"))):
        try:
            rows.append(row_of(os.path.dirname(summ), a.device, a.commit))
        except (OSError, ValueError) as e:
            print(f"gpu_e2e_json: {summ}: {e}", file=sys.stderr)
    by = {r["config"]: r for r in rows}
    flag = by.get("e2e_bf16_default", {})
    single, ddp = flag.get("seconds_per_epoch"), by.get("e2e_ddp1_nccl_bf16_default", {}).get("seconds_per_epoch")
    checks = {
        "flagship_seconds_per_epoch": single, "flagship_target_s": 3.0,
        "flagship_meets_target": single <= 3.0 if isinstance(single, (int, float)) else None,
        "ddp1_nccl_seconds_per_epoch": ddp,
        "ddp1_vs_single": round(ddp / single, 4) if isinstance(ddp, (int, float)) and single else None,
    }
    checks["ddp1_within_5pct"] = checks["ddp1_vs_single"] <= 1.05 if checks["ddp1_vs_single"] else None
    checks["flagship_cuda_graphs"] = flag.get("cuda_graphs")
    off = by.get("e2e_bf16_graphs_false", {}).get("seconds_per_epoch")
    checks["graphs_false_seconds_per_epoch"] = off
    checks["speedup_vs_graphs_false"] = round(off / single, 3) if isinstance(off, (int, float)) and single else None
    with open(a.out, "w") as f:
        json.dump(rows + [{"checks": checks}], f, indent=1)
        f.write("\n")
    print(f"{'config':34} {'prec':5} {'mode':6} {'graphs':6} {'s/epoch':>8} {'img/s':>8} {'status':10} val_top1")
    for r in rows:
        spe, ips = r["seconds_per_epoch"], r["images_per_second"]
        print(f"{str(r['config']):34} {str(r['precision']):5} {str(r['mode']):6} {str(r['cuda_graphs']):6} "
              f"{'-' if spe is None else format(spe, '.2f'):>8} {'-' if ips is None else format(ips, '.0f'):>8} "
              f"{str(r['status']):10} {r['val_top1']}")
    print("checks:", json.dumps(checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
