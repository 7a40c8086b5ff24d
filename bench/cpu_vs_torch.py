#!/usr/bin/python3
"""cpu_vs_torch.py: PyTorch CPU training throughput for the same networks the runner builds.

The PyTorch half of bench/cpu_vs_torch. Builds the model as the runner does, through
scripts/torchvision_model.py (torchvision's models with the variant's stem; He et al.'s
CIFAR ResNets; the reference definitions of WRN, PreAct-ResNet, ResNeXt-29 and the CIFAR
variants of VGG and MobileNetV2), runs full training steps (zero_grad, forward,
cross-entropy, backward, SGD momentum 0.9 + weight decay) on one synthetic batch, with
torch.set_num_threads(nproc), in both NCHW and channels_last, and reports the faster:
  torch: <images/s> img/s (median of N steps, <ms> ms/step, <layout>)
Usage: cpu_vs_torch.py --model M --batch B [--steps N] [--warmup W] [--layout auto|nchw|cl]
                        [--threads T] [--width W] [--groups G] [--dropout P] [--stem S]
(width / groups 0 and dropout -1: the architecture's own, as model.width etc.)
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import torchvision_model  # noqa: E402  (the runner's architectures in PyTorch)


def measure(model, x, y, steps, warmup, channels_last):
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    lossf = nn.CrossEntropyLoss()
    model.train()
    times = []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        lossf(model(x), y).backward()
        opt.step()
        if s >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--channels", type=int, default=3)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--layout", default="auto", choices=["auto", "nchw", "cl"])
    ap.add_argument("--threads", type=int, default=0, help="0: nproc")
    ap.add_argument("--width", type=float, default=0)
    ap.add_argument("--groups", type=int, default=0)
    ap.add_argument("--dropout", type=float, default=-1)
    ap.add_argument("--stem", default="cifar", choices=["cifar", "imagenet"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads or os.cpu_count() or 1)
    torch.manual_seed(0)
    model = torchvision_model.build_arch(a.model, a.classes, a.channels, a.stem, a.width, a.groups, a.dropout)
    x = torch.randn(a.batch, a.channels, a.size, a.size)
    y = torch.randint(0, a.classes, (a.batch,))
    layouts = {"auto": [False, True], "nchw": [False], "cl": [True]}[a.layout]
    best = None
    for cl in layouts:
        t = measure(model, x, y, a.steps, a.warmup, cl)
        if best is None or t < best[0]:
            best = (t, "channels_last" if cl else "NCHW")
    print("torch: %.1f img/s (median of %d steps, %.1f ms/step, %s; %s batch %d %dx%dx%d, %d threads)" %
          (a.batch / best[0], a.steps, 1e3 * best[0], best[1], a.model, a.batch, a.channels, a.size,
           a.size, torch.get_num_threads()))


if __name__ == "__main__":
    main()
