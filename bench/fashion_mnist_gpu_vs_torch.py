#!/usr/bin/env python3
"""fashion_mnist_gpu_vs_torch.py: the runner's test accuracy against PyTorch's on real
data, same recipe, same device, several seeds (issue 22 item 4).

Runs `runner experiments/fashion_mnist_resnet18.yaml` once per seed (--set seed, data.root,
train.epochs, device; a fresh run directory under --work), then
bench/fashion_mnist_torch.py once with all seeds, and writes --out
(bench/results/fashion_mnist_gpu_vs_torch.json):

  {device, commit, date, recipe, epochs, train_images, test_images, seeds,
   runner: [{seed, test_top1, test_loss, seconds_per_epoch, images_per_second, wall_s,
             status}], torch: [{seed, test_top1, test_loss, seconds, ...}],
   runner_mean, runner_std, torch_mean, torch_std, torch_min, torch_max,
   verdict, verdict_rule}

verdict: true when the runner's mean test top-1 lies within the spread of PyTorch's
seeds, [min, max] (the issue's rule); null when either side has fewer than 2 seeds
finished. A side that fails or runs out of --deadline seconds keeps the seeds it
finished, and the JSON is written all the same.

Usage: fashion_mnist_gpu_vs_torch.py --runner build/runner --root DIR [--epochs 12]
         [--seeds 0 1 2] [--device cuda] [--work DIR] [--out FILE] [--commit C]
         [--deadline SECONDS] [--python python3] [--runner-env K=V ...] [--threads N]
         [--precision bf16|fp32] [--clean-torch-env]
--device cpu with a small --root (a subset of the files) is the CPU test of the script.
"""
import argparse
import datetime
import glob
import json
import os
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
root_dir = os.path.dirname(here)
RECIPE = ("resnet18 (CIFAR stem), SGD 0.1/0.9/5e-4, cosine to 0 after 1 warm-up epoch (per step), batch 128, "
          "bf16 autocast, crop 28 pad 2 + flip, Normalize(0.2860, 0.3530); test split at the end")


def summary_of(work, name):
    hits = sorted(glob.glob(os.path.join(work, name, "*", "summary.json")))
    if not hits:
        return None
    with open(hits[-1]) as f:
        return json.load(f)


def run_runner(a, seed, env, left):
    name = f"fm_seed{seed}"
    cmd = [a.runner, os.path.join(root_dir, "experiments", "fashion_mnist_resnet18.yaml"),
           "--set", f"name={name}", "--set", f"seed={seed}", "--set", f"data.root={a.root}",
           "--set", f"train.epochs={a.epochs}", "--set", f"train.eval_every={a.epochs}",
           "--set", f"checkpoint.every_epochs={a.epochs}", "--set", f"device={a.device}",
           "--set", f"output.root={a.work}", "--set", "checkpoint.resume=never", "--set", "logging.print_every=1000"]
    if a.precision == "fp32":
        cmd += ["--set", "amp.enabled=false"]
    t0 = time.perf_counter()
    log = os.path.join(a.work, f"{name}.log")
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=min(max(left, 1), 1e6)).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    s = summary_of(a.work, name) or {}
    row = {"seed": seed, "test_top1": s.get("val_top1"), "test_loss": s.get("val_loss"),
           "seconds_per_epoch": s.get("seconds_per_epoch"), "images_per_second": s.get("images_per_second"),
           "wall_s": round(time.perf_counter() - t0, 2), "status": s.get("status", f"exit {rc}")}
    print(json.dumps({"who": "runner", **row}), flush=True)
    return row


def run_torch(a, left):
    cmd = [a.python, os.path.join(here, "fashion_mnist_torch.py"), "--root", a.root, "--epochs", str(a.epochs),
           "--device", a.device, "--precision", a.precision, "--seeds", *[str(s) for s in a.seeds]]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    rows = []
    env = dict(os.environ)
    if a.clean_torch_env:
        env.pop("LD_LIBRARY_PATH", None)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=min(max(left, 1), 1e6), env=env)
        out, err = p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = "timeout"
    for line in out.splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
            print(line, flush=True)
    if len(rows) < len(a.seeds):
        print(f"fashion_mnist_torch.py finished {len(rows)} of {len(a.seeds)} seeds: {err[-1500:]}", file=sys.stderr)
    return rows


def stats(vals):
    vals = [v for v in vals if isinstance(v, (int, float))]
    if not vals:
        return None, None
    return statistics.mean(vals), (statistics.stdev(vals) if len(vals) > 1 else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runner", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--work", default="/tmp/fm_runs")
    ap.add_argument("--out", default=os.path.join(root_dir, "bench", "results", "fashion_mnist_gpu_vs_torch.json"))
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds for both sides together")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--runner-env", nargs="*", default=[], help="K=V set for the runner only (e.g. its libraries)")
    ap.add_argument("--clean-torch-env", action="store_true", help="drop LD_LIBRARY_PATH for PyTorch")
    ap.add_argument("--threads", type=int, default=0, help="PyTorch's CPU threads (CPU test)")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"], help="fp32: the CPU test only")
    a = ap.parse_args()
    a.root = os.path.abspath(a.root)
    os.makedirs(a.work, exist_ok=True)
    t_end = time.perf_counter() + a.deadline
    env = dict(os.environ)
    for kv in a.runner_env:
        k, _, v = kv.partition("=")
        env[k] = v
    # the runner gets half the time left per side at most, then PyTorch the rest
    runner_rows = []
    for s in a.seeds:
        left = (t_end - time.perf_counter()) * 0.5
        if left < 5:
            print(f"runner seed {s}: skipped (time)", file=sys.stderr)
            continue
        runner_rows.append(run_runner(a, s, env, left))
    torch_rows = run_torch(a, t_end - time.perf_counter())
    r_mean, r_std = stats([r["test_top1"] for r in runner_rows])
    t_vals = [t["test_top1"] for t in torch_rows]
    t_mean, t_std = stats(t_vals)
    ok_r = [r for r in runner_rows if isinstance(r["test_top1"], (int, float))]
    verdict = None
    if len(ok_r) >= 2 and len(t_vals) >= 2:
        verdict = min(t_vals) <= r_mean <= max(t_vals)
    dev = next((t.get("device") for t in torch_rows if t.get("device")), a.device)
    out = {"device": dev, "precision": a.precision, "commit": a.commit, "date": datetime.date.today().isoformat(), "recipe": RECIPE,
           "experiment": "experiments/fashion_mnist_resnet18.yaml", "epochs": a.epochs,
           "train_images": next((t.get("train_images") for t in torch_rows), None),
           "test_images": next((t.get("test_images") for t in torch_rows), None), "seeds": a.seeds,
           "runner": runner_rows, "torch": torch_rows, "runner_mean": r_mean, "runner_std": r_std,
           "torch_mean": t_mean, "torch_std": t_std, "torch_min": min(t_vals) if t_vals else None,
           "torch_max": max(t_vals) if t_vals else None, "verdict": verdict,
           "verdict_rule": "runner mean test top-1 within [min, max] of PyTorch's seeds"}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    fmt = lambda v: "-" if v is None else f"{v:.4f}"
    print(f"Fashion-MNIST, {a.epochs} epochs, {dev}: runner {fmt(r_mean)} (sd {fmt(r_std)}, {len(ok_r)} seeds), "
          f"torch {fmt(t_mean)} (sd {fmt(t_std)}, range {fmt(out['torch_min'])}..{fmt(out['torch_max'])}, "
          f"{len(t_vals)} seeds): verdict {verdict}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
