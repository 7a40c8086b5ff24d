#!/usr/bin/python3
"""torchvision_check.py: the torchvision side of tests/cli/test_cli_imagenet.c.

  make ARCH CLASSES SEED OUT.pth
      torchvision.models.ARCH(num_classes=CLASSES) with torchvision's own init under
      torch.manual_seed(SEED), saved as a plain state dict (what torch.save(model.state_dict())
      writes; the converter's input).
  compare A B [--skip PREFIX] [--only PREFIX] [--atol X]
      A, B: .safetensors or .pth state dicts. Every tensor in both (minus --skip, or only
      --only) must exist in both with the same shape and, for floating tensors, agree within
      X (default 0); counters and BN running statistics (which any training forward
      updates) are not compared. Prints "compare: N tensors within X".
Exit 0 when everything holds; anything else is a failure with a message.
"""
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_export import load_safetensors  # noqa: E402


def load(path):
    if path.endswith(".safetensors"):
        return load_safetensors(path)[0]
    return torch.load(path, map_location="cpu")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        arch, classes, seed, out = args[0], int(args[1]), int(args[2]), args[3]
        torch.manual_seed(seed)
        torch.save(getattr(torchvision.models, arch)(num_classes=classes).state_dict(), out)
        print("made %s(num_classes=%d) -> %s" % (arch, classes, out))
        return
    a, b = load(args[0]), load(args[1])
    skip = only = None
    atol = 0.0
    rest = args[2:]
    while rest:
        k, v, rest = rest[0], rest[1], rest[2:]
        if k == "--skip":
            skip = v
        elif k == "--only":
            only = v
        elif k == "--atol":
            atol = float(v)
    keys = [k for k in a if (not skip or not k.startswith(skip)) and (not only or k.startswith(only))]
    other = [k for k in b if (not skip or not k.startswith(skip)) and (not only or k.startswith(only))]
    assert sorted(keys) == sorted(other), "tensor sets differ: %s" % sorted(set(keys) ^ set(other))[:5]
    n = 0
    for k in keys:
        assert a[k].shape == b[k].shape, "%s: shape %s vs %s" % (k, list(a[k].shape), list(b[k].shape))
        if not a[k].is_floating_point() or ".running_" in k:
            continue
        d = (a[k].double() - b[k].double()).abs().max().item() if a[k].numel() else 0.0
        assert d <= atol, "%s: differs by %g > %g" % (k, d, atol)
        n += 1
    print("compare: %d tensors within %g" % (n, atol))


if __name__ == "__main__":
    main()
