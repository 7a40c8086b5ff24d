#!/usr/bin/python3
"""make_fixtures.py: golden data from PyTorch for the runner's model engine.

For one model it builds the net in torchvision style (resnet20: He et al. CIFAR ResNet
written here with torchvision names; resnet50: torchvision.models.resnet50 with conv1
replaced by a 3x3 stride-1 conv and maxpool by Identity), draws one init and one batch
from a fixed seed, and writes to OUT_DIR:

  <model>_init.safetensors    the state_dict at init (torchvision names, F32, I64 counters)
  <model>_golden.safetensors  input (NHWC, F32), labels (I64), logits, loss (mean CE with
                              label smoothing 0.1), grad.<name> for every parameter (of the
                              mean loss, train-mode forward), fwd.<buffer> BN buffers after
                              that one forward, sgd.<name> / adamw.<name> every param and
                              buffer after 3 optimizer steps (each: forward, loss, backward,
                              step, all on the same batch), adamw1.<name> after 1 AdamW step;
                              (resnet20 only: resnet50 is chaotic under steps at batch 4);
                              all computed in float64; err.<key>: PyTorch's own fp32 error
Usage: make_fixtures.py --model resnet20|resnet50 --out DIR [--batch B] [--if-missing]
(--if-missing: keep existing fixtures written by this same version of the script)
Only the resnet20 files are committed; the resnet50 ones (~190 MB) are generated into the
build tree by ctest (tests/golden/CMakeLists.txt).
"""
import argparse
import copy
import hashlib
import json
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torchvision

SGD = dict(lr=0.1, momentum=0.9, nesterov=False, weight_decay=5e-4)
# eps 1e-6, not the default 1e-8: with 1e-8 the first AdamW step moves a parameter whose
# gradient is ~1e-8 (a few per net) by up to +-lr depending on the last bits of that
# gradient, and two correct fp32 implementations that sum in different orders then drift
# apart by ~3% in the BN biases after 3 steps (PyTorch NCHW vs PyTorch channels_last
# does the same). The update formula is identical for any eps; test_optim checks 1e-8.
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=5e-2)
SMOOTHING = 0.1
STEPS = 3


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class CifarResNet(nn.Module):
    """He et al. (2016) CIFAR ResNet with a projection (1x1 conv + BN) shortcut."""

    def __init__(self, depth, num_classes=10, in_ch=3):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_ch, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        cin = 16
        for i, w in enumerate([16, 32, 64]):
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(cin, w, 2 if (b == 0 and i > 0) else 1))
                cin = w
            setattr(self, "layer%d" % (i + 1), nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(model):
    if model == "resnet20":
        return CifarResNet(20, 10), 10
    m = torchvision.models.resnet50(num_classes=100)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    m.maxpool = nn.Identity()
    return m, 100


def save_safetensors(path, tensors, metadata=None):
    """Writes {name: np.ndarray} in the safetensors format (little-endian)."""
    codes = {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name in sorted(tensors):
        a = np.array(tensors[name], order="C", copy=True)  # keeps 0-d shapes (ascontiguousarray would not)
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": codes[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
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
    os.replace(tmp, path)


def state(m):
    return {k: v.detach().cpu().numpy().copy() for k, v in m.state_dict().items()}


def run_steps(model, init_sd, x, y, opt_name, steps=STEPS):
    model.load_state_dict(init_sd)
    model.train()
    opt = (torch.optim.SGD(model.parameters(), **SGD) if opt_name == "sgd"
           else torch.optim.AdamW(model.parameters(), **ADAMW))
    lossf = nn.CrossEntropyLoss(label_smoothing=SMOOTHING)
    for _ in range(steps):
        opt.zero_grad()
        lossf(model(x), y).backward()
        opt.step()
    return state(model)


def compute(model, init_sd, x, y, with_steps):
    """Logits, loss, gradients, BN buffers after one forward, and the optimizer runs."""
    model.load_state_dict(init_sd)
    model.train()
    model.zero_grad()
    logits = model(x)
    loss = nn.CrossEntropyLoss(label_smoothing=SMOOTHING)(logits, y)
    loss.backward()
    r = {"logits": logits.detach().numpy().astype(np.float64),
         "loss": loss.detach().reshape(1).numpy().astype(np.float64)}
    for k, p in model.named_parameters():
        r["grad." + k] = p.grad.numpy().astype(np.float64)
    for k, v in state(model).items():
        if "running" in k or "num_batches" in k:
            r["fwd." + k] = v
    for opt in ("sgd", "adamw") if with_steps else ():
        for k, v in run_steps(model, init_sd, x, y, opt).items():
            r[opt + "." + k] = v
    for k, v in (run_steps(model, init_sd, x, y, "adamw", 1) if with_steps else {}).items():
        r["adamw1." + k] = v
    return {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in r.items()}


def fixture_sha(path):
    """The script_sha256 metadata of a golden file ("" if unreadable): --if-missing
    regenerates fixtures written by another version of this script."""
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            return json.loads(f.read(n)).get("__metadata__", {}).get("script_sha256", "")
    except (OSError, ValueError, struct.error):
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=["resnet20", "resnet50"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--if-missing", action="store_true", help="do nothing if both files exist")
    a = ap.parse_args()
    outs = [os.path.join(a.out, a.model + s) for s in ("_init.safetensors", "_golden.safetensors")]
    with open(os.path.abspath(__file__), "rb") as f:
        script_sha = hashlib.sha256(f.read()).hexdigest()
    if a.if_missing and all(os.path.exists(o) for o in outs) and fixture_sha(outs[1]) == script_sha:
        print("%s: fixtures present in %s" % (a.model, a.out))
        return
    torch.manual_seed(1234)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    model, classes = build(a.model)
    batch = a.batch or (8 if a.model == "resnet20" else 4)
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, classes, (batch,))
    init_sd = {k: v.clone() for k, v in model.state_dict().items()}

    # The reference is computed in float64 (stored as F32); the same run in float32 gives
    # PyTorch's own fp32 error for every tensor, stored as err.<key> (relative L2). Deep,
    # narrow-batch nets are ill-conditioned (resnet50 at batch 4: PyTorch fp32 vs fp64
    # differ by ~1e-2 in BN-bias gradients), so the C test allows max(base, 10 x err).
    # resnet50 at batch 4 is chaotic under optimizer steps: PyTorch's own fp32 run ends up
    # ~1.4 (relative) away from its fp64 run after 3 SGD steps, so its fixture holds the
    # forward and the gradients only.
    with_steps = a.model == "resnet20"
    r32 = compute(model, init_sd, x, y, with_steps)
    m64 = copy.deepcopy(model).double()
    sd64 = {k: (v.double() if v.is_floating_point() else v) for k, v in init_sd.items()}
    r64 = compute(m64, sd64, x.double(), y, with_steps)
    g = {"input": x.permute(0, 2, 3, 1).contiguous().numpy(), "labels": y.numpy().astype(np.int64)}
    for k, v in r64.items():
        if v.dtype == np.float64:
            g[k] = v.astype(np.float32)
            d = np.linalg.norm(r32[k].astype(np.float64) - v)
            n = np.linalg.norm(v)
            g["err." + k] = np.array(d / n if n > 0 else d, dtype=np.float32)
        else:
            g[k] = v
    os.makedirs(a.out, exist_ok=True)
    save_safetensors(os.path.join(a.out, a.model + "_init.safetensors"),
                     {k: v.numpy() for k, v in init_sd.items()})
    save_safetensors(os.path.join(a.out, a.model + "_golden.safetensors"), g, {"script_sha256": script_sha})
    loss = r64["loss"][0]
    worst = max((float(v), k) for k, v in g.items() if k.startswith("err."))
    print("%s: loss %.6f, %d params; PyTorch fp32 vs fp64: worst %.3g (%s)" %
          (a.model, loss, sum(p.numel() for p in model.parameters()), worst[0], worst[1][4:]))


if __name__ == "__main__":
    main()
