#!/usr/bin/python3
"""torchvision_check.py: the torchvision side of tests/cli/test_cli_imagenet.c. Runs one or
more commands, separated by ";" arguments (one interpreter start for several checks:
importing torch takes seconds).

  make ARCH CLASSES SEED OUT.pth [legacy]
      torchvision.models.ARCH(num_classes=CLASSES) with torchvision's own init under
      torch.manual_seed(SEED), then 3 train-mode forwards of random batches (so the BN
      running statistics are not the init's and num_batches_tracked is 3), saved as a plain
      state dict. legacy: as old checkpoints and DDP training scripts save them instead:
      {"model": {"module." + name: tensor}}, without num_batches_tracked.
  compare A B [--skip PREFIX] [--only PREFIX] [--atol X] [--buffers]
      A, B: .safetensors or plain .pth state dicts. The tensors of both (minus --skip, or
      only --only) must be the same names and shapes, and the floating ones agree within X
      (default 0). BN running statistics (which any training forward moves) are compared
      only with --buffers; counters, exactly, only then too. Prints "compare: N tensors
      within X".
  export FILE ARCH CLASSES IN_CHANNELS STEPS
      check_export.py's strict load into torchvision's model (see there).
Exit 0 when everything holds; a failed check raises (exit 1) with its message.
"""
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_export  # noqa: E402


def load(path):
    if path.endswith(".safetensors"):
        return check_export.read_safetensors(path)[0]
    return torch.load(path, map_location="cpu")


def make(arch, classes, seed, out, legacy=None):
    torch.manual_seed(int(seed))
    m = getattr(torchvision.models, arch)(num_classes=int(classes))
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(2, 3, 64, 64))
    sd = m.state_dict()
    if legacy:
        sd = {"model": {"module." + k: v for k, v in sd.items() if "num_batches_tracked" not in k}}
    torch.save(sd, out)
    print("made %s(num_classes=%s)%s -> %s" % (arch, classes, " (legacy format)" if legacy else "", out))


def compare(a_path, b_path, *opts):
    a, b = load(a_path), load(b_path)
    skip = only = None
    atol, buffers = 0.0, False
    opts = list(opts)
    while opts:
        k = opts.pop(0)
        if k == "--buffers":
            buffers = True
            continue
        v = opts.pop(0)
        if k == "--skip":
            skip = v
        elif k == "--only":
            only = v
        elif k == "--atol":
            atol = float(v)

    def chosen(k):
        return (not skip or not k.startswith(skip)) and (not only or k.startswith(only))

    keys = sorted(k for k in a if chosen(k))
    other = sorted(k for k in b if chosen(k))
    assert keys == other, "tensor sets differ: %s" % sorted(set(keys) ^ set(other))[:5]
    n = 0
    for k in keys:
        assert a[k].shape == b[k].shape, "%s: shape %s vs %s" % (k, list(a[k].shape), list(b[k].shape))
        if ".running_" in k or "num_batches_tracked" in k:
            if not buffers:
                continue
        d = (a[k].double() - b[k].double()).abs().max().item() if a[k].numel() else 0.0
        assert d <= atol, "%s: differs by %g > %g" % (k, d, atol)
        n += 1
    print("compare: %d tensors within %g" % (n, atol))


def export(path, arch, classes, cin, steps):
    sys.argv = ["check_export.py", path, arch, classes, cin, steps]
    check_export.main()


def main():
    cmds, cur = [], []
    for a in sys.argv[1:]:
        if a == ";":
            cmds.append(cur)
            cur = []
        else:
            cur.append(a)
    cmds.append(cur)
    for c in cmds:
        if c:
            {"make": make, "compare": compare, "export": export}[c[0]](*c[1:])


if __name__ == "__main__":
    main()
