#!/usr/bin/env python3
"""conv_layers_torch.py: the PyTorch side of the per-layer conv+BN benchmark.

Times, for each distinct conv shape of resnet20 (batch 128), resnet18-CIFAR (batch 64), and
the depthwise / grouped 3x3 layers of MobileNetV2-CIFAR and ResNeXt-29 8x16d (batch 64),
one training pass of the conv (forward + backward data + backward filter; the stem's input
needs no gradient) and of BatchNorm2d+ReLU (ReLU6 for MobileNetV2) (forward + backward), in
PyTorch with
torch.set_num_threads(2), in both NCHW and channels_last (the faster one counts). The same
shapes as bench/conv_layers.c, in the same order. With --ours PATH it runs our
bench_conv_layers for each layer right after PyTorch's, alternating the two round after
round so both see the same machine load, and prints per-layer ratios (ours / torch;
below 1 means we are faster) and count-weighted totals.

Usage: python3 bench/conv_layers_torch.py [--ours build/bench/bench_conv_layers]
                                          [--rounds 3] [--reps 3] [--threads 2]
                                          [--clock wall|cpu] [--layers 0,1,...]
Not here: whole-model timing (bench/cpu_vs_torch).
"""
import argparse
import subprocess
import time

import torch

LAYERS = [  # net, n, hw, c, k, r, stride, count[, groups]
    ("resnet20", 128, 32, 3, 16, 3, 1, 1),
    ("resnet20", 128, 32, 16, 16, 3, 1, 6),
    ("resnet20", 128, 32, 16, 32, 3, 2, 1),
    ("resnet20", 128, 32, 16, 32, 1, 2, 1),
    ("resnet20", 128, 16, 32, 32, 3, 1, 5),
    ("resnet20", 128, 16, 32, 64, 3, 2, 1),
    ("resnet20", 128, 16, 32, 64, 1, 2, 1),
    ("resnet20", 128, 8, 64, 64, 3, 1, 5),
    ("resnet18", 64, 32, 3, 64, 3, 1, 1),
    ("resnet18", 64, 32, 64, 64, 3, 1, 4),
    ("resnet18", 64, 32, 64, 128, 3, 2, 1),
    ("resnet18", 64, 32, 64, 128, 1, 2, 1),
    ("resnet18", 64, 16, 128, 128, 3, 1, 3),
    ("resnet18", 64, 16, 128, 256, 3, 2, 1),
    ("resnet18", 64, 16, 128, 256, 1, 2, 1),
    ("resnet18", 64, 8, 256, 256, 3, 1, 3),
    ("resnet18", 64, 8, 256, 512, 3, 2, 1),
    ("resnet18", 64, 8, 256, 512, 1, 2, 1),
    ("resnet18", 64, 4, 512, 512, 3, 1, 3),
    ("mbv2", 64, 32, 32, 32, 3, 1, 1, 32),
    ("mbv2", 64, 32, 96, 96, 3, 1, 1, 96),
    ("mbv2", 64, 32, 144, 144, 3, 1, 1, 144),
    ("mbv2", 64, 32, 144, 144, 3, 2, 1, 144),
    ("mbv2", 64, 16, 192, 192, 3, 1, 2, 192),
    ("mbv2", 64, 16, 192, 192, 3, 2, 1, 192),
    ("mbv2", 64, 8, 384, 384, 3, 1, 4, 384),
    ("mbv2", 64, 8, 576, 576, 3, 1, 2, 576),
    ("mbv2", 64, 8, 576, 576, 3, 2, 1, 576),
    ("mbv2", 64, 4, 960, 960, 3, 1, 3, 960),
    ("resnext", 64, 32, 128, 128, 3, 1, 3, 8),
    ("resnext", 64, 32, 256, 256, 3, 2, 1, 8),
    ("resnext", 64, 16, 256, 256, 3, 1, 2, 8),
    ("resnext", 64, 16, 512, 512, 3, 2, 1, 8),
    ("resnext", 64, 8, 512, 512, 3, 1, 2, 8),
]


CLOCK = time.perf_counter


def time_torch(layer, reps, channels_last):
    """Min over reps of (conv fwd+bwd ms, bn+relu fwd+bwd ms) for one layer."""
    net, n, hw, c, k, r, stride = layer[:7]
    groups = layer[8] if len(layer) > 8 else 1
    act = torch.nn.functional.relu6 if net == "mbv2" else torch.relu
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    conv = torch.nn.Conv2d(c, k, r, stride=stride, padding=r // 2, bias=False, groups=groups)
    conv = conv.to(memory_format=fmt)
    bn = torch.nn.BatchNorm2d(k)
    x = torch.randn(n, c, hw, hw).to(memory_format=fmt)
    x.requires_grad_(c != 3)
    p = (hw + 2 * (r // 2) - r) // stride + 1
    g = torch.randn(n, k, p, p).to(memory_format=fmt)
    best_conv = best_bn = float("inf")
    for rep in range(reps + 1):          # rep 0: warm-up
        t0 = CLOCK()
        y = conv(x)
        y.backward(g)
        t1 = CLOCK()
        yb = y.detach().requires_grad_(True)
        z = act(bn(yb))
        z.backward(g)
        t2 = CLOCK()
        if rep:
            best_conv = min(best_conv, (t1 - t0) * 1e3)
            best_bn = min(best_bn, (t2 - t1) * 1e3)
        conv.weight.grad = None
        x.grad = None
    return best_conv, best_bn


def time_ours(exe, i, reps, threads, clock):
    out = subprocess.run([exe, "--layer", str(i), "--reps", str(reps), "--threads",
                          str(threads), "--clock", clock], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == str(i):
            return float(f[-2]), float(f[-1]), f[-3]
    raise RuntimeError("no result line for layer %d in:\n%s" % (i, out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="path to bench_conv_layers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: process CPU time (work done, robust to a shared machine)")
    ap.add_argument("--layers", help="comma-separated layer indices (default: all)")
    a = ap.parse_args()
    global CLOCK
    if a.clock == "cpu":
        CLOCK = time.process_time
    only = set(int(v) for v in a.layers.split(",")) if a.layers else None
    torch.set_num_threads(a.threads)
    inf = float("inf")
    t_conv = [inf] * len(LAYERS)
    t_bn = [inf] * len(LAYERS)
    o_conv = [inf] * len(LAYERS)
    o_bn = [inf] * len(LAYERS)
    engine = [""] * len(LAYERS)
    for _ in range(a.rounds):
        for i, layer in enumerate(LAYERS):
            if only is not None and i not in only:
                continue
            for cl in (False, True):
                cm, bm = time_torch(layer, a.reps, cl)
                t_conv[i] = min(t_conv[i], cm)
                t_bn[i] = min(t_bn[i], bm)
            if a.ours:
                cm, bm, engine[i] = time_ours(a.ours, i, a.reps, a.threads, a.clock)
                o_conv[i] = min(o_conv[i], cm)
                o_bn[i] = min(o_bn[i], bm)
    print("%-3s %-9s %-22s %5s | %9s %9s | %9s %9s %6s | %6s %6s" %
          ("#", "net", "shape", "count", "torch_cv", "torch_bn", "ours_cv", "ours_bn", "engine",
           "r_conv", "r_bn"))
    tot = {}
    for i, layer in enumerate(LAYERS):
        net, n, hw, c, k, r, s, cnt = layer[:8]
        if only is not None and i not in only:
            continue
        desc = "%dx%d %d->%d k%d s%d" % (hw, hw, c, k, r, s)
        if len(layer) > 8:
            desc += " g%d" % layer[8]
        if a.ours:
            print("%-3d %-9s %-22s %5d | %9.3f %9.3f | %9.3f %9.3f %6s | %6.2f %6.2f" %
                  (i, net, desc, cnt, t_conv[i], t_bn[i], o_conv[i], o_bn[i], engine[i],
                   o_conv[i] / t_conv[i], o_bn[i] / t_bn[i]))
        else:
            print("%-3d %-9s %-22s %5d | %9.3f %9.3f" % (i, net, desc, cnt, t_conv[i], t_bn[i]))
        d = tot.setdefault(net, [0.0, 0.0, 0.0, 0.0])
        d[0] += cnt * t_conv[i]
        d[1] += cnt * t_bn[i]
        d[2] += cnt * o_conv[i]
        d[3] += cnt * o_bn[i]
    for net, d in tot.items():
        line = "total %s: torch conv %.1f ms + bn %.1f ms = %.1f ms" % (net, d[0], d[1],
                                                                      d[0] + d[1])
        if a.ours:
            line += "; ours conv %.1f + bn %.1f = %.1f ms; ratio ours/torch %.2f" % (
                d[2], d[3], d[2] + d[3], (d[2] + d[3]) / (d[0] + d[1]))
        print(line)


if __name__ == "__main__":
    main()
