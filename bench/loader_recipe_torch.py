#!/usr/bin/python3
"""loader_recipe_torch.py: torchvision's / timm-style side of bench/loader_bench's recipe
rows, on the same CIFAR-shaped data (32x32x3 uint8, batch 128), one process, one torch
thread: RandomCrop(32, 4) + RandomHorizontalFlip on uint8 tensors (made contiguous: torchvision
0.14's equalize needs it), then RandAugment(2, 9)
(or TrivialAugmentWide), ConvertImageDtype + Normalize, RandomErasing(0.25) with per-pixel
normal values (timm's 'pixel' mode: torchvision's value='random'), and mixup/cutmix on
the batch as timm's Mixup does (written out here: timm is not in Debian).
Prints images/s wall and images per CPU-second per row.

Usage: loader_recipe_torch.py [images (default 5000)]
"""
import sys
import time

import numpy as np
import torch
import torchvision.transforms as T

torch.set_num_threads(1)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
rng = np.random.default_rng(0)
imgs = torch.from_numpy(rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8))
base = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.Lambda(lambda t: t.contiguous())]
tail = [T.ConvertImageDtype(torch.float32), T.Normalize((0.5,) * 3, (0.25,) * 3)]


def mix(x, alpha=0.8, cut_alpha=1.0):
    """timm Mixup, batch mode, switch_prob 0.5, with label smoothing 0.1 on 10 classes."""
    lam = 1.0
    cut = np.random.rand() < 0.5
    lam = float(np.random.beta(cut_alpha, cut_alpha) if cut else np.random.beta(alpha, alpha))
    if cut:
        h, w = x.shape[-2:]
        r = np.sqrt(1 - lam)
        ch, cw = int(h * r), int(w * r)
        cy, cx = np.random.randint(h), np.random.randint(w)
        yl, yh = np.clip(cy - ch // 2, 0, h), np.clip(cy + ch // 2, 0, h)
        xl, xh = np.clip(cx - cw // 2, 0, w), np.clip(cx + cw // 2, 0, w)
        x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        lam = 1 - (yh - yl) * (xh - xl) / float(h * w)
    else:
        xf = x.flip(0).mul_(1 - lam)
        x.mul_(lam).add_(xf)
    y = torch.randint(0, 10, (x.shape[0], 1))
    off = 0.1 / 10
    y1 = torch.full((x.shape[0], 10), off).scatter_(1, y, 1 - 0.1 + off)
    return x, y1 * lam + y1.flip(0) * (1 - lam)


rows = [
    ("crop + flip + RandAugment(2, 9)", T.Compose(base + [T.RandAugment(2, 9)] + tail), False),
    ("+ erasing(0.25, pixel)", T.Compose(base + [T.RandAugment(2, 9)] + tail +
                                         [T.RandomErasing(0.25, value="random")]), False),
    ("+ mixup/cutmix (batch)", T.Compose(base + [T.RandAugment(2, 9)] + tail +
                                         [T.RandomErasing(0.25, value="random")]), True),
    ("crop + flip + TrivialAugmentWide", T.Compose(base + [T.TrivialAugmentWide()] + tail), False),
]
for name, tf, batch_mix in rows:
    t0, c0 = time.time(), time.process_time()
    for b in range(0, n, 128):
        batch = torch.stack([tf(imgs[i]) for i in range(b, min(n, b + 128))])
        if batch_mix:
            mix(batch)
    dt, dc = time.time() - t0, time.process_time() - c0
    print(f"torchvision {name}: {n / dt:.0f} images/s wall, {n / dc:.0f} images per CPU-second")
