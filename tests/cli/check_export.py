#!/usr/bin/python3
"""Loads a safetensors file written by `runner export` into the torchvision-style model
with load_state_dict(strict=True) and runs a forward pass. The model is the one the file's
metadata stem says: imagenet, torchvision.models.resnetNN(num_classes) itself (conv1 with
IN_CHANNELS inputs); cifar (or none), its variant with a 3x3 conv1 and no max-pool.

usage: check_export.py FILE ARCH NUM_CLASSES IN_CHANNELS STEPS
Prints "loaded ARCH (STEM stem): N tensors, M parameters, logits finite, num_batches_tracked=STEPS".
Exit 0 on success. Reads safetensors with the standard library (Debian's PyTorch 1.13
has no safetensors module)."""
import json
import struct
import sys

import torch
import torch.nn as nn
import torchvision

DTYPES = {"F32": torch.float32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16}


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(body[b:e]), dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]) if info["shape"] else t.reshape(())
    return out, header.get("__metadata__", {})


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x if self.downsample is None else self.downsample(x)
        return torch.relu(y + s)


class CifarResNet(nn.Module):
    """He et al. CIFAR ResNet (resnet20/32/44/56/110) with torchvision-style names."""

    def __init__(self, depth, classes, cin):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, c = [], 16
        for i, (w, s) in enumerate([(16, 1), (32, 2), (64, 2)]):
            blocks = [BasicBlock(c, w, s)] + [BasicBlock(w, w, 1) for _ in range(n - 1)]
            setattr(self, "layer%d" % (i + 1), nn.Sequential(*blocks))
            c = w
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def build(arch, classes, cin, stem="cifar"):
    if arch in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152"):
        m = getattr(torchvision.models, arch)(num_classes=classes)
        if stem == "imagenet":  # torchvision's model as it is (conv1 7x7/2 + maxpool)
            if cin != 3:
                m.conv1 = nn.Conv2d(cin, 64, 7, 2, 3, bias=False)
            return m
        m.conv1 = nn.Conv2d(cin, 64, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
        return m
    return CifarResNet(int(arch[len("resnet"):]), classes, cin)


def main():
    path, arch, classes, cin, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    sd, meta = load_safetensors(path)
    stem = meta.get("stem", "cifar")
    m = build(arch, classes, cin, stem)
    m.load_state_dict(sd, strict=True)
    m.eval()
    with torch.no_grad():
        y = m(torch.randn(2, cin, 64 if stem == "imagenet" else 32, 64 if stem == "imagenet" else 32))
    assert torch.isfinite(y).all(), "non-finite logits"
    nbt = {int(v) for k, v in sd.items() if k.endswith("num_batches_tracked")}
    assert nbt == {steps}, "num_batches_tracked %s, expected %d" % (nbt, steps)
    assert meta.get("arch") == arch, meta
    print("loaded %s (%s stem): %d tensors, %d parameters, logits finite, num_batches_tracked=%d"
          % (arch, stem, len(sd), sum(p.numel() for p in m.parameters()), steps))


if __name__ == "__main__":
    main()
