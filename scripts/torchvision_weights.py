#!/usr/bin/python3
"""torchvision_weights.py: a torchvision state dict (.pth) -> the safetensors file that the
runner's `model.init_from` loads (ResNets, wide_resnet / resnext, vgg*_bn, mobilenet_v2).

usage: scripts/torchvision_weights.py IN.pth OUT.safetensors [--arch resnet50]

IN.pth is what torch.save wrote: a state dict (torch.save(model.state_dict()), the files
torchvision downloads into ~/.cache/torch/hub/checkpoints, e.g. resnet50-0676ba61.pth), a
checkpoint dict holding one under "model" or "state_dict" (torchvision's reference
scripts, Lightning), or a whole pickled model. "module." (DistributedDataParallel) and
"_orig_mod." (torch.compile) prefixes are removed. Runs with Debian's python3-torch and
nothing else: no network, no torchvision, no safetensors package.

What it checks, before writing anything: the tensors are exactly those of one of
torchvision.models.resnet18/34/50/101/152, wide_resnet50_2/101_2, resnext50_32x4d,
resnext101_32x8d/64x4d (with the ImageNet 7x7 stem, or a CIFAR 3x3 stem as `runner export`
writes), vgg11_bn/13_bn/16_bn/19_bn (torchvision's 4096-wide classifier, or the runner's
512-wide CIFAR one) or mobilenet_v2 (any width_mult), shape for shape; the architecture
(and width / groups) is inferred from the tensors (--arch, if given, must agree). Old checkpoints without num_batches_tracked get 0 for it,
as torch's BatchNorm does when it loads them. Floating tensors are written as F32 (fp16 or
bf16 checkpoints are widened), counters as I64. The metadata records format "pt", arch,
stem, num_classes, in_channels, the source file name, and width / groups where the
architecture has them (model.width / model.groups). mobilenet_v2's variants have the same
tensors: the file says "imagenet" (torchvision's strides); --stem cifar records the other.

Any problem: one message on stderr naming the file and the fix, exit 2. Then, in the
experiment file:
    model: {arch: resnet50, init_from: OUT.safetensors, init_head: reinit}
(init_head: reinit when your class count differs from the file's, e.g. 1000 ImageNet
classes; model.stem follows the file: auto picks imagenet for inputs over 64 px).
"""
import argparse
import json
import os
import re
import struct
import sys

ARCHS = {  # torchvision's ResNet class: blocks per stage, bottleneck, width_per_group, groups
    "resnet18": ([2, 2, 2, 2], False, 64, 1),
    "resnet34": ([3, 4, 6, 3], False, 64, 1),
    "resnet50": ([3, 4, 6, 3], True, 64, 1),
    "resnet101": ([3, 4, 23, 3], True, 64, 1),
    "resnet152": ([3, 8, 36, 3], True, 64, 1),
    "wide_resnet50_2": ([3, 4, 6, 3], True, 128, 1),
    "wide_resnet101_2": ([3, 4, 23, 3], True, 128, 1),
    "resnext50_32x4d": ([3, 4, 6, 3], True, 4, 32),
    "resnext101_32x8d": ([3, 4, 23, 3], True, 8, 32),
    "resnext101_64x4d": ([3, 4, 23, 3], True, 4, 64),
}
VGGS = {"vgg11_bn": [1, 1, 2, 2, 2], "vgg13_bn": [2, 2, 2, 2, 2], "vgg16_bn": [2, 2, 3, 3, 3],
        "vgg19_bn": [2, 2, 4, 4, 4]}   # 3x3 convs per stage
ALL_ARCHS = sorted(ARCHS) + sorted(VGGS) + ["mobilenet_v2"]


class InputError(Exception):
    pass


def bn(out, p, c):
    out.update({p + ".weight": [c], p + ".bias": [c], p + ".running_mean": [c],
                p + ".running_var": [c], p + ".num_batches_tracked": []})


def expected_shapes(arch, num_classes, in_ch, kernel, width=None, groups=None):
    """{name: shape} of torchvision's ResNet class for arch (width_per_group / groups: the
    arch's unless given), in its order."""
    blocks, bottleneck, w0, g0 = ARCHS[arch]
    wpg, groups = width or w0, groups or g0
    out = {}
    out["conv1.weight"] = [64, in_ch, kernel, kernel]
    bn(out, "bn1", 64)
    cin, exp = 64, 4 if bottleneck else 1
    for s, n in enumerate(blocks):
        w = 64 << s
        mid = int(w * (wpg / 64.0)) * groups
        for b in range(n):
            p = "layer%d.%d" % (s + 1, b)
            stride = 2 if (b == 0 and s > 0) else 1
            if bottleneck:
                out[p + ".conv1.weight"] = [mid, cin, 1, 1]
                bn(out, p + ".bn1", mid)
                out[p + ".conv2.weight"] = [mid, mid // groups, 3, 3]
                bn(out, p + ".bn2", mid)
                out[p + ".conv3.weight"] = [w * exp, mid, 1, 1]
                bn(out, p + ".bn3", w * exp)
            else:
                out[p + ".conv1.weight"] = [w, cin, 3, 3]
                bn(out, p + ".bn1", w)
                out[p + ".conv2.weight"] = [w, w, 3, 3]
                bn(out, p + ".bn2", w)
            if stride != 1 or cin != w * exp:
                out[p + ".downsample.0.weight"] = [w * exp, cin, 1, 1]
                bn(out, p + ".downsample.1", w * exp)
            cin = w * exp
    out["fc.weight"] = [num_classes, cin]
    out["fc.bias"] = [num_classes]
    return out


def vgg_shapes(arch, num_classes, in_ch, cifar):
    """torchvision's vgg*_bn (cifar: the runner's 512-wide CIFAR classifier)."""
    out, idx, cin = {}, 0, in_ch
    for s, n in enumerate(VGGS[arch]):
        c = [64, 128, 256, 512, 512][s]
        for _ in range(n):
            out["features.%d.weight" % idx] = [c, cin, 3, 3]
            out["features.%d.bias" % idx] = [c]
            bn(out, "features.%d" % (idx + 1), c)
            idx, cin = idx + 3, c
        idx += 1
    hidden, flat = (512, 512) if cifar else (4096, 512 * 7 * 7)
    for k, (i, o) in enumerate([(flat, hidden), (hidden, hidden), (hidden, num_classes)]):
        out["classifier.%d.weight" % (3 * k)] = [o, i]
        out["classifier.%d.bias" % (3 * k)] = [o]
    return out


def div8(v):
    """torchvision's _make_divisible(v, 8)."""
    r = max(8, int(v + 4) // 8 * 8)
    return r + 8 if r < 0.9 * v else r


def mobilenet_shapes(num_classes, in_ch, width):
    """torchvision's mobilenet_v2(width_mult=width)."""
    out, cin = {}, div8(32 * width)
    out["features.0.0.weight"] = [cin, in_ch, 3, 3]
    bn(out, "features.0.1", cin)
    idx = 1
    for t, c, n, _ in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]:
        cout = div8(c * width)
        for _ in range(n):
            hidden, k, p = cin * t, 0, "features.%d.conv" % idx
            if t != 1:
                out["%s.0.0.weight" % p] = [hidden, cin, 1, 1]
                bn(out, "%s.0.1" % p, hidden)
                k = 1
            out["%s.%d.0.weight" % (p, k)] = [hidden, 1, 3, 3]
            bn(out, "%s.%d.1" % (p, k), hidden)
            out["%s.%d.weight" % (p, k + 1)] = [cout, hidden, 1, 1]
            bn(out, "%s.%d" % (p, k + 2), cout)
            idx, cin = idx + 1, cout
    last = div8(1280 * max(1.0, width))
    out["features.%d.0.weight" % idx] = [last, cin, 1, 1]
    bn(out, "features.%d.1" % idx, last)
    out["classifier.1.weight"] = [num_classes, last]
    out["classifier.1.bias"] = [num_classes]
    return out


def load_state_dict(path):
    import torch
    try:
        obj = torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any unreadable file is bad input
        raise InputError("%s: cannot be read as a PyTorch file (%s: %s); give a .pth written by "
                         "torch.save" % (path, type(e).__name__, e))
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        obj = obj.state_dict()
    if isinstance(obj, dict):
        for key in ("model", "state_dict", "model_state_dict"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj or not all(torch.is_tensor(v) for v in obj.values()):
        raise InputError("%s: holds no state dict of tensors (found %s); save the model with "
                         "torch.save(model.state_dict(), PATH)" % (path, type(obj).__name__))
    sd = {}
    for k, v in obj.items():
        k = re.sub(r"^(module\.|_orig_mod\.)+", "", k)
        sd[k] = v
    return sd


def infer(path, sd, stem=None):
    """(arch, {name: shape} expected, metadata) of the torchvision model sd holds."""
    first = ", ".join(list(sd)[:4])
    if "features.0.0.weight" in sd and "classifier.1.weight" in sd:   # mobilenet_v2
        c0, fc = sd["features.0.0.weight"], sd["classifier.1.weight"]
        if c0.dim() != 4 or fc.dim() != 2:
            raise InputError("%s: features.0.0.weight / classifier.1.weight are not mobilenet_v2's" % path)
        last = sd.get("features.18.0.weight")
        for w in sorted({round(0.05 * i, 2) for i in range(1, 81)} | {0.35, 0.75, 1.3, 1.4}):
            want = mobilenet_shapes(int(fc.shape[0]), int(c0.shape[1]), w)
            if all(k in sd and list(sd[k].shape) == v for k, v in want.items() if not k.endswith("tracked")):
                return "mobilenet_v2", want, {"stem": stem or "imagenet", "width": "%g" % w}
        raise InputError("%s: features.0.0.weight %s%s: no width_mult of torchvision's mobilenet_v2 gives these "
                         "shapes" % (path, list(c0.shape), "" if last is None else ", features.18.0.weight %s"
                                     % list(last.shape)))
    if "features.0.weight" in sd and "classifier.6.weight" in sd:     # vgg*_bn
        convs = sorted(int(m.group(1)) for k in sd for m in [re.match(r"features\.(\d+)\.weight$", k)]
                       if m and sd[k].dim() == 4)
        fc0 = sd.get("classifier.0.weight")
        if "features.1.running_mean" not in sd:
            raise InputError("%s: a VGG without batch norm (no features.1.running_mean); only vgg*_bn convert"
                             % path)
        for arch, per_stage in VGGS.items():
            if len(convs) == sum(per_stage) and fc0 is not None and fc0.dim() == 2:
                cifar = int(fc0.shape[1]) == 512
                want = vgg_shapes(arch, int(sd["classifier.6.weight"].shape[0]), int(sd["features.0.weight"].shape[1]),
                                  cifar)
                return arch, want, {"stem": "cifar" if cifar else "imagenet"}
        raise InputError("%s: %d 3x3 convs match none of %s" % (path, len(convs), ", ".join(VGGS)))
    if "conv1.weight" not in sd or "fc.weight" not in sd:
        raise InputError("%s: no conv1.weight / fc.weight, features.0.weight / classifier.6.weight or "
                         "features.0.0.weight / classifier.1.weight: not a torchvision ResNet, VGG-BN or "
                         "MobileNetV2 state dict (first keys: %s)" % (path, first))
    blocks = []
    for s in range(1, 5):
        idx = {int(m.group(1)) for k in sd for m in [re.match(r"layer%d\.(\d+)\." % s, k)] if m}
        blocks.append(max(idx) + 1 if idx else 0)
    bottleneck = "layer1.0.conv3.weight" in sd
    wpg, groups = 64, 1
    c2 = sd.get("layer1.0.conv2.weight")
    if bottleneck and c2 is not None and c2.dim() == 4 and c2.shape[1] > 0:
        groups = int(c2.shape[0]) // int(c2.shape[1])
        wpg = int(c2.shape[0]) // groups
    conv1, fc = sd["conv1.weight"], sd["fc.weight"]
    if conv1.dim() != 4 or conv1.shape[2] not in (3, 7) or fc.dim() != 2:
        raise InputError("%s: conv1.weight %s / fc.weight %s are not a ResNet's"
                         % (path, list(conv1.shape), list(fc.shape)))
    for arch, (b, bt, w, g) in ARCHS.items():
        if b == blocks and bt == bottleneck and (w, g) == (wpg, groups):
            kernel = int(conv1.shape[2])
            meta = {"stem": "imagenet" if kernel == 7 else "cifar"}
            if (w, g) != (64, 1):
                meta.update({"width": str(w), "groups": str(g)} if g > 1 else {"width": str(w)})
            return arch, expected_shapes(arch, int(fc.shape[0]), int(conv1.shape[1]), kernel), meta
    raise InputError("%s: blocks per stage %s%s (width per group %d, groups %d) match none of %s"
                     % (path, blocks, " (bottleneck)" if bottleneck else "", wpg, groups, ", ".join(ARCHS)))


def classifier_of(arch):
    return "classifier.6" if arch in VGGS else "classifier.1" if arch == "mobilenet_v2" else "fc"


def first_conv_of(arch):
    return "features.0" if arch in VGGS else "features.0.0" if arch == "mobilenet_v2" else "conv1"


def convert(sd, path, arch=None, stem=None):
    """Checks sd against torchvision's model and returns (tensors {name: torch tensor in
    torchvision's order}, metadata)."""
    import torch
    found, want, extra_meta = infer(path, sd, stem)
    if arch and arch != found:
        raise InputError("%s: holds %s weights, not %s; use --arch %s (and model.arch: %s)"
                         % (path, found, arch, found, found))
    extra = [k for k in sd if k not in want]
    if extra:
        raise InputError("%s: unexpected tensor %s (%d in all) for torchvision's %s; a modified model "
                         "(extra layers, another head) does not convert" % (path, extra[0], len(extra), found))
    out = {}
    for name, shape in want.items():
        if name not in sd:
            if name.endswith("num_batches_tracked"):
                out[name] = torch.tensor(0, dtype=torch.int64)  # as BatchNorm loads old files
                continue
            raise InputError("%s: missing tensor %s for torchvision's %s" % (path, name, found))
        t = sd[name]
        if list(t.shape) != shape:
            raise InputError("%s: tensor %s has shape %s, torchvision's %s has %s (a modified model does not "
                             "convert)" % (path, name, list(t.shape), found, shape))
        if name.endswith("num_batches_tracked"):
            out[name] = t.detach().to(torch.int64).reshape(())
        else:
            if not t.is_floating_point():
                raise InputError("%s: tensor %s is %s, expected floating point" % (path, name, t.dtype))
            out[name] = t.detach().to(torch.float32).contiguous()
            if not torch.isfinite(out[name]).all():
                raise InputError("%s: tensor %s holds NaN or infinite values" % (path, name))
    meta = {"format": "pt", "arch": found, "num_classes": str(int(sd[classifier_of(found) + ".weight"].shape[0])),
            "in_channels": str(int(sd[first_conv_of(found) + ".weight"].shape[1])),
            "source": os.path.basename(path), **extra_meta}
    return out, meta


def write_safetensors(path, tensors, meta):
    """The safetensors format: 8-byte little-endian header length, JSON header, data."""
    codes = {"torch.float32": "F32", "torch.int64": "I64"}
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        b = t.contiguous().numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": codes[str(t.dtype)], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="a .pth written by torch.save")
    ap.add_argument("output", help="the .safetensors file to write")
    ap.add_argument("--arch", choices=ALL_ARCHS, help="check the file holds this architecture")
    ap.add_argument("--stem", choices=["cifar", "imagenet"],
                    help="mobilenet_v2 only: the variant the weights were trained as (default imagenet)")
    a = ap.parse_args()
    try:
        if not os.path.isfile(a.input):
            raise InputError("%s: no such file" % a.input)
        tensors, meta = convert(load_state_dict(a.input), a.input, a.arch, a.stem)
        try:
            write_safetensors(a.output, tensors, meta)
        except OSError as e:
            raise InputError("%s: cannot write (%s)" % (a.output, e.strerror or e))
    except InputError as e:
        print("torchvision_weights.py: %s" % e, file=sys.stderr)
        sys.exit(2)
    n = sum(t.numel() for k, t in tensors.items() if not k.endswith("num_batches_tracked"))
    print("%s: %s, %s stem, %s classes, %s input channels, %d tensors, %d values -> %s"
          % (a.input, meta["arch"], meta["stem"], meta["num_classes"], meta["in_channels"],
             len(tensors), n, a.output))


if __name__ == "__main__":
    main()
