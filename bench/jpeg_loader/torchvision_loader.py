#!/usr/bin/env python3
"""torchvision_loader.py DIR WORKERS [BATCH]: one epoch of torchvision's ImageFolder +
DataLoader over DIR/train with the ImageNet training transform (RandomResizedCrop(224) +
RandomHorizontalFlip + ToTensor + Normalize), PIL decoding, WORKERS loader processes
(0: in this process), one torch thread each. Prints one JSON line: images, wall seconds,
CPU seconds of this process and its workers."""
import json
import os
import resource
import sys
import time

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

root, workers = sys.argv[1], int(sys.argv[2])
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
torch.set_num_threads(1)
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = ImageFolder(os.path.join(root, "train"), transform=tf)


def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                 worker_init_fn=lambda _: torch.set_num_threads(1))
c0, t0, n = cpu(), time.monotonic(), 0
for x, y in dl:
    n += x.shape[0]
wall, cpus = time.monotonic() - t0, cpu() - c0
print(json.dumps({"images": n, "wall_s": wall, "cpu_s": cpus}))
