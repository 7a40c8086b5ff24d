#!/usr/bin/python3
"""Loads a safetensors file written by `runner export` into the model
scripts/torchvision_model.py builds from the file's metadata (torchvision's model with the
stem the metadata names, or the reference definition of a CIFAR architecture) with
load_state_dict(strict=True) and runs a forward pass (64x64 inputs for the imagenet stem,
32x32 otherwise).

usage: check_export.py FILE ARCH NUM_CLASSES IN_CHANNELS STEPS
Prints "loaded ARCH (STEM stem): N tensors, M parameters, logits finite, num_batches_tracked=STEPS".
Exit 0 on success. Reads safetensors with the standard library (Debian's PyTorch 1.13
has no safetensors module)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from torchvision_model import build, read_safetensors  # noqa: E402


def main():
    path, arch, classes, cin, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    sd, meta = read_safetensors(path)
    assert meta.get("arch") == arch, meta
    assert int(meta["num_classes"]) == classes and int(meta["in_channels"]) == cin, meta
    stem = meta.get("stem", "cifar")
    m = build(meta)
    m.load_state_dict(sd, strict=True)
    m.eval()
    with torch.no_grad():
        side = 64 if stem == "imagenet" else 32
        y = m(torch.randn(2, cin, side, side))
    assert torch.isfinite(y).all(), "non-finite logits"
    nbt = {int(v) for k, v in sd.items() if k.endswith("num_batches_tracked")}
    assert nbt == {steps}, "num_batches_tracked %s, expected %d" % (nbt, steps)
    print("loaded %s (%s stem): %d tensors, %d parameters, logits finite, num_batches_tracked=%d"
          % (arch, stem, len(sd), sum(p.numel() for p in m.parameters()), steps))


if __name__ == "__main__":
    main()
