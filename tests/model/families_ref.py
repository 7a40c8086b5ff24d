#!/usr/bin/python3
"""families_ref.py: PyTorch reference for test_net_torch, a small net that uses every node
kind the new model families need (issue #24).

The net (torch NCHW here, the runner's NHWC there; node indices are the runner's):
   0 conv stem 3->8 3x3 + bias        1 bn_relu stem_bn (pre-activation; feeds 2 and 7)
   2 conv b1.conv1 8->8 3x3 groups 2  3 bn_relu6 b1.bn1         4 dropout p=0.25
   5 conv b1.dw 8->8 depthwise 3x3    6 bn b1.bn2 (no act)      7 add 6 + 1 (no relu)
   8 relu6                            9 maxpool 2x2 stride 2 pad 0 (12x12 -> 6x6)
  10 conv b2.expand 8->16 1x1        11 bn_relu6 b2.bn1        12 conv b2.dw 16 depthwise 3x3 stride 2
  13 bn_relu6 b2.bn2                 14 conv b2.project 16->8 1x1 groups 4 + bias (no BN after it,
                                        so its bias gradient is not cancelled as the stem's is)
  15 adaptive avgpool 3x3 -> 2x2 (overlapping windows)       16 linear fc1 (flattens 2x2x8 -> 12)
  17 relu                            18 dropout p=0.5 (2-D)     19 linear fc2 12 -> 5
Dropout masks are injected: this script computes them with its own numpy Philox4x32-10 from
the key layout util/dropout.h documents (seed, epoch, sample = FIRST + i * STRIDE, node,
element in NHWC order), so the test also checks that the C mask function is what the
document says. The scale is torch's: mask.float().div_(1 - p).

Writes OUT/families_init.safetensors (the init, torchvision-style names; fc1.weight with
its columns in the runner's NHWC flattening order) and OUT/families_gold.safetensors:
input (NHWC), labels, and from a train-mode forward + backward of the mean cross-entropy
(label smoothing 0.1) in float64: logits, grad.<param> (fc1's permuted like its weight),
fwd.<buffer> (BN running stats after the forward), mask.4 / mask.18 (NHWC, 0/1), flops
(per sample); and err.<key>, PyTorch's own fp32 error on each as an absolute L2 norm
||fp32 - fp64|| (absolute, because the stem's bias gradient is ~0: BN cancels it). The
seed is the first from SEED whose draw is well conditioned: every relu/relu6 input and
maxpool runner-up at least MARGIN from its kink in fp64, so no correct fp32 implementation
switches one.
Usage: families_ref.py --out DIR [--if-missing]
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
from make_fixtures import save_safetensors  # noqa: E402

SEED, BATCH, SIZE, CLASSES = 7, 4, 12, 5
KEY = dict(seed=0x1234_5678_9ABC, epoch=3, first=5, stride=2)   # as test_net_torch.c sets
DROP = {4: 0.25, 18: 0.5}
SMOOTHING = 0.1
MARGIN = 1e-5
VERSION = "2"
STREAM_DROPOUT = 8
M32 = np.uint64(0xFFFFFFFF)


def philox(k0, k1, c0, c1, c2, c3):
    """Philox4x32-10 on uint64 arrays holding 32-bit values (util/rng.h)."""
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & M32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & M32)
        k0 = (k0 + np.uint64(0x9E3779B9)) & M32
        k1 = (k1 + np.uint64(0xBB67AE85)) & M32
    return c0, c1, c2, c3


def dropout_mask(node, p, n, per):
    """Keep mask (n, per) of dropout node `node` for rows 0..n-1, elements in NHWC order."""
    seed, epoch = KEY["seed"], KEY["epoch"]
    k0 = (seed & 0xFFFFFFFF) ^ ((STREAM_DROPOUT * 0x9E3779B9) & 0xFFFFFFFF)
    k1 = (seed >> 32) ^ 0x85EBCA6B
    thresh = int(p * 4294967296.0)
    out = np.zeros((n, per), dtype=np.float64)
    nblk = (per + 3) // 4
    for i in range(n):
        sample = KEY["first"] + i * KEY["stride"]
        c0 = np.arange(nblk, dtype=np.uint64)
        c1 = np.full(nblk, sample & 0xFFFFFFFF, dtype=np.uint64)
        c2 = np.full(nblk, epoch & 0xFFFFFFFF, dtype=np.uint64)
        c3 = np.full(nblk, (node & 0xFFFF) | (((epoch >> 32) & 0xFF) << 16) | (STREAM_DROPOUT << 24),
                     dtype=np.uint64)
        words = np.stack(philox(k0, k1, c0, c1, c2, c3), axis=1).reshape(-1)[:per]
        out[i] = (words >= thresh).astype(np.float64)
    return out


def bn_params(g, name, c):
    g[name + ".weight"] = 1.0 + 0.2 * torch.randn(c, dtype=torch.float64)
    g[name + ".bias"] = 0.2 * torch.randn(c, dtype=torch.float64)
    g[name + ".running_mean"] = torch.zeros(c, dtype=torch.float64)
    g[name + ".running_var"] = torch.ones(c, dtype=torch.float64)


def init(seed):
    torch.manual_seed(seed)
    g = {}

    def conv(name, cout, cin_g, k, bias=False):
        g[name + ".weight"] = torch.randn(cout, cin_g, k, k, dtype=torch.float64) / (cin_g * k * k) ** 0.5
        if bias:
            g[name + ".bias"] = 0.5 * torch.randn(cout, dtype=torch.float64)

    conv("stem", 8, 3, 3, bias=True)
    bn_params(g, "stem_bn", 8)
    conv("b1.conv1", 8, 4, 3)
    bn_params(g, "b1.bn1", 8)
    conv("b1.dw", 8, 1, 3)
    bn_params(g, "b1.bn2", 8)
    conv("b2.expand", 16, 8, 1)
    bn_params(g, "b2.bn1", 16)
    conv("b2.dw", 16, 1, 3)
    bn_params(g, "b2.bn2", 16)
    conv("b2.project", 8, 4, 1, bias=True)
    g["fc1.weight"] = torch.randn(12, 32, dtype=torch.float64) / 32 ** 0.5
    g["fc1.bias"] = 0.1 * torch.randn(12, dtype=torch.float64)
    g["fc2.weight"] = torch.randn(CLASSES, 12, dtype=torch.float64) / 12 ** 0.5
    g["fc2.bias"] = 0.1 * torch.randn(CLASSES, dtype=torch.float64)
    x = torch.randn(BATCH, 3, SIZE, SIZE, dtype=torch.float64)
    labels = torch.randint(0, CLASSES, (BATCH,))
    return g, x, labels


def forward(p, x, masks, kinks):
    """The net in torch; p: params and buffers (dtype of x), updated in place (running
    stats); kinks collects (relu/relu6 inputs, maxpool margins) for the conditioning check."""
    def bn(h, name):
        return F.batch_norm(h, p[name + ".running_mean"], p[name + ".running_var"], p[name + ".weight"],
                            p[name + ".bias"], training=True, momentum=0.1, eps=1e-5)

    def relu6(h):
        kinks.append(h.detach())
        kinks.append(h.detach() - 6)
        return F.relu6(h)

    def relu(h):
        kinks.append(h.detach())
        return F.relu(h)

    def drop(h, node):
        noise = masks[node].to(h.dtype, copy=True).div_(1 - DROP[node])
        return h * noise

    a = relu(bn(F.conv2d(x, p["stem.weight"], p["stem.bias"], padding=1), "stem_bn"))
    h = relu6(bn(F.conv2d(a, p["b1.conv1.weight"], padding=1, groups=2), "b1.bn1"))
    h = drop(h, 4)
    h = bn(F.conv2d(h, p["b1.dw.weight"], padding=1, groups=8), "b1.bn2")
    h = relu6(h + a)
    t = h.detach().unfold(2, 2, 2).unfold(3, 2, 2).reshape(*h.shape[:2], 6, 6, 4)
    top2 = t.topk(2, dim=-1).values
    live = (top2[..., 0] > 0) & (top2[..., 0] < 6)   # a clamped maximum ties exactly
    kinks.append((top2[..., 0] - top2[..., 1])[live])
    h = F.max_pool2d(h, 2, 2)
    h = relu6(bn(F.conv2d(h, p["b2.expand.weight"]), "b2.bn1"))
    h = relu6(bn(F.conv2d(h, p["b2.dw.weight"], stride=2, padding=1, groups=16), "b2.bn2"))
    h = F.conv2d(h, p["b2.project.weight"], p["b2.project.bias"], groups=4)
    h = F.adaptive_avg_pool2d(h, (2, 2))
    h = relu(F.linear(torch.flatten(h, 1), p["fc1.weight"], p["fc1.bias"]))
    h = drop(h, 18)
    return F.linear(h, p["fc2.weight"], p["fc2.bias"])


def nhwc_columns(w):
    """fc1's [12, 32] weight (or gradient) with columns from NCHW (c, h, w) order to the
    runner's NHWC (h, w, c) flattening of the 2x2x8 map."""
    return w.reshape(12, 8, 2, 2).permute(0, 2, 3, 1).reshape(12, 32)


def run(g, x, labels, masks, dtype):
    p = {k: v.to(dtype).clone() for k, v in g.items()}
    params = [k for k in p if not k.endswith(("running_mean", "running_var"))]
    for k in params:
        p[k].requires_grad_(True)
    kinks = []
    logits = forward(p, x.to(dtype), masks, kinks)
    loss = F.cross_entropy(logits, labels, label_smoothing=SMOOTHING)
    grads = torch.autograd.grad(loss, [p[k] for k in params])
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for k, gr in zip(params, grads):
        out["grad." + k] = nhwc_columns(gr) if k == "fc1.weight" else gr
    for k in p:
        if k.endswith(("running_mean", "running_var")):
            out["fwd." + k] = p[k]
    return out, kinks


def flops():
    """Forward FLOPs per sample (2 x MACs of convs and linears; net_forward_flops)."""
    convs = [(12 * 12, 8, 3 * 9), (12 * 12, 8, 4 * 9), (12 * 12, 8, 9), (6 * 6, 16, 8),
             (3 * 3, 16, 9), (3 * 3, 8, 4)]   # (output pixels, out channels, in/groups * k * k)
    return sum(2 * px * k * kin for px, k, kin in convs) + 2 * (32 * 12 + 12 * CLASSES)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--if-missing", action="store_true")
    a = ap.parse_args()
    init_path = os.path.join(a.out, "families_init.safetensors")
    gold_path = os.path.join(a.out, "families_gold.safetensors")
    stamp = os.path.join(a.out, "families.version")
    if a.if_missing and os.path.exists(gold_path) and os.path.exists(stamp) and open(stamp).read() == VERSION:
        return 0
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(1)
    m4 = dropout_mask(4, DROP[4], BATCH, SIZE * SIZE * 8)
    m18 = dropout_mask(18, DROP[18], BATCH, 12)
    masks = {4: torch.from_numpy(m4).reshape(BATCH, SIZE, SIZE, 8).permute(0, 3, 1, 2),
             18: torch.from_numpy(m18)}
    for seed in range(SEED, SEED + 100):
        g, x, labels = init(seed)
        ref, kinks = run(g, x, labels, masks, torch.float64)
        margin = min(float(k.abs().min()) for k in kinks)
        if margin >= MARGIN:
            break
    else:
        sys.exit("families_ref.py: no well-conditioned draw among seeds %d..%d" % (SEED, SEED + 99))
    f32, _ = run(g, x, labels, masks, torch.float32)
    gold = {"input": x.permute(0, 2, 3, 1).numpy().astype(np.float32),
            "labels": labels.numpy().astype(np.int64),
            "mask.4": m4.astype(np.float32), "mask.18": m18.astype(np.float32),
            "flops": np.array([flops()], dtype=np.float32)}
    for k, v in ref.items():
        gold[k] = v.numpy().astype(np.float32)
        gold["err." + k] = np.array([float((f32[k].double() - v).norm())], dtype=np.float32)
    sd = {k: (nhwc_columns(v) if k == "fc1.weight" else v).numpy().astype(np.float32) for k, v in g.items()}
    for k in [k for k in g if k.endswith(".running_mean")]:
        sd[k[: -len("running_mean")] + "num_batches_tracked"] = np.array(0, dtype=np.int64)
    save_safetensors(init_path, sd)
    save_safetensors(gold_path, gold, {"kink_margin": "%.3g" % margin, "seed": str(seed)})
    with open(stamp, "w") as f:
        f.write(VERSION)
    print("families_ref.py: wrote %s and %s (seed %d, kink margin %.3g)" % (init_path, gold_path, seed, margin))
    return 0


if __name__ == "__main__":
    sys.exit(main())
