#!/usr/bin/python3
"""Builds the PyTorch model that matches a `runner export` safetensors file and loads it.

    import sys; sys.path.insert(0, "scripts")      # the runner's scripts/ folder
    from torchvision_model import load
    model = load("runs/x/<run>/model.safetensors")   # eval mode, weights loaded strictly

The file's __metadata__ says what to build (written by runner/export.c): arch, stem
("cifar": 3x3 stride-1 conv1 and no max-pool; "imagenet": torchvision's 7x7/2 conv1 and
3x3/2 max-pool), in_channels, num_classes, and for the input pipeline input_size, mean,
std (per channel, applied to x / 255) and class_names.

What it builds, by arch (the names and shapes the runner's builders, model/arch/*.c, emit):
  resnet18..152, wide_resnet50_2/101_2, resnext50_32x4d, resnext101_32x8d/64x4d,
  vgg11_bn..vgg19_bn, mobilenet_v2 with stem "imagenet": torchvision's models themselves
  (with the first conv replaced for another channel count; the ResNet class with the
  metadata's width_per_group / groups where they are not the name's);
  the same ResNets with stem "cifar": conv1 3x3 stride 1 and no max-pool;
  resnet20/32/44/56/110: He et al.'s CIFAR ResNets (CifarResNet), which torchvision does not
  ship; and the reference definitions of the CIFAR architectures of issue 24, written out
  below in PyTorch with their authors' tensor names (the runner's golden tests, parameter
  and FLOP counts are checked against these):
    wrn16_8, wrn28_10    WideResNet: xternalz/WideResNet-pytorch (pre-activation blocks,
                         dropout between the convs, 1x1 shortcut of the pre-activated input)
    preact_resnet18      PreActResNet18: kuangliu/pytorch-cifar's PreActBlock, with the
                         final BN-ReLU of He et al. (2016) as locuslab/robust_overfitting
    resnext29_8x64d      CifarResNeXt: prlz77/ResNeXt.pytorch (cardinality, base width,
                         widen factor 4)
    vgg*_bn, stem cifar  chenyaofo/pytorch-cifar-models' cifar10_vgg*_bn: torchvision's
                         features, a global average pool (identity at 32 px) and a
                         512-512-classes classifier
    mobilenet_v2, cifar  chenyaofo/pytorch-cifar-models' cifar10_mobilenetv2: torchvision's
                         MobileNetV2 with stride 1 in features.0 and the second stage
The metadata's width, groups and dropout (runner export writes them where the architecture
has them) override the architecture's own.
build(meta) dispatches on the arch; a new family is one builder and one branch there.

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
# torchvision's ResNet class: blocks per stage, bottleneck, width_per_group, groups
RESNETS = {"resnet18": ([2, 2, 2, 2], False, 64, 1), "resnet34": ([3, 4, 6, 3], False, 64, 1),
           "resnet50": ([3, 4, 6, 3], True, 64, 1), "resnet101": ([3, 4, 23, 3], True, 64, 1),
           "resnet152": ([3, 8, 36, 3], True, 64, 1),
           "wide_resnet50_2": ([3, 4, 6, 3], True, 128, 1), "wide_resnet101_2": ([3, 4, 23, 3], True, 128, 1),
           "resnext50_32x4d": ([3, 4, 6, 3], True, 4, 32), "resnext101_32x8d": ([3, 4, 23, 3], True, 8, 32),
           "resnext101_64x4d": ([3, 4, 23, 3], True, 4, 64)}
VGGS = {"vgg11_bn": "A", "vgg13_bn": "B", "vgg16_bn": "D", "vgg19_bn": "E"}
WRNS = {"wrn16_8": (16, 8), "wrn28_10": (28, 10)}


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


def load_file(path, device="cpu"):
    """The tensors of a safetensors file ({name: tensor}), like safetensors.torch.load_file,
    read with the standard library."""
    return {k: v.to(device) for k, v in read_safetensors(path)[0].items()}


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


class WideBasic(nn.Module):
    """xternalz/WideResNet-pytorch's BasicBlock: pre-activation, dropout between the convs,
    a 1x1 convShortcut of the pre-activated input when the channel count changes."""

    def __init__(self, cin, cout, stride, drop):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.drop = drop
        self.equal = cin == cout
        self.convShortcut = None if self.equal else nn.Conv2d(cin, cout, 1, stride, 0, bias=False)

    def forward(self, x):
        a = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(a)))
        if self.drop > 0:
            out = nn.functional.dropout(out, p=self.drop, training=self.training)
        out = self.conv2(out)
        return (x if self.equal else self.convShortcut(a)) + out


class WideBlock(nn.Module):
    """xternalz's NetworkBlock: n WideBasic blocks under .layer."""

    def __init__(self, n, cin, cout, stride, drop):
        super().__init__()
        self.layer = nn.Sequential(*[WideBasic(cin if i == 0 else cout, cout, stride if i == 0 else 1, drop)
                                     for i in range(n)])

    def forward(self, x):
        return self.layer(x)


class WideResNet(nn.Module):
    """WRN-depth-k for CIFAR (Zagoruyko & Komodakis), xternalz/WideResNet-pytorch."""

    def __init__(self, depth, k, classes, drop=0.0, cin=3):
        super().__init__()
        n = (depth - 4) // 6
        ch = [16, 16 * k, 32 * k, 64 * k]
        self.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False)
        self.block1 = WideBlock(n, ch[0], ch[1], 1, drop)
        self.block2 = WideBlock(n, ch[1], ch[2], 2, drop)
        self.block3 = WideBlock(n, ch[2], ch[3], 2, drop)
        self.bn1 = nn.BatchNorm2d(ch[3])
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(ch[3], classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0, (2.0 / (m.kernel_size[0] * m.kernel_size[1] * m.out_channels)) ** 0.5)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.relu(self.bn1(self.block3(self.block2(self.block1(self.conv1(x))))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class PreActBlock(nn.Module):
    """kuangliu/pytorch-cifar's PreActBlock."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False))

    def forward(self, x):
        a = self.relu1(self.bn1(x))
        s = self.shortcut(a) if hasattr(self, "shortcut") else x
        return self.conv2(self.relu2(self.bn2(self.conv1(a)))) + s


class PreActResNet18(nn.Module):
    """Pre-activation ResNet-18 (He et al. 2016b): kuangliu's, with the final BN-ReLU."""

    def __init__(self, classes, cin=3):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, 64, 3, 1, 1, bias=False)
        c = 64
        for i, w in enumerate([64, 128, 256, 512]):
            s = 1 if i == 0 else 2
            setattr(self, "layer%d" % (i + 1), nn.Sequential(PreActBlock(c, w, s), PreActBlock(w, w, 1)))
            c = w
        self.bn = nn.BatchNorm2d(512)
        self.relu = nn.ReLU()
        self.linear = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.conv1(x)))))
        x = self.relu(self.bn(x))
        return self.linear(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class ResNeXtBottleneck(nn.Module):
    """prlz77/ResNeXt.pytorch's ResNeXtBottleneck."""

    def __init__(self, cin, cout, stride, groups, base_width, widen=4):
        super().__init__()
        d = groups * int(base_width * (cout / (widen * 64.0)))
        self.conv_reduce = nn.Conv2d(cin, d, 1, 1, 0, bias=False)
        self.bn_reduce = nn.BatchNorm2d(d)
        self.relu_reduce = nn.ReLU(inplace=True)
        self.conv_conv = nn.Conv2d(d, d, 3, stride, 1, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(d)
        self.relu_conv = nn.ReLU(inplace=True)
        self.conv_expand = nn.Conv2d(d, cout, 1, 1, 0, bias=False)
        self.bn_expand = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Sequential()
        if cin != cout:
            self.shortcut.add_module("shortcut_conv", nn.Conv2d(cin, cout, 1, stride, 0, bias=False))
            self.shortcut.add_module("shortcut_bn", nn.BatchNorm2d(cout))

    def forward(self, x):
        b = self.relu_reduce(self.bn_reduce(self.conv_reduce(x)))
        b = self.relu_conv(self.bn(self.conv_conv(b)))
        b = self.bn_expand(self.conv_expand(b))
        return self.relu(self.shortcut(x) + b)


class CifarResNeXt(nn.Module):
    """ResNeXt-29 (Xie et al. 2017) for CIFAR, prlz77/ResNeXt.pytorch (widen factor 4)."""

    def __init__(self, groups, depth, classes, base_width, widen=4, cin=3):
        super().__init__()
        n = (depth - 2) // 9
        stages = [64, 64 * widen, 128 * widen, 256 * widen]
        self.conv_1_3x3 = nn.Conv2d(cin, 64, 3, 1, 1, bias=False)
        self.bn_1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        for i in range(3):
            blocks = nn.Sequential()
            for b in range(n):
                blocks.add_module("stage_%d_bottleneck_%d" % (i + 1, b), ResNeXtBottleneck(
                    stages[i] if b == 0 else stages[i + 1], stages[i + 1], (1 if i == 0 else 2) if b == 0 else 1,
                    groups, base_width, widen))
            setattr(self, "stage_%d" % (i + 1), blocks)
        self.classifier = nn.Linear(stages[3], classes)
        nn.init.kaiming_normal_(self.classifier.weight)
        for key, t in self.state_dict().items():
            if key.split(".")[-1] == "weight":
                if "conv" in key:
                    nn.init.kaiming_normal_(t, mode="fan_out")
                if "bn" in key:
                    t[...] = 1
            elif key.split(".")[-1] == "bias":
                t[...] = 0

    def forward(self, x):
        x = self.relu(self.bn_1(self.conv_1_3x3(x)))
        x = self.stage_3(self.stage_2(self.stage_1(x)))
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def vgg(arch, classes, stem, dropout, cin):
    """torchvision's vgg*_bn; the CIFAR variant (chenyaofo/pytorch-cifar-models) keeps its
    features and puts a global average pool (identity on the 1x1 map of 32 px inputs) and a
    512-wide classifier after them."""
    m = getattr(torchvision.models, arch)(num_classes=classes, dropout=dropout)
    if cin != 3:
        m.features[0] = nn.Conv2d(cin, 64, kernel_size=3, padding=1)
        nn.init.kaiming_normal_(m.features[0].weight, mode="fan_out", nonlinearity="relu")
        nn.init.zeros_(m.features[0].bias)
    if stem == "cifar":
        m.avgpool = nn.AdaptiveAvgPool2d(1)
        m.classifier = nn.Sequential(nn.Linear(512, 512), nn.ReLU(True), nn.Dropout(dropout), nn.Linear(512, 512),
                                     nn.ReLU(True), nn.Dropout(dropout), nn.Linear(512, classes))
        for lin in (m.classifier[0], m.classifier[3], m.classifier[6]):
            nn.init.normal_(lin.weight, 0, 0.01)
            nn.init.zeros_(lin.bias)
    return m


def mobilenet_v2(classes, stem, width, dropout, cin):
    """torchvision's mobilenet_v2; the CIFAR variant (chenyaofo/pytorch-cifar-models) has
    stride 1 in features.0 and in the second stage."""
    setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
               [6, 320, 1, 1]]
    if stem == "cifar":
        setting[1][3] = 1
    m = torchvision.models.mobilenet_v2(num_classes=classes, width_mult=width, dropout=dropout,
                                        inverted_residual_setting=setting)
    conv = m.features[0][0]
    if cin != 3 or stem == "cifar":
        m.features[0][0] = nn.Conv2d(cin, conv.out_channels, 3, 1 if stem == "cifar" else 2, 1, bias=False)
        nn.init.kaiming_normal_(m.features[0][0].weight, mode="fan_out")
    return m


def resnet(arch, classes, stem, width, groups, cin):
    """torchvision's ResNet class for arch with width_per_group / groups, and the stem."""
    blocks, bottleneck, w0, g0 = RESNETS[arch]
    if (width, groups) == (w0, g0):
        m = getattr(torchvision.models, arch)(num_classes=classes)
    else:
        block = torchvision.models.resnet.Bottleneck if bottleneck else torchvision.models.resnet.BasicBlock
        m = torchvision.models.resnet.ResNet(block, blocks, num_classes=classes, groups=groups,
                                             width_per_group=width)
    if stem == "cifar":
        m.conv1 = nn.Conv2d(cin, 64, kernel_size=3, stride=1, padding=1, bias=False)
        m.maxpool = nn.Identity()
    elif cin != 3:
        m.conv1 = nn.Conv2d(cin, 64, kernel_size=7, stride=2, padding=3, bias=False)
    if stem == "cifar" or cin != 3:
        nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    return m


# arch -> (width, groups, dropout) defaults where the architecture has them (model/arch/arch_table.h)
DEFAULTS = {**{a: (w, g, None) for a, (_, b, w, g) in RESNETS.items() if w != 64 or g != 1},
            **{a: (k, None, 0.0) for a, (_, k) in WRNS.items()},
            "resnext29_8x64d": (64, 8, None), **{a: (None, None, 0.5) for a in VGGS},
            "mobilenet_v2": (1.0, None, 0.2)}


def options(meta):
    """(arch, classes, in_channels, stem, width, groups, dropout) of the metadata, with the
    architecture's defaults for keys it does not give."""
    arch = meta["arch"]
    w0, g0, d0 = DEFAULTS.get(arch, (None, None, None))
    width = float(meta["width"]) if meta.get("width") not in (None, "") else w0
    groups = int(meta["groups"]) if meta.get("groups") not in (None, "") else g0
    drop = float(meta["dropout"]) if meta.get("dropout") not in (None, "") else d0
    return (arch, int(meta["num_classes"]), int(meta.get("in_channels", 3)), meta.get("stem", "cifar"),
            width, groups, drop)


def build_arch(arch, classes, cin=3, stem="cifar", width=0, groups=0, dropout=-1):
    """build() from the runner's options (width, groups 0 and dropout -1: the arch's own)."""
    meta = {"arch": arch, "num_classes": str(classes), "in_channels": str(cin), "stem": stem}
    if width:
        meta["width"] = str(width)
    if groups:
        meta["groups"] = str(groups)
    if dropout >= 0:
        meta["dropout"] = str(dropout)
    return build(meta)


def build(meta):
    """An untrained model matching the metadata of a runner export."""
    arch, classes, cin, stem, width, groups, drop = options(meta)
    if arch in RESNETS:
        return resnet(arch, classes, stem, int(width or RESNETS[arch][2]), int(groups or RESNETS[arch][3]), cin)
    if arch in WRNS:
        return WideResNet(WRNS[arch][0], int(width), classes, drop, cin)
    if arch == "preact_resnet18":
        return PreActResNet18(classes, cin)
    if arch == "resnext29_8x64d":
        return CifarResNeXt(groups, 29, classes, int(width), cin=cin)
    if arch in VGGS:
        return vgg(arch, classes, stem, drop, cin)
    if arch == "mobilenet_v2":
        return mobilenet_v2(classes, stem, width, drop, cin)
    if arch.startswith("resnet") and arch[len("resnet"):].isdigit():
        return CifarResNet(int(arch[len("resnet"):]), classes, cin)
    raise ValueError("architecture %r is not one this script builds; update the runner's scripts/" % arch)


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
