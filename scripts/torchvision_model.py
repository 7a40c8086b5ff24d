#!/usr/bin/python3
"""Builds the PyTorch model that matches a `runner export` safetensors file and loads it.

    import sys; sys.path.insert(0, "scripts")      # the runner's scripts/ folder
    from torchvision_model import load
    model = load("runs/x/<run>/model.safetensors")   # eval mode, weights loaded strictly

The file's __metadata__ says what to build (written by runner/export.c): arch, stem
("cifar": 3x3 stride-1 conv1 and no max-pool; "imagenet": torchvision's 7x7/2 conv1 and
3x3/2 max-pool), in_channels, num_classes, and for the input pipeline input_size, mean,
std (per channel, applied to x / 255) and class_names.

FAMILIES maps every architecture `runner export` writes to the function that builds it:
resnet18/34/50/101/152 are torchvision's models with conv1 (and the max-pool) replaced to
match the stem and channel count; resnet20/32/44/56/110 are He et al.'s CIFAR ResNets,
which torchvision does not ship (CifarResNet below, with the same tensor names). A new
family is one entry there.

load_file(path) reads a safetensors file with the standard library, as
safetensors.torch.load_file does (the package is not in Debian 12): the format is an
8-byte little-endian header length, a JSON header ({name: {dtype, shape, data_offsets}},
"__metadata__"), then the tensors' bytes. read() uses the package when it is installed.
`python3 scripts/torchvision_model.py FILE` loads a file and prints what it built.
"""
import json
import struct

import torch
import torch.nn as nn
import torchvision

DTYPES = {"F32": torch.float32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16}
TORCHVISION_ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")


def read_safetensors(path):
    """(state_dict, metadata) of a safetensors file, with the standard library only."""
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


def load_file(path, device="cpu"):
    """The tensors of a safetensors file ({name: tensor}), like safetensors.torch.load_file,
    read with the standard library."""
    return {k: v.to(device) for k, v in read_safetensors(path)[0].items()}


def read(path):
    """(state_dict, metadata), through the safetensors package when it is installed."""
    try:
        from safetensors import safe_open
        from safetensors.torch import load_file
    except ImportError:
        return read_safetensors(path)
    with safe_open(path, "pt") as f:
        meta = f.metadata() or {}
    return load_file(path), meta


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
        c = 16
        for i, (w, s) in enumerate([(16, 1), (32, 2), (64, 2)]):
            blocks = [BasicBlock(c, w, s)] + [BasicBlock(w, w, 1) for _ in range(n - 1)]
            setattr(self, "layer%d" % (i + 1), nn.Sequential(*blocks))
            c = w
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def torchvision_resnet(arch, classes, cin, stem):
    m = getattr(torchvision.models, arch)(num_classes=classes)
    if stem == "cifar":
        m.conv1 = nn.Conv2d(cin, 64, kernel_size=3, stride=1, padding=1, bias=False)
        m.maxpool = nn.Identity()
    elif cin != 3:
        m.conv1 = nn.Conv2d(cin, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return m


def cifar_resnet(arch, classes, cin, stem):
    return CifarResNet(int(arch[len("resnet"):]), classes, cin)


# (architectures, builder(arch, num_classes, in_channels, stem) -> untrained model with the
# tensor names and shapes of runner/export.c), one entry per family
FAMILIES = [
    (TORCHVISION_ARCHS, torchvision_resnet),
    (("resnet20", "resnet32", "resnet44", "resnet56", "resnet110"), cifar_resnet),
]


def build(meta):
    """An untrained model matching the metadata of a runner export."""
    arch, classes = meta["arch"], int(meta["num_classes"])
    cin, stem = int(meta.get("in_channels", 3)), meta.get("stem", "cifar")
    for archs, builder in FAMILIES:
        if arch in archs:
            return builder(arch, classes, cin, stem)
    raise ValueError("architecture %r is not one this script builds (%s); update the runner's scripts/"
                     % (arch, ", ".join(a for archs, _ in FAMILIES for a in archs)))


def load(path):
    """The model of a runner export with its weights (strict), in eval mode; its metadata
    is in model.runner_metadata."""
    sd, meta = read(path)
    m = build(meta)
    m.load_state_dict(sd, strict=True)
    m.eval()
    m.runner_metadata = meta
    return m


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__.strip().split("\n\n")[0] + "\n\nusage: torchvision_model.py FILE.safetensors")
        sys.exit(0 if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help") else 2)
    model = load(sys.argv[1])
    md = model.runner_metadata
    print("%s: %s, %s stem, %s input channels, %s classes, %d parameters; loaded strictly"
          % (sys.argv[1], md["arch"], md.get("stem", "cifar"), md.get("in_channels", "3"), md["num_classes"],
             sum(p.numel() for p in model.parameters())))
