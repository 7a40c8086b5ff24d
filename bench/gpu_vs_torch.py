#!/usr/bin/env python3
"""gpu_vs_torch.py: the PyTorch side of bench/gpu_vs_torch, and the table assembler.

Measure mode (default): trains torchvision's resnet50(num_classes=100) with the CIFAR
stem (conv1 3x3 stride 1 padding 1, maxpool Identity), channels_last,
cudnn.benchmark, SGD (lr 0.1, momentum 0.9, weight decay 5e-4) on one fixed random
CIFAR-shaped batch, and prints one JSON line with images/s over --steps steady-state steps
(wall clock between two torch.cuda.synchronize() calls, after --warmup steps).

  precision fp32: TF32 off for cuDNN and matmul     tf32: TF32 on for both
  precision fp16: autocast(float16) + GradScaler    bf16: autocast(bfloat16)
  mode eager | compile (torch.compile of the model; warm-up includes compilation)

Assemble mode (--assemble RUNNER_JSONL TORCH_JSONL --out FILE --commit C): joins the
runner's and torch's lines into rows {device, precision, batch, runner_img_per_s,
torch_img_per_s, torch_mode, commit, speedup, runner_graphs_img_per_s (the runner with
train.cuda_graphs' replay), speedup_graphs} and writes them as a JSON list (keeping
rows of FILE for configurations this run did not measure), printing a table. Not here: the runner side (bench/gpu_bench.c) or building it (bench/gpu_vs_torch).
"""
import argparse
import json
import sys
import time


def build_model(arch, classes):
    import torch.nn as nn
    import torchvision
    model = getattr(torchvision.models, arch)(num_classes=classes)
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def measure(args):
    import torch
    torch.backends.cudnn.benchmark = True
    tf32 = args.precision != "fp32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    dev = torch.device("cuda")
    model = build_model(args.arch, args.classes).to(dev).to(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    scaler = torch.amp.GradScaler("cuda", enabled=args.precision == "fp16")
    fwd = torch.compile(model) if args.mode == "compile" else model
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(args.batch, 3, 32, 32, generator=g).to(dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, args.classes, (args.batch,), generator=g).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = loss_fn(fwd(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    print(json.dumps({
        "device": torch.cuda.get_device_name(0), "precision": args.precision, "batch": args.batch,
        "torch_mode": args.mode, "torch_img_per_s": round(args.batch * args.steps / secs, 1),
        "step_ms": round(secs * 1e3 / args.steps, 3), "torch_version": torch.__version__,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
    }))


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def assemble(args):
    runner = {(r["precision"], r["batch"]): r for r in read_jsonl(args.assemble[0])}
    torch_rows = read_jsonl(args.assemble[1])
    keys = sorted({(r["precision"], r["batch"]) for r in torch_rows} | set(runner))
    out = []
    for prec, batch in keys:
        r = runner.get((prec, batch), {})
        modes = [t for t in torch_rows if t["precision"] == prec and t["batch"] == batch] or [{}]
        for t in modes:
            ri, ti = r.get("runner_img_per_s"), t.get("torch_img_per_s")
            rg = r.get("runner_graphs_img_per_s")
            out.append({
                "device": r.get("device") or t.get("device"), "precision": prec, "batch": batch,
                "runner_img_per_s": ri, "torch_img_per_s": ti, "torch_mode": t.get("torch_mode"),
                "commit": args.commit, "speedup": round(ri / ti, 3) if ri and ti else None,
                "runner_graphs_img_per_s": rg,
                "speedup_graphs": round(rg / ti, 3) if rg and ti else None,
            })
    # keep rows of configurations this run did not measure (runs may be split in parts)
    try:
        with open(args.out) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = []
    done = {(r["precision"], r["batch"], r["torch_mode"]) for r in out}
    out = [r for r in old if (r.get("precision"), r.get("batch"), r.get("torch_mode")) not in done] + out
    out.sort(key=lambda r: (str(r.get("precision")), r.get("batch") or 0, str(r.get("torch_mode"))))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{'precision':9} {'batch':>5} {'mode':8} {'runner img/s':>13} {'+graphs':>8} {'torch img/s':>12} "
          f"{'x':>6} {'x graphs':>8}")
    for row in out:
        def fmt(v):
            return f"{v:.0f}" if v else "-"
        def ratio(v):
            return f"{v:.2f}" if v else "-"
        print(f"{row['precision']:9} {row['batch']:5} {str(row['torch_mode']):8} "
              f"{fmt(row['runner_img_per_s']):>13} {fmt(row.get('runner_graphs_img_per_s')):>8} "
              f"{fmt(row['torch_img_per_s']):>12} {ratio(row['speedup']):>6} {ratio(row.get('speedup_graphs')):>8}")
    # the target compares against the faster of torch's modes, per AMP configuration
    worst = None
    for prec, batch in keys:
        if prec not in ("fp16", "bf16"):
            continue
        ri = runner.get((prec, batch), {}).get("runner_img_per_s")
        best = max((t["torch_img_per_s"] for t in torch_rows
                    if t["precision"] == prec and t["batch"] == batch), default=None)
        if ri and best:
            worst = ri / best if worst is None else min(worst, ri / best)
    if worst is not None:
        print(f"AMP: runner / faster torch mode, worst configuration: {worst:.2f}x (target >= 1.3x)")
    print(f"wrote {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--assemble", nargs=2, metavar=("RUNNER_JSONL", "TORCH_JSONL"))
    ap.add_argument("--out")
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    if args.assemble:
        if not args.out:
            ap.error("--assemble needs --out")
        assemble(args)
    else:
        measure(args)


if __name__ == "__main__":
    sys.exit(main())
