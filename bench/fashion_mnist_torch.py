#!/usr/bin/env python3
"""fashion_mnist_torch.py: PyTorch's side of the runner-vs-PyTorch accuracy check on
Fashion-MNIST (bench/fashion_mnist_gpu_vs_torch.py; issue 22): the recipe of
experiments/fashion_mnist_resnet18.yaml, written the way the seeds' scripts train.

  model     torchvision.models.resnet18(num_classes=10) with the CIFAR stem changes
            (conv1 = Conv2d(1, 64, 3, 1, 1, bias=False), maxpool = Identity); conv1 gets
            torchvision's own ResNet init (kaiming_normal_, fan_out, relu) like every other
            conv, as the runner's net_init gives it
  data      the idx .gz files under --root (train-*, t10k-*), all of them (pack-deps.sh
            FASHION=1 writes 12,000 training images and the 10,000 test images); per
            epoch a fresh shuffle, batches of 128, the last one short (drop_last False)
  augment   RandomCrop(28, padding=2) (zero fill) + RandomHorizontalFlip on [0, 1]
            images, then Normalize(0.2860, 0.3530): per sample, on the device
  optimizer SGD(lr 0.1, momentum 0.9, weight_decay 5e-4) on every parameter
  schedule  per step: linear warm-up from 0 over one epoch (lr = base (t+1)/W), then
            cosine to 0 (model/schedule.h's formula, what the runner uses)
  precision torch.autocast(bf16) for training and evaluation (fp32 with --precision fp32)
  eval      the test split at the end, batch 128, BN in eval mode
Each seed (torch.manual_seed: init, order, augmentation) prints one JSON line:
  {"who": "torch", "seed", "test_top1", "test_loss", "train_loss_last_epoch", "epochs",
   "train_images", "test_images", "seconds", "device", "precision", "torch_version"}

Usage: fashion_mnist_torch.py --root DIR [--epochs 12] [--seeds 0 1 2] [--device cuda]
                              [--precision bf16|fp32] [--batch 128] [--threads N]
"""
import argparse
import gzip
import json
import math
import struct
import sys
import time

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return raw[4 + 4 * dims:], shape


def load(root, split, torch):
    img, ishape = read_idx(f"{root}/{split}-images-idx3-ubyte.gz")
    lab, lshape = read_idx(f"{root}/{split}-labels-idx1-ubyte.gz")
    n = min(ishape[0], lshape[0])
    x = torch.frombuffer(bytearray(img[:n * 28 * 28]), dtype=torch.uint8).view(n, 1, 28, 28)
    y = torch.frombuffer(bytearray(lab[:n]), dtype=torch.uint8).long()
    return x, y


def lr_at(t, base, warm, total):
    """model/schedule.h: linear warm-up per step, then cosine to 0."""
    if t < warm:
        return base * (t + 1) / warm
    p = 1.0 if total <= warm else min(max((t - warm) / (total - warm), 0.0), 1.0)
    return base * (1 + math.cos(math.pi * p)) / 2


def augment(xb, g, torch):
    """RandomCrop(28, padding=2) with zero fill + RandomHorizontalFlip, per sample, then
    Normalize: xb uint8 (B, 1, 28, 28) on the device."""
    b = xb.shape[0]
    x = torch.nn.functional.pad(xb.float() / 255.0, (2, 2, 2, 2))
    dy = torch.randint(0, 5, (b,), generator=g, device="cpu").to(x.device)
    dx = torch.randint(0, 5, (b,), generator=g, device="cpu").to(x.device)
    flip = torch.rand(b, generator=g, device="cpu").to(x.device) < 0.5
    ar = torch.arange(28, device=x.device)
    rows = (dy[:, None] + ar[None, :])                      # (b, 28)
    cols = (dx[:, None] + ar[None, :])
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    x = x[torch.arange(b, device=x.device)[:, None, None], 0, rows[:, :, None], cols[:, None, :]]
    return ((x - MEAN) / STD).unsqueeze(1)


def build(torch, torchvision):
    nn = torch.nn
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    m.maxpool = nn.Identity()
    return m


def run_seed(a, seed, data, torch, torchvision):
    dev = torch.device(a.device)
    xtr, ytr, xte, yte = data
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = build(torch, torchvision).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    lossf = torch.nn.CrossEntropyLoss()
    amp = a.precision == "bf16"
    n = xtr.shape[0]
    spe = (n + a.batch - 1) // a.batch
    warm, total = spe * 1, spe * a.epochs
    t0 = time.perf_counter()
    step = 0
    last_loss = float("nan")
    for _ in range(a.epochs):
        model.train()
        perm = torch.randperm(n, generator=g)
        loss_sum, seen = 0.0, 0
        for i in range(spe):
            idx = perm[i * a.batch:(i + 1) * a.batch]
            x = augment(xtr[idx].to(dev, non_blocking=True), g, torch).to(memory_format=torch.channels_last)
            y = ytr[idx].to(dev, non_blocking=True)
            for group in opt.param_groups:
                group["lr"] = lr_at(step, a.lr, warm, total)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            loss_sum += loss.detach() * x.shape[0]
            seen += x.shape[0]
        last_loss = float(loss_sum) / seen
    model.eval()
    correct, tl = 0, 0.0
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
        for i in range(0, xte.shape[0], a.batch):
            x = ((xte[i:i + a.batch].to(dev).float() / 255.0 - MEAN) / STD).to(memory_format=torch.channels_last)
            y = yte[i:i + a.batch].to(dev)
            out = model(x).float()
            tl += float(torch.nn.functional.cross_entropy(out, y, reduction="sum"))
            correct += int((out.argmax(1) == y).sum())
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return {"who": "torch", "seed": seed, "test_top1": correct / xte.shape[0], "test_loss": tl / xte.shape[0],
            "train_loss_last_epoch": last_loss, "epochs": a.epochs, "train_images": n,
            "test_images": int(xte.shape[0]), "seconds": round(time.perf_counter() - t0, 2),
            "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu", "precision": a.precision,
            "torch_version": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    import torch
    import torchvision
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "cuda":
        torch.backends.cudnn.benchmark = True
    xtr, ytr = load(a.root, "train", torch)
    xte, yte = load(a.root, "t10k", torch)
    dev = torch.device(a.device)
    data = (xtr.to(dev), ytr.to(dev), xte, yte)   # training set on the device, as the runner's
    for s in a.seeds:
        print(json.dumps(run_seed(a, s, data, torch, torchvision)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
