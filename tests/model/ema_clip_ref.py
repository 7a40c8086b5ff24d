#!/usr/bin/python3
"""ema_clip_ref.py: the reference numbers test_ema_clip.c checks, printed with PyTorch
(Debian's 1.13) on the same inputs the C test builds.

EMA: timm's ModelEmaV3 (timm/utils/model_ema.py) as timm's train.py drives it:
get_decay(step) with update_after_step 0 and min_decay 0, then every floating-point
entry moves by ema.lerp_(model, weight=1 - decay) (the non-foreach path; the foreach
path is torch._foreach_lerp_ with the same formula). The formula is written out here
from timm's source because timm is not packaged in Debian.

Clipping: torch.nn.utils.clip_grad_norm_ itself, on gradients split into tensors the way
a net's parameters are (sizes below), max_norm 1.0.

Run: /usr/bin/python3 tests/model/ema_clip_ref.py
"""
import torch


def get_decay(step, decay, use_warmup, gamma=1.0, power=2 / 3):
    step = max(0, step - 0 - 1)
    if step <= 0:
        return 0.0
    if use_warmup:
        d = 1 - (1 + step / gamma) ** -power
        return max(min(d, decay), 0.0)
    return decay


print("decay schedule")
for (dec, warm, gamma, power) in [(0.9998, False, 1.0, 2 / 3), (0.9998, True, 1.0, 2 / 3),
                                  (0.999, True, 2.0, 0.75)]:
    vals = [get_decay(s, dec, warm, gamma, power) for s in (1, 2, 3, 10, 1000, 100000)]
    print(dec, warm, gamma, power, ", ".join("%.17g" % v for v in vals))

# EMA over 4 updates of 6 values; model values per step below; decay 0.9 with warmup off,
# then 0.9998 with warmup on (gamma 1, power 2/3)
model = torch.tensor([[0.5, -1.25, 2.0, 0.0, 3.5e-3, 1000.0],
                      [0.25, -1.0, 2.5, 1e-3, 3.0e-3, -1000.0],
                      [0.125, -0.5, 3.0, -1e-3, 2.5e-3, 999.0],
                      [0.0625, 0.5, 3.5, 2e-3, 2.0e-3, 998.0]], dtype=torch.float32)
for (dec, warm) in [(0.9, False), (0.9998, True)]:
    ema = torch.tensor([7.0, 7.0, 7.0, 7.0, 7.0, 7.0], dtype=torch.float32)   # deepcopy at start
    for step in range(1, 5):
        d = get_decay(step, dec, warm)
        ema.lerp_(model[step - 1], weight=1.0 - d)
    print("ema", dec, warm, ", ".join("%.9g" % v for v in ema.tolist()))

# clipping: 100000 gradients g[i] = ((i * 7919) % 2001 - 1000) / 1000 * 0.01, split in
# tensors of these sizes (a few chunks of the CPU backend's 32768)
n = 100000
i = torch.arange(n, dtype=torch.int64)
g = (((i * 7919) % 2001 - 1000).to(torch.float32) / 1000.0) * 0.01
sizes = [432, 16, 16, 2304, 16, 16, 37000, 60016, 184]
assert sum(sizes) == n
params = []
off = 0
for s in sizes:
    p = torch.nn.Parameter(torch.zeros(s))
    p.grad = g[off:off + s].clone()
    params.append(p)
    off += s
total = torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
flat = torch.cat([p.grad for p in params])
print("clip total_norm %.9g" % total.item())
for k in (0, 1, 7, 32767, 32768, 65537, 99999):
    print("clip g[%d] %.9g -> %.9g" % (k, g[k].item(), flat[k].item()))
