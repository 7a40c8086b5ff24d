#!/usr/bin/python3
"""make_stem_fixture.py: golden data from PyTorch for a ResNet with torchvision's ImageNet
stem (conv 7x7/2 + BN + ReLU + max-pool 3x3/2), the runner's model.stem: imagenet.

The model is torchvision.models.resnet18(num_classes=10) itself, with torchvision's own
init (seed 1234); the init is written by scripts/torchvision_weights.py's conversion (the
path `model.init_from` takes). One batch of 8 random 64x64 images. Written to OUT_DIR:

  resnet18_imagenet_init.safetensors    the converted state dict
  resnet18_imagenet_golden.safetensors  input (NHWC, F32), labels (I64), logits and loss of
      one train-mode forward (mean CE, label smoothing 0.1), grad.<param> (of the mean
      loss), fwd.<buffer> BN buffers after it, eval_logits (eval mode, those running
      statistics), sgd.<name> every param and buffer after one SGD step (lr 0.1, momentum
      0.9, wd 5e-4) from the init on that batch; all computed in float64 and stored as F32;
      err.<key>: PyTorch's own fp32 error (relative L2) on each.
One step, not three as for resnet20: at batch 8 and 64 px, resnet18 under repeated steps
on one batch is chaotic (PyTorch's own fp32 run is 27% away from its fp64 run in a BN bias
after 3 steps at lr 0.1, 4% after 2 at lr 0.02); after one step it is 0.4%, the gradient's.
Usage: make_stem_fixture.py --out DIR [--if-missing]
(--if-missing: keep fixtures written by this same version of the script). ~90 MB, so
ctest generates them into the build tree (tests/golden/CMakeLists.txt).
"""
import argparse
import copy
import hashlib
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import torchvision_weights  # noqa: E402  (the converter under test)
from make_fixtures import fixture_sha, save_safetensors  # noqa: E402

SGD = dict(lr=0.1, momentum=0.9, nesterov=False, weight_decay=5e-4)
SMOOTHING = 0.1
STEPS = 1
NAME = "resnet18_imagenet"


def compute(model, init_sd, x, y):
    lossf = nn.CrossEntropyLoss(label_smoothing=SMOOTHING)
    model.load_state_dict(init_sd)
    model.train()
    model.zero_grad()
    logits = model(x)
    loss = lossf(logits, y)
    loss.backward()
    r = {"logits": logits.detach().numpy(), "loss": loss.detach().reshape(1).numpy()}
    for k, p in model.named_parameters():
        r["grad." + k] = p.grad.numpy().copy()
    for k, v in model.state_dict().items():
        if "running" in k or "num_batches" in k:
            r["fwd." + k] = v.numpy().copy()
    model.eval()
    with torch.no_grad():
        r["eval_logits"] = model(x).numpy()
    model.load_state_dict(init_sd)
    model.train()
    opt = torch.optim.SGD(model.parameters(), **SGD)
    for _ in range(STEPS):
        opt.zero_grad()
        lossf(model(x), y).backward()
        opt.step()
    for k, v in model.state_dict().items():
        r["sgd." + k] = v.numpy().copy()
    return {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in r.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--if-missing", action="store_true")
    a = ap.parse_args()
    init_path = os.path.join(a.out, NAME + "_init.safetensors")
    gold_path = os.path.join(a.out, NAME + "_golden.safetensors")
    sha = hashlib.sha256()
    for p in (os.path.abspath(__file__), torchvision_weights.__file__):
        with open(p, "rb") as f:
            sha.update(f.read())
    script_sha = sha.hexdigest()
    if a.if_missing and os.path.exists(init_path) and fixture_sha(gold_path) == script_sha:
        print("%s: fixtures present in %s" % (NAME, a.out))
        return
    torch.manual_seed(1234)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(8, 3, 64, 64)
    y = torch.randint(0, 10, (8,))
    init_sd = {k: v.clone() for k, v in model.state_dict().items()}
    r32 = compute(model, init_sd, x, y)
    m64 = copy.deepcopy(model).double()
    sd64 = {k: (v.double() if v.is_floating_point() else v) for k, v in init_sd.items()}
    r64 = compute(m64, sd64, x.double(), y)
    g = {"input": x.permute(0, 2, 3, 1).contiguous().numpy(), "labels": y.numpy().astype(np.int64)}
    for k, v in r64.items():
        if v.dtype == np.float64:
            g[k] = v.astype(np.float32)
            d, n = np.linalg.norm(r32[k] - v), np.linalg.norm(v)
            g["err." + k] = np.array(d / n if n > 0 else d, dtype=np.float32)
        else:
            g[k] = v
    os.makedirs(a.out, exist_ok=True)
    tensors, meta = torchvision_weights.convert(init_sd, "torchvision.models.resnet18(num_classes=10)")
    torchvision_weights.write_safetensors(init_path, tensors, meta)
    save_safetensors(gold_path, g, {"script_sha256": script_sha})
    worst = max((float(v), k) for k, v in g.items() if k.startswith("err."))
    print("%s: loss %.6f; PyTorch fp32 vs fp64: worst %.3g (%s)" % (NAME, r64["loss"][0], worst[0], worst[1][4:]))


if __name__ == "__main__":
    main()
