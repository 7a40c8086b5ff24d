#!/usr/bin/python3
"""torchvision_weights.py: a torchvision ResNet state dict (.pth) -> the safetensors file
that the runner's `model.init_from` loads.

usage: scripts/torchvision_weights.py IN.pth OUT.safetensors [--arch resnet50]

IN.pth is what torch.save wrote: a state dict (torch.save(model.state_dict()), the files
torchvision downloads into ~/.cache/torch/hub/checkpoints, e.g. resnet50-0676ba61.pth), a
checkpoint dict holding one under "model" or "state_dict" (torchvision's reference
scripts, Lightning), or a whole pickled model. "module." (DistributedDataParallel) and
"_orig_mod." (torch.compile) prefixes are removed. Runs with Debian's python3-torch and
nothing else: no network, no torchvision, no safetensors package.

What it checks, before writing anything: the tensors are exactly those of
torchvision.models.resnet18/34/50/101/152 (with the ImageNet 7x7 stem, or a CIFAR 3x3 stem
as `runner export` writes), shape for shape; the architecture is inferred from the blocks
(--arch, if given, must agree). Old checkpoints without num_batches_tracked get 0 for it,
as torch's BatchNorm does when it loads them. Floating tensors are written as F32 (fp16 or
bf16 checkpoints are widened), counters as I64. The metadata records format "pt", arch,
stem, num_classes, in_channels and the source file name.

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

ARCHS = {  # blocks per stage, bottleneck
    "resnet18": ([2, 2, 2, 2], False),
    "resnet34": ([3, 4, 6, 3], False),
    "resnet50": ([3, 4, 6, 3], True),
    "resnet101": ([3, 4, 23, 3], True),
    "resnet152": ([3, 8, 36, 3], True),
}


class InputError(Exception):
    pass


def expected_shapes(arch, num_classes, in_ch, kernel):
    """{name: shape} of torchvision's resnet state_dict, in its order."""
    blocks, bottleneck = ARCHS[arch]
    out = {}

    def bn(p, c):
        out.update({p + ".weight": [c], p + ".bias": [c], p + ".running_mean": [c],
                    p + ".running_var": [c], p + ".num_batches_tracked": []})

    out["conv1.weight"] = [64, in_ch, kernel, kernel]
    bn("bn1", 64)
    cin, exp = 64, 4 if bottleneck else 1
    for s, n in enumerate(blocks):
        w = 64 << s
        for b in range(n):
            p = "layer%d.%d" % (s + 1, b)
            stride = 2 if (b == 0 and s > 0) else 1
            if bottleneck:
                out[p + ".conv1.weight"] = [w, cin, 1, 1]
                bn(p + ".bn1", w)
                out[p + ".conv2.weight"] = [w, w, 3, 3]
                bn(p + ".bn2", w)
                out[p + ".conv3.weight"] = [w * exp, w, 1, 1]
                bn(p + ".bn3", w * exp)
            else:
                out[p + ".conv1.weight"] = [w, cin, 3, 3]
                bn(p + ".bn1", w)
                out[p + ".conv2.weight"] = [w, w, 3, 3]
                bn(p + ".bn2", w)
            if stride != 1 or cin != w * exp:
                out[p + ".downsample.0.weight"] = [w * exp, cin, 1, 1]
                bn(p + ".downsample.1", w * exp)
            cin = w * exp
    out["fc.weight"] = [num_classes, cin]
    out["fc.bias"] = [num_classes]
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


def infer_arch(path, sd):
    if "conv1.weight" not in sd or "fc.weight" not in sd:
        raise InputError("%s: no conv1.weight / fc.weight: not a torchvision ResNet state dict "
                         "(first keys: %s)" % (path, ", ".join(list(sd)[:4])))
    blocks = []
    for s in range(1, 5):
        idx = {int(m.group(1)) for k in sd for m in [re.match(r"layer%d\.(\d+)\." % s, k)] if m}
        blocks.append(max(idx) + 1 if idx else 0)
    bottleneck = "layer1.0.conv3.weight" in sd
    for arch, (b, bn) in ARCHS.items():
        if b == blocks and bn == bottleneck:
            return arch
    raise InputError("%s: blocks per stage %s%s match none of %s; only torchvision's resnet18/34/50/"
                     "101/152 convert" % (path, blocks, " (bottleneck)" if bottleneck else "",
                                          ", ".join(ARCHS)))


def convert(sd, path, arch=None):
    """Checks sd against torchvision's resnet and returns (tensors {name: torch tensor in
    torchvision's order}, metadata)."""
    import torch
    found = infer_arch(path, sd)
    if arch and arch != found:
        raise InputError("%s: holds %s weights, not %s; use --arch %s (and model.arch: %s)"
                         % (path, found, arch, found, found))
    conv1, fc = sd["conv1.weight"], sd["fc.weight"]
    if conv1.dim() != 4 or conv1.shape[2] not in (3, 7) or fc.dim() != 2:
        raise InputError("%s: conv1.weight %s / fc.weight %s are not a ResNet's"
                         % (path, list(conv1.shape), list(fc.shape)))
    kernel = int(conv1.shape[2])
    want = expected_shapes(found, int(fc.shape[0]), int(conv1.shape[1]), kernel)
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
            raise InputError("%s: tensor %s has shape %s, torchvision's %s has %s (a variant such as "
                             "wide_resnet or resnext does not convert)" % (path, name, list(t.shape), found, shape))
        if name.endswith("num_batches_tracked"):
            out[name] = t.detach().to(torch.int64).reshape(())
        else:
            if not t.is_floating_point():
                raise InputError("%s: tensor %s is %s, expected floating point" % (path, name, t.dtype))
            out[name] = t.detach().to(torch.float32).contiguous()
            if not torch.isfinite(out[name]).all():
                raise InputError("%s: tensor %s holds NaN or infinite values" % (path, name))
    meta = {"format": "pt", "arch": found, "stem": "imagenet" if kernel == 7 else "cifar",
            "num_classes": str(int(fc.shape[0])), "in_channels": str(int(conv1.shape[1])),
            "source": os.path.basename(path)}
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
    ap.add_argument("--arch", choices=sorted(ARCHS), help="check the file holds this architecture")
    a = ap.parse_args()
    try:
        if not os.path.isfile(a.input):
            raise InputError("%s: no such file" % a.input)
        tensors, meta = convert(load_state_dict(a.input), a.input, a.arch)
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
