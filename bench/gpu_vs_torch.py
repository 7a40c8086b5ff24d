#!/usr/bin/env python3
"""gpu_vs_torch.py: the PyTorch side of bench/gpu_vs_torch, and the table assembler.

Measure mode (default): trains torchvision's resnet50(num_classes=100) on one fixed random
batch and prints one JSON line with images/s over --steps steady-state steps (wall clock
between two torch.cuda.synchronize() calls, after --warmup steps). With --image-size 32
(default) the model gets the CIFAR stem (conv1 3x3 stride 1 padding 1, maxpool Identity);
above 64 px it is torchvision's ImageNet model as is (7x7 stem + max-pool). --arch (or a
configuration's sixth field) other than torchvision's ResNets builds the runner's reference
definition of that architecture (scripts/torchvision_model.build_arch: wrn16_8,
preact_resnet18, resnext29_8x64d, vgg16_bn, mobilenet_v2, ...; the CIFAR variant at
<= 64 px). channels_last,
cudnn.benchmark, SGD (lr 0.1, momentum 0.9, weight decay 5e-4).

  precision fp32: TF32 off for cuDNN and matmul     tf32: TF32 on for both
  precision fp16: autocast(float16) + GradScaler    bf16: autocast(bfloat16)
  mode eager | compile (torch.compile of the model; warm-up includes compilation)

--configs "bf16:128:eager fp16:256:compile bf16:256:eager:224:1000 ..." measures several
configurations (precision:batch:mode[:image_size[:classes[:arch]]]) in this one process, one line each
(a process start and CUDA initialisation saved per configuration; torch._dynamo is reset
between compiled ones). A configuration that fails prints a line with "error".

Assemble mode (--assemble RUNNER_JSONL TORCH_JSONL --out FILE --commit C
[--default-graphs on|off]): joins bench_gpu_bench's lines and torch's into one row per
(precision, batch, image_size, arch), resnet50's first:
  {device, precision, batch, image_size, arch, commit,
   runner_img_per_s      the rate of the runner's default configuration: the graph
                         replay's where train.cuda_graphs' default records the step in
                         single mode (auto or true) and the recording worked, else normal
                         launches'. bench_gpu_bench says which (its default_graphs);
                         --default-graphs decides only for lines without that key,
   default_graphs, graphs_scope ("step": the whole step recorded; "fwd_bwd": lines of
   gpu_bench up to the H100 run of 2026-11-26, forward+loss+backward only), step_ms,
   graphs_step_ms, host_ms, mfu, mfu_normal,
   runner_normal_img_per_s, runner_graphs_img_per_s,
   torch_eager_img_per_s, torch_compile_img_per_s, torch_best_img_per_s, torch_best_mode,
   torch_eager_step_ms, torch_version,
   speedup (runner_img_per_s / torch_best_img_per_s), speedup_eager,
   target, meets_target}
(target: 2.0 at batch 128 and 1.4 at batch 256 for resnet50 in fp16/bf16 at 32 px, issue
22; null elsewhere), keeping rows of FILE for configurations this run did not measure, and prints
a table. Not here: the runner side (bench/gpu_bench.c) or building it (bench/gpu_vs_torch).
"""
import argparse
import json
import sys
import time


TORCHVISION_RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")


def build_model(arch, classes, image_size):
    import torch.nn as nn
    import torchvision
    if arch not in TORCHVISION_RESNETS:
        # the other families (issue 24): the runner's reference definitions, the variant
        # chosen by the input size as model.stem: auto does
        import os
        scripts = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts")
        if scripts not in sys.path:
            sys.path.insert(0, scripts)
        from torchvision_model import build_arch
        return build_arch(arch, classes, 3, "cifar" if image_size <= 64 else "imagenet")
    model = getattr(torchvision.models, arch)(num_classes=classes)
    if image_size <= 64:   # the runner's model.stem: auto
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    return model


def measure_one(arch, classes, precision, batch, mode, image_size, warmup, steps):
    import torch
    torch.backends.cudnn.benchmark = True
    tf32 = precision != "fp32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    dev = torch.device("cuda")
    torch.cuda.reset_peak_memory_stats()
    model = build_model(arch, classes, image_size).to(dev).to(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    fwd = torch.compile(model) if mode == "compile" else model
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(batch, 3, image_size, image_size, generator=g).to(dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), generator=g).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = loss_fn(fwd(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    t_warm = time.perf_counter()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t_warm
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    return {
        "device": torch.cuda.get_device_name(0), "precision": precision, "batch": batch, "image_size": image_size,
        "arch": arch, "classes": classes, "torch_mode": mode, "torch_img_per_s": round(batch * steps / secs, 1),
        "step_ms": round(secs * 1e3 / steps, 3), "warmup_s": round(warm_s, 1), "torch_version": torch.__version__,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
    }


def measure(args):
    if not args.configs:
        print(json.dumps(measure_one(args.arch, args.classes, args.precision, args.batch, args.mode,
                                     args.image_size, args.warmup, args.steps)), flush=True)
        return
    import torch
    for spec in args.configs.split():
        parts = spec.split(":")
        prec, batch, mode = parts[0], int(parts[1]), parts[2]
        size = int(parts[3]) if len(parts) > 3 else 32
        classes = int(parts[4]) if len(parts) > 4 else args.classes
        arch = parts[5] if len(parts) > 5 else args.arch
        try:
            row = measure_one(arch, classes, prec, batch, mode, size, args.warmup, args.steps)
        except Exception as e:   # keep going: one configuration's failure is one line
            row = {"precision": prec, "batch": batch, "image_size": size, "arch": arch, "torch_mode": mode,
                   "error": repr(e)[:300]}
        print(json.dumps(row), flush=True)
        if mode == "compile":
            torch._dynamo.reset()
        torch.cuda.empty_cache()


def read_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


TARGETS = {128: 2.0, 256: 1.4}   # issue 22: runner vs PyTorch's faster mode, AMP, 32 px


def key_of(r):
    return (r.get("precision"), r.get("batch"), r.get("image_size", 32), r.get("arch") or "resnet50")


def sort_key(k):
    """resnet50's rows first (issue 22's table), then the other architectures by name."""
    prec, batch, size, arch = k
    return (arch != "resnet50", arch, str(prec), batch or 0, size or 0)


def assemble(args):
    runner = {key_of(r): r for r in read_jsonl(args.assemble[0]) if "runner_img_per_s" in r}
    torch_rows = [t for t in read_jsonl(args.assemble[1]) if t.get("torch_img_per_s")]
    keys = sorted({key_of(t) for t in torch_rows} | set(runner), key=sort_key)
    out = []
    for k in keys:
        prec, batch, size, arch = k
        r = runner.get(k, {})
        modes = {t["torch_mode"]: t for t in torch_rows if key_of(t) == k}
        graphs_default = r["default_graphs"] if "default_graphs" in r else args.default_graphs == "on"
        normal, graphs = r.get("runner_normal_img_per_s", r.get("runner_img_per_s")), r.get("runner_graphs_img_per_s")
        default = graphs if graphs_default and graphs else normal
        best_mode = max(modes, key=lambda m: modes[m]["torch_img_per_s"]) if modes else None
        best = modes[best_mode]["torch_img_per_s"] if best_mode else None
        eager = modes.get("eager", {}).get("torch_img_per_s")
        target = TARGETS.get(batch) if prec in ("fp16", "bf16") and size == 32 and arch == "resnet50" else None
        speedup = round(default / best, 3) if default and best else None
        out.append({
            "device": r.get("device") or next((t.get("device") for t in modes.values()), None),
            "precision": prec, "batch": batch, "image_size": size, "arch": arch,
            "commit": args.commit, "runner_img_per_s": default, "default_graphs": graphs_default and bool(graphs),
            "graphs_scope": r.get("graphs_scope", "fwd_bwd") if r else None,
            "step_ms": r.get("step_ms"), "graphs_step_ms": r.get("graphs_step_ms"), "host_ms": r.get("host_ms"),
            "mfu": r.get("mfu"), "mfu_normal": r.get("mfu_normal"), "runner_normal_img_per_s": normal,
            "runner_graphs_img_per_s": graphs, "torch_eager_img_per_s": eager,
            "torch_compile_img_per_s": modes.get("compile", {}).get("torch_img_per_s"),
            "torch_best_img_per_s": best, "torch_best_mode": best_mode,
            "torch_eager_step_ms": modes.get("eager", {}).get("step_ms"),
            "torch_version": next((t.get("torch_version") for t in modes.values()), None),
            "speedup": speedup, "speedup_eager": round(default / eager, 3) if default and eager else None,
            "target": target, "meets_target": (speedup >= target) if target and speedup else None,
        })
    try:
        with open(args.out) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = []
    done = {key_of(r) for r in out}
    out = [r for r in old if isinstance(r, dict) and key_of(r) not in done and "image_size" in r] + out
    out.sort(key=lambda r: sort_key(key_of(r)))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")

    def fmt(v, spec=".0f"):
        return format(v, spec) if isinstance(v, (int, float)) else "-"
    print(f"{'arch':16} {'prec':5} {'batch':>5} {'px':>4} {'runner':>7} {'normal':>7} {'graphs':>7} {'step ms':>7} {'host ms':>7} "
          f"{'g ms':>6} {'mfu':>5} {'eager':>7} {'compile':>7} {'x best':>6} {'target':>6}")
    for r in out:
        print(f"{r.get('arch') or 'resnet50':16} {r['precision']:5} {r['batch']:5} {r['image_size']:4} {fmt(r['runner_img_per_s']):>7} "
              f"{fmt(r['runner_normal_img_per_s']):>7} {fmt(r['runner_graphs_img_per_s']):>7} "
              f"{fmt(r['step_ms'], '.2f'):>7} {fmt(r['host_ms'], '.2f'):>7} {fmt(r['graphs_step_ms'], '.2f'):>6} "
              f"{fmt(r['mfu'], '.3f'):>5} {fmt(r['torch_eager_img_per_s']):>7} {fmt(r['torch_compile_img_per_s']):>7} "
              f"{fmt(r['speedup'], '.2f'):>6} {fmt(r['target'], '.1f'):>6}")
    dflt = {r.get("default_graphs") for r in out if r.get("runner_img_per_s")}
    print(f"runner_img_per_s is the default configuration's rate (graph replay of the whole step: "
          f"{'yes' if dflt == {True} else 'no' if dflt == {False} else 'mixed'}); wrote {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--configs", help="precision:batch:mode[:image_size[:classes[:arch]]] ... in one process")
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--assemble", nargs=2, metavar=("RUNNER_JSONL", "TORCH_JSONL"))
    ap.add_argument("--default-graphs", choices=["on", "off"], default="off")
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
