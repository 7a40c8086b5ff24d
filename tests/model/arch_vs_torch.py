#!/usr/bin/python3
"""arch_vs_torch.py: every architecture the runner builds against PyTorch's definition of
it (torchvision 0.14's models, and the reference definitions of the CIFAR architectures in
scripts/torchvision_model.py): the same tensor names and shapes (the state_dict, buffers and
num_batches_tracked included), the same parameter count, and the same forward FLOPs per
sample under one rule, 2 x the multiply-adds of every convolution and linear layer
(a conv: 2 x output elements x in_channels / groups x kh x kw; biases and elementwise ops
not counted), counted on the PyTorch side by forward hooks on a real forward pass.

Then `runner plan --json` for one member of each family (with model.width / groups /
dropout set where the family has them) must report the same param_count and
forward_gflops_per_sample.

usage: arch_vs_torch.py ARCH_DUMP RUNNER
Exit 0 when everything holds, 1 with the first difference, 77 (skipped) without PyTorch.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("no PyTorch at %s: skipped" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from torchvision_model import build_arch  # noqa: E402

# (arch, stem, in_channels, classes, input side, width, groups, dropout); width/groups 0 and
# dropout -1: the architecture's own
CASES = [(a, "cifar", 3, 10, 32, 0, 0, -1) for a in (
    "resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "resnet18", "resnet34", "resnet50",
    "wide_resnet50_2", "resnext50_32x4d", "wrn16_8", "wrn28_10", "preact_resnet18", "resnext29_8x64d", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn",
    "mobilenet_v2")] + [
    # torchvision's own models (ImageNet variant) at 224 px, and where the pools make a
    # difference at other sizes (VGG's adaptive 7x7 pool upsamples a 3x3 map at 96 px)
    ("resnet50", "imagenet", 3, 1000, 224, 0, 0, -1),
    ("wide_resnet50_2", "imagenet", 3, 1000, 224, 0, 0, -1),
    ("resnext50_32x4d", "imagenet", 3, 1000, 224, 0, 0, -1),
    ("resnext101_64x4d", "imagenet", 3, 1000, 96, 0, 0, -1),   # the 101-layer rows: the same code
    ("wide_resnet101_2", "imagenet", 3, 10, 64, 0, 0, -1),
    ("resnext101_32x8d", "cifar", 3, 10, 32, 0, 0, -1),
    ("resnet152", "imagenet", 3, 10, 64, 0, 0, -1),
    ("vgg11_bn", "imagenet", 3, 1000, 224, 0, 0, -1),
    ("vgg16_bn", "imagenet", 3, 10, 96, 0, 0, -1),
    ("vgg19_bn", "imagenet", 1, 7, 64, 0, 0, -1),
    ("mobilenet_v2", "imagenet", 3, 1000, 224, 0, 0, -1),
    # the keys: widths, groups, dropout, other channel and class counts
    ("mobilenet_v2", "imagenet", 3, 1000, 224, 1.4, 0, 0.5),
    ("mobilenet_v2", "imagenet", 3, 100, 160, 0.35, 0, -1),
    ("mobilenet_v2", "cifar", 1, 10, 28, 0.25, 0, 0.0),
    ("mobilenet_v2", "cifar", 3, 100, 32, 0.75, 0, -1),
    ("wrn16_8", "cifar", 3, 100, 32, 2, 0, 0.3),
    ("wrn28_10", "cifar", 1, 10, 28, 1, 0, 0.3),
    ("resnext29_8x64d", "cifar", 3, 10, 32, 4, 2, -1),
    ("resnext29_8x64d", "cifar", 3, 100, 32, 32, 16, -1),
    ("resnext50_32x4d", "cifar", 3, 10, 32, 8, 16, -1),
    ("wide_resnet50_2", "imagenet", 3, 10, 96, 64, 0, -1),   # = resnet50
    ("vgg11_bn", "cifar", 1, 10, 64, 0, 0, 0.2),
    ("preact_resnet18", "cifar", 1, 100, 28, 0, 0, -1),
]

# one member per family through `runner plan` (arch, model keys as YAML, stem, side)
PLANS = [("wrn16_8", "width: 2, dropout: 0.3", 32), ("preact_resnet18", "", 32),
         ("resnext29_8x64d", "width: 4, groups: 2", 32), ("vgg11_bn", "dropout: 0.1", 32),
         ("vgg16_bn", "", 96), ("mobilenet_v2", "width: 0.5", 32), ("mobilenet_v2", "", 96),
         ("resnext50_32x4d", "", 96), ("wide_resnet50_2", "width: 64", 32)]


def torch_flops(model, cin, side):
    """2 x multiply-adds of the convolutions and linears of one forward of a 1-sample batch."""
    total = [0]

    def conv(mod, inp, out):
        total[0] += 2 * out.numel() * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]

    def linear(mod, inp, out):
        total[0] += 2 * out.numel() * mod.in_features

    hooks = [m.register_forward_hook(conv if isinstance(m, nn.Conv2d) else linear)
             for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, cin, side, side))
    for h in hooks:
        h.remove()
    return total[0]


def runner_dump(dump, arch, stem, cin, classes, side, width, groups, dropout):
    out = subprocess.run([dump, arch, stem, str(cin), str(classes), str(side), str(width), str(groups),
                          str(dropout)], capture_output=True, text=True)
    if out.returncode:
        raise AssertionError("arch_dump %s: %s" % (arch, out.stderr.strip()))
    r = {"tensors": {}}
    for line in out.stdout.splitlines():
        k, v = line.split(" ", 1)
        if k == "tensor":
            name, shape = (v.split(" ", 1) + [""])[:2]
            r["tensors"][name] = [int(d) for d in shape.split(",") if d]
        else:
            r[k] = float(v)
    return r


def check_case(dump, case):
    arch, stem, cin, classes, side, width, groups, dropout = case
    torch.manual_seed(0)
    m = build_arch(arch, classes, cin, stem, width, groups, dropout)
    ref = {k: list(v.shape) for k, v in m.state_dict().items()}
    ours = runner_dump(dump, *case)
    label = "%s (%s, in %d, classes %d, %d px, width %g, groups %d, dropout %g)" % case
    missing = sorted(set(ref) - set(ours["tensors"]))
    extra = sorted(set(ours["tensors"]) - set(ref))
    assert not missing and not extra, "%s: tensors only in PyTorch %s, only in the runner %s" % (
        label, missing[:4], extra[:4])
    for k, shape in ref.items():
        assert ours["tensors"][k] == shape, "%s: %s has shape %s, PyTorch's %s" % (label, k, ours["tensors"][k], shape)
    params = sum(p.numel() for p in m.parameters())
    buffers = sum(b.numel() for n, b in m.named_buffers() if "num_batches_tracked" not in n)
    flops = torch_flops(m, cin, side)
    assert ours["params"] == params, "%s: %d parameters, PyTorch %d" % (label, ours["params"], params)
    assert ours["buffers"] == buffers, "%s: %d buffer values, PyTorch %d" % (label, ours["buffers"], buffers)
    assert ours["flops"] == flops, "%s: %.0f FLOPs, PyTorch %d" % (label, ours["flops"], flops)
    print("%-90s %d tensors, %d params, %.4f GFLOPs: equal" % (label, len(ref), params, flops / 1e9), flush=True)
    return params, flops


def check_plan(runner, tmp, arch, keys, side):
    path = os.path.join(tmp, "%s_%d.yaml" % (arch, side))
    with open(path, "w") as f:
        f.write("name: p\ndevice: cpu\ndata: {dataset: synthetic, synthetic: {train_size: 64, val_size: 16, "
                "image: [3, %d, %d], classes: 10}}\nmodel: {arch: %s%s}\ntrain: {epochs: 1, batch_size: 8}\n"
                "output: {root: %s}\n" % (side, side, arch, (", " + keys) if keys else "", tmp))
    out = subprocess.run([runner, "plan", path, "--json"], capture_output=True, text=True)
    assert out.returncode == 0, "runner plan %s: exit %d: %s" % (path, out.returncode, out.stderr + out.stdout)
    p = json.loads(out.stdout[out.stdout.index("{"):])
    kv = dict(kv.split(": ") for kv in keys.split(", ")) if keys else {}
    stem = "imagenet" if side > 64 else "cifar"
    case = (arch, stem, 3, 10, side, float(kv.get("width", 0)), int(kv.get("groups", 0)), float(kv.get("dropout", -1)))
    m = build_arch(arch, 10, 3, stem, case[5], case[6], case[7])
    params, flops = sum(q.numel() for q in m.parameters()), torch_flops(m, 3, side)
    assert p["stem"] == stem, "%s: plan stem %s, expected %s" % (path, p["stem"], stem)
    assert p["param_count"] == params, "%s: plan param_count %d, PyTorch %d" % (path, p["param_count"], params)
    assert abs(p["forward_gflops_per_sample"] * 1e9 - flops) <= 1e-9 * flops, \
        "%s: plan %.9g GFLOPs, PyTorch %.9g" % (path, p["forward_gflops_per_sample"], flops / 1e9)
    print("runner plan %s %s at %d px (%s): %d params, %.4f GFLOPs: equal" % (arch, keys or "defaults", side, stem,
                                                                               params, flops / 1e9), flush=True)


def main():
    dump, runner = sys.argv[1], sys.argv[2]
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    for case in CASES:
        check_case(dump, case)
    with tempfile.TemporaryDirectory() as tmp:
        for arch, keys, side in PLANS:
            check_plan(runner, tmp, arch, keys, side)
    print("%d architectures/options and %d plans agree with PyTorch" % (len(CASES), len(PLANS)))


if __name__ == "__main__":
    main()
