#!/usr/bin/python3
"""aug_vs_reference.py: the runner's issue-17 data recipe against its references, on the
same inputs (driven through tests/data/aug_tool.c):

  * every RandAugment / TrivialAugmentWide op at several magnitude bins, both signs, on
    uint8 images of three shapes against torchvision 0.14's own _apply_op (its tensor
    functional ops: affine/rotate nearest, adjust_brightness/contrast/saturation/
    sharpness, posterize, solarize, autocontrast, equalize), fed the magnitude the runner
    resolved: EXACT, every pixel; for the geometric ops a pixel may differ only where
    torchvision's own float32 sampling grid (a BLAS bmm, whose last bits depend on the
    CPU's kernels) puts a source coordinate on a rounding boundary: moving that grid by
    1e-4 px gives the runner's value there (at most 1% of the values; none on AVX2 kernels);
  * the magnitude tables against torch.linspace on this CPU: exact on an AVX2 torch (the
    runner follows its 8-wide vector path); an AVX-512 torch may differ by 1 ulp in a few
    entries, which is reported and allowed;
  * random erasing against timm's RandomErasing._erase written out here from its formulas,
    fed the same raw draws (the Philox u32 stream the runner uses, read through the same
    uniform / randint adapters): the same boxes, the fill rule per mode (const: 0, rand: one
    value per channel, pixel: a value per element, ~N(0, 1)), nothing outside the boxes;
  * mixup / cutmix against timm's Mixup formulas written out here (batch, pair, elem modes;
    lam, the flip permutation and the box centres fed to both): the mixed batch and the soft
    targets, exact;
  * the CPU backend's soft-target cross-entropy against torch (timm's SoftTargetCrossEntropy:
    sum(-t * log_softmax(x)), autograd's gradient times grad_scale * loss_scale) within
    float tolerance, and its top-1/top-5 against the dominant label.

Exits 77 when torch/torchvision are missing.
"""
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.autoaugment import _apply_op
    try:
        import torchvision.transforms._functional_tensor as F_t   # torchvision >= 0.15
    except ImportError:
        import torchvision.transforms.functional_tensor as F_t    # Debian's 0.14
except Exception as exc:  # noqa: BLE001
    print(f"skipped: {exc}")
    sys.exit(77)

TOOL = sys.argv[1]
OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
       "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]
HAS_BINS = {i for i, n in enumerate(OPS) if n not in ("Identity", "AutoContrast", "Equalize")}
SIGNED = set(range(1, 10))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run_tool(tmp, lines):
    path = os.path.join(tmp, "cmds.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    out = subprocess.run([TOOL, path], check=True, capture_output=True, text=True).stdout
    return out.split("\n")


def cpu_capability():
    for line in torch.__config__.show().splitlines():
        if "CPU capability" in line:
            return line.strip()
    return "CPU capability unknown"


def torch_tables(kind, h, w):
    """torchvision's magnitude tables (op index -> tensor of 31 values)."""
    from torchvision.transforms import RandAugment, TrivialAugmentWide
    if kind == 1:
        space = RandAugment()._augmentation_space(31, (h, w))
    else:
        space = TrivialAugmentWide()._augmentation_space(31)
    return {OPS.index(name): mags for name, (mags, _) in space.items()}


def test_tables(tmp):
    ulps = 0
    for kind in (1, 2):
        for (h, w) in ((32, 32), (28, 20), (224, 224)):
            out = run_tool(tmp, [f"mag {kind} {h} {w}"])
            ref = torch_tables(kind, h, w)
            for line in out:
                parts = line.split()
                if len(parts) != 3:
                    continue
                op, b, v = int(parts[0]), int(parts[1]), float(parts[2])
                r = float(ref[op][b].item())
                if np.float32(v) != np.float32(r):
                    d = abs(int(np.float32(v).view(np.int32)) - int(np.float32(r).view(np.int32)))
                    check(d <= 1, f"table kind {kind} {h}x{w} {OPS[op]}[{b}]: {v} vs torch {r}")
                    ulps += 1
    print(f"magnitude tables: {ulps} entries 1 ulp from this torch's linspace "
          f"(0 expected on an AVX2 torch; {cpu_capability()})")


GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
# How far (pixels) torchvision's sampling grid is moved to find the pixels whose nearest
# source pixel rounding decides: the grid comes from a float32 bmm, whose last bits depend
# on the BLAS kernels of the CPU (OpenBLAS's SSE2-era Nehalem kernels flip 3 pixels of a
# ShearY against the AVX2 ones); 1e-4 px is ~100x that rounding on these sizes.
GRID_EPS_PX = 1e-4


def shifted_refs(t, op, mag):
    """The reference with torchvision's affine grid moved by +-GRID_EPS_PX in x and y."""
    orig = F_t._gen_affine_grid
    refs = []
    try:
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                if dx == 0 and dy == 0:
                    continue

                def moved(theta, w, h, ow, oh, dx=dx, dy=dy):
                    g = orig(theta, w, h, ow, oh)
                    off = torch.tensor([dx * 2 * GRID_EPS_PX / w, dy * 2 * GRID_EPS_PX / h], dtype=g.dtype)
                    return g + off
                F_t._gen_affine_grid = moved
                refs.append(_apply_op(t, op, float(mag), InterpolationMode.NEAREST, None).permute(1, 2, 0).numpy())
    finally:
        F_t._gen_affine_grid = orig
    return refs


def test_ops(tmp):
    rng = np.random.default_rng(17)
    cases, lines = [], []
    shapes = [(3, 32, 32), (3, 28, 20), (1, 24, 24)]
    for si, (c, h, w) in enumerate(shapes):
        imgs = [rng.integers(0, 256, (h, w, c), dtype=np.uint8)]
        # a low-contrast image (autocontrast / equalize / solarize see narrow histograms)
        imgs.append(rng.integers(90, 140, (h, w, c), dtype=np.uint8))
        for ii, img in enumerate(imgs):
            src = os.path.join(tmp, f"in{si}_{ii}.raw")
            img.tofile(src)
            for kind in (1, 2):
                for op in range(14):
                    bins = (0, 4, 9, 17, 25, 30) if op in HAS_BINS else (0,)
                    for b in bins:
                        for neg in ((0, 1) if op in SIGNED else (0,)):
                            dst = os.path.join(tmp, f"out{len(cases)}.raw")
                            lines.append(f"aa {kind} {h} {w} {c} {op} {b} {neg} {src} {dst}")
                            cases.append((img, kind, op, b, neg, dst))
    out = [l for l in run_tool(tmp, lines) if l and l != "ok"]
    check(len(out) == len(cases), f"aa: {len(out)} answers for {len(cases)} cases")
    worst = {}
    for (img, kind, op, b, neg, dst), mag in zip(cases, out):
        h, w, c = img.shape
        got = np.fromfile(dst, dtype=np.uint8).reshape(h, w, c)
        t = torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous()
        ref = _apply_op(t, OPS[op], float(mag), InterpolationMode.NEAREST, None).permute(1, 2, 0).numpy()
        diff = np.abs(got.astype(int) - ref.astype(int))
        key = OPS[op]
        worst.setdefault(key, [0, 0, 0, 0])
        worst[key][0] += 1
        worst[key][1] += int((diff > 0).sum())
        worst[key][2] = max(worst[key][2], int(diff.max()))
        if diff.max() > 0 and key in GEOMETRIC:
            # a differing pixel passes only where moving torchvision's grid by rounding-sized
            # amounts gives the runner's value (a source coordinate on a rounding boundary);
            # a wrong transform differs at pixels no such move reaches
            alt = shifted_refs(t, OPS[op], mag)
            boundary = np.zeros(diff.shape, bool)
            for r in alt:
                boundary |= got == r
            unexplained = (diff > 0) & ~boundary
            worst[key][3] += int(((diff > 0) & boundary).sum())
            check(not unexplained.any() and (diff > 0).sum() <= 0.01 * diff.size,
                  f"{key} kind {kind} bin {b} neg {neg} magnitude {mag} on {h}x{w}x{c}: "
                  f"{int((diff > 0).sum())} values differ, max {int(diff.max())}, "
                  f"{int(unexplained.sum())} of them not on a rounding boundary of the sampling grid")
        else:
            check(diff.max() == 0, f"{key} kind {kind} bin {b} neg {neg} magnitude {mag} on {h}x{w}x{c}: "
                                   f"{int((diff > 0).sum())} values differ, max {int(diff.max())}")
    for key, (n, bad, mx, edge) in worst.items():
        print(f"  {key:13s} {n:3d} cases, {bad} differing values, max |diff| {mx}"
              + (f" ({edge} on a rounding boundary of the sampling grid)" if key in GEOMETRIC else ""))


class Draws:
    """The runner's Philox u32 stream read as timm's random.random() / random.randint()."""

    def __init__(self, words):
        self.w = list(words)
        self.i = 0

    def u32(self):
        v = self.w[self.i]
        self.i += 1
        return v

    def random(self):   # rng_uniform_f64
        hi, lo = self.u32() >> 5, self.u32() >> 6
        return (hi * 67108864.0 + lo) / 9007199254740992.0

    def randint(self, a, b):   # a + rng_below(b - a + 1), Lemire's method
        n = b - a + 1
        m = self.u32() * n
        low = m & 0xFFFFFFFF
        if low < n:
            t = ((1 << 32) - n) % n
            while low < t:
                m = self.u32() * n
                low = m & 0xFFFFFFFF
        return a + (m >> 32)


def timm_erase_boxes(r, prob, count_max, h, w):
    """timm RandomErasing._erase's box choice (min_area 0.02, max_area 1/3, aspect 0.3..1/0.3)."""
    if r.random() > prob:
        return []
    area = h * w
    count = r.randint(1, count_max) if count_max > 1 else count_max
    log_ratio = (math.log(0.3), math.log(1 / 0.3))
    boxes = []
    for _ in range(count):
        for _attempt in range(10):
            target_area = (0.02 + (1 / 3 - 0.02) * r.random()) * area / count
            aspect = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * r.random())
            bh = int(round(math.sqrt(target_area * aspect)))
            bw = int(round(math.sqrt(target_area / aspect)))
            if bw < w and bh < h:
                top = r.randint(0, h - bh)
                left = r.randint(0, w - bw)
                boxes.append((top, left, bh, bw))
                break
    return boxes


def test_erasing(tmp):
    seed, epoch = 11, 3
    n_erased = 0
    pixel_values = []
    for mode in (0, 1, 2):
        for index in range(40):
            for (h, w, c, prob, count) in ((32, 32, 3, 0.5, 1), (24, 40, 1, 1.0, 3)):
                dst = os.path.join(tmp, f"er{mode}_{index}_{h}.raw")
                out = run_tool(tmp, [f"u32 {seed} {epoch} {index} 131072 256",
                                     f"erase {seed} {epoch} {index} {prob} {mode} {count} {h} {w} {c} {dst}"])
                words = [int(x) for x in out[0].split()]
                boxes = timm_erase_boxes(Draws(words), prob, count, h, w)
                check(int(out[2]) == len(boxes), f"erasing {index}: {out[2]} boxes, timm {len(boxes)}")
                img = np.fromfile(dst, dtype=np.float32).reshape(h, w, c)
                mask = np.zeros((h, w), dtype=bool)
                for (t, l, bh, bw) in boxes:
                    mask[t:t + bh, l:l + bw] = True
                erased = ~np.isnan(img[..., 0])
                check((erased == mask).all(), f"erasing mode {mode} index {index}: box pixels differ from timm's "
                                              f"{boxes}")
                n_erased += bool(boxes)
                if not boxes:
                    continue
                last = boxes[-1]
                region = img[last[0]:last[0] + last[2], last[1]:last[1] + last[3]]
                if mode == 0:
                    check((region == 0).all(), "const mode fills zeros")
                elif mode == 1:
                    check(all(np.unique(region[..., k]).size == 1 for k in range(c)), "rand mode: one value per "
                                                                                       "channel")
                elif region.size > 1:
                    check(np.unique(region).size == region.size, "pixel mode: a value per element")
                    pixel_values.append(region.ravel())
    vals = np.concatenate(pixel_values)
    print(f"erasing: {n_erased} erased images matched timm's boxes; pixel-mode values: n {vals.size}, "
          f"mean {vals.mean():.4f}, std {vals.std():.4f}")
    check(abs(vals.mean()) < 0.05 and abs(vals.std() - 1) < 0.05, "pixel-mode values ~ N(0, 1)")


def timm_mix(x, labels, mode, params, classes, smoothing):
    """timm Mixup (cutmix_minmax None, correct_lam) with the given lam/cut/centre per
    decision instead of numpy draws; x is NCHW float32 (torch)."""
    n, _, h, w = x.shape

    def bbox(lam, cy, cx):
        ratio = np.sqrt(1 - lam)
        cut_h, cut_w = int(h * ratio), int(w * ratio)
        yl, yh = np.clip(cy - cut_h // 2, 0, h), np.clip(cy + cut_h // 2, 0, h)
        xl, xh = np.clip(cx - cut_w // 2, 0, w), np.clip(cx + cut_w // 2, 0, w)
        return (yl, yh, xl, xh), 1. - (yh - yl) * (xh - xl) / float(h * w)

    if mode == 0:
        lam, cut, cy, cx = params[0]
        if lam != 1.:
            if cut:
                (yl, yh, xl, xh), lam = bbox(lam, cy, cx)
                x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
            else:
                x_flipped = x.flip(0).mul_(1. - lam)
                x.mul_(lam).add_(x_flipped)
        lam_t = lam
    else:
        m = n // 2 if mode == 1 else n
        lam_batch = np.array([p[0] for p in params[:m]], dtype=np.float32)
        x_orig = x.clone()
        for i in range(m):
            j = n - i - 1
            lam = lam_batch[i]
            _, cut, cy, cx = params[i]
            if lam != 1.:
                if cut:
                    (yl, yh, xl, xh), lam = bbox(lam, cy, cx)
                    x[i][:, yl:yh, xl:xh] = x_orig[j][:, yl:yh, xl:xh]
                    if mode == 1:
                        x[j][:, yl:yh, xl:xh] = x_orig[i][:, yl:yh, xl:xh]
                    lam_batch[i] = lam
                else:
                    x[i] = x[i] * lam + x_orig[j] * (1 - lam)
                    if mode == 1:
                        x[j] = x[j] * lam + x_orig[i] * (1 - lam)
        if mode == 1:
            lam_batch = np.concatenate((lam_batch, lam_batch[::-1]))
        lam_t = torch.tensor(lam_batch, dtype=x.dtype).unsqueeze(1)
    off = smoothing / classes
    on = 1. - smoothing + off
    t = torch.from_numpy(labels).long().view(-1, 1)
    y1 = torch.full((n, classes), off).scatter_(1, t, on)
    y2 = torch.full((n, classes), off).scatter_(1, t.flip(0), on)
    return x, y1 * lam_t + y2 * (1. - lam_t)


def test_mixup(tmp):
    rng = np.random.default_rng(5)
    n_cases = 0
    for mode in (0, 1, 2):
        for trial in range(12):
            n = 8
            h, w, c, classes = 12, 10, 3, 6
            smoothing = 0.1 if trial % 2 else 0.0
            x = rng.standard_normal((n, h, w, c)).astype(np.float32)
            labels = rng.integers(0, classes, n).astype(np.int32)
            decisions = 1 if mode == 0 else (n // 2 if mode == 1 else n)
            params = []
            for d in range(decisions):
                lam = float(rng.beta(0.4, 0.4)) if (trial + d) % 5 else 1.0
                if mode != 0:
                    lam = float(np.float32(lam))
                params.append((lam, int(rng.random() < 0.5), int(rng.integers(0, h)), int(rng.integers(0, w))))
            xp, lp, pp = (os.path.join(tmp, f"m_{k}.raw") for k in ("x", "l", "p"))
            ox, ot = os.path.join(tmp, "m_ox.raw"), os.path.join(tmp, "m_ot.raw")
            x.tofile(xp)
            labels.tofile(lp)
            with open(pp, "w") as f:
                for p in params:
                    f.write(f"{p[0]!r} {p[1]} {p[2]} {p[3]}\n")
            run_tool(tmp, [f"mix {mode} {n} {h} {w} {c} {classes} {smoothing!r} {xp} {lp} {pp} {ox} {ot}"])
            got_x = np.fromfile(ox, dtype=np.float32).reshape(n, h, w, c)
            got_t = np.fromfile(ot, dtype=np.float32).reshape(n, classes)
            xt = torch.from_numpy(x.copy()).permute(0, 3, 1, 2).contiguous()
            ref_x, ref_t = timm_mix(xt, labels, mode, params, classes, smoothing)
            ref_x = ref_x.permute(0, 2, 3, 1).numpy()
            check(np.array_equal(got_x, ref_x), f"mixup mode {mode} trial {trial}: images differ "
                                                f"(max {np.abs(got_x - ref_x).max()})")
            check(np.array_equal(got_t, ref_t.numpy()), f"mixup mode {mode} trial {trial}: targets differ "
                                                        f"(max {np.abs(got_t - ref_t.numpy()).max()})")
            n_cases += 1
    print(f"mixup/cutmix: {n_cases} batches (batch, pair, elem) equal to timm's formulas bit for bit")


def test_xent(tmp):
    rng = np.random.default_rng(9)
    for (n, classes, gs, ls) in ((6, 10, 1.0 / 6, 1.0), (5, 100, 0.25, 1024.0), (3, 7, 1.0, 1.0)):
        logits = (rng.standard_normal((n, classes)) * 3).astype(np.float32)
        t = rng.random((n, classes)).astype(np.float32)
        t = (t / t.sum(1, keepdims=True)).astype(np.float32)
        t[0] = 0.0
        t[0, 3] = 0.7
        t[0, 5] = 0.3
        lp, tp, op = (os.path.join(tmp, f"x_{k}.raw") for k in ("l", "t", "o"))
        logits.tofile(lp)
        t.tofile(tp)
        run_tool(tmp, [f"xent {n} {classes} {gs!r} {ls!r} {lp} {tp} {op}"])
        out = np.fromfile(op, dtype=np.float32)
        x = torch.from_numpy(logits.astype(np.float64)).requires_grad_()
        loss = torch.sum(-torch.from_numpy(t.astype(np.float64)) * torch.log_softmax(x, dim=-1), dim=-1)
        loss.sum().backward()
        ref_g = (x.grad * gs * ls).numpy()
        got_g = out[3:].reshape(n, classes)
        rel = abs(out[0] - loss.sum().item()) / abs(loss.sum().item())
        gerr = np.abs(got_g - ref_g).max() / (np.abs(ref_g).max())
        check(rel < 1e-6, f"soft CE loss {out[0]} vs torch {loss.sum().item()}")
        check(gerr < 1e-6, f"soft CE gradient off by {gerr} (relative to its largest entry)")
        dom = torch.from_numpy(t).argmax(1)
        top1 = int((torch.from_numpy(logits).argmax(1) == dom).sum())
        top5 = int((torch.from_numpy(logits).topk(min(5, classes), 1).indices == dom[:, None]).any(1).sum())
        check(int(out[1]) == top1 and int(out[2]) == top5, f"soft CE hits {out[1:3]} vs {top1}, {top5}")
        print(f"soft-target CE n {n} classes {classes}: loss rel err {rel:.2e}, gradient rel err {gerr:.2e}, "
              f"top1 {int(out[1])} top5 {int(out[2])}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_tables(tmp)
        test_ops(tmp)
        test_erasing(tmp)
        test_mixup(tmp)
        test_xent(tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
