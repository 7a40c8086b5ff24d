#!/usr/bin/env python3
"""image_fixtures.py OUTDIR: test images and PIL/torchvision's answers for test_image.c.

Writes OUTDIR/manifest.txt with one line per check:
  decode NAME FILE W H             FILE decoded; NAME.rgb / NAME.l = PIL's convert("RGB"/"L")
  eval NAME FILE RESIZE SIZE       NAME.out = Resize(RESIZE) + CenterCrop(SIZE) on convert("RGB")
  box NAME FILE TOP LEFT H W SIZE FLIP   NAME.out = resized_crop(...) (+ hflip)
  bad FILE WHAT                    PIL refuses FILE (WHAT: a word the message should contain)
Images are made from scikit-image's photographs (python3-skimage) when installed, else
from a synthetic pattern; PNGs of every colour type and bit depth are written by hand
(PIL cannot write 16-bit colour, low bit depths or Adam7 interlacing).
"""
import os
import warnings
import struct
import sys
import zlib

import numpy as np
from PIL import Image
import torchvision.transforms as T
import torchvision.transforms.functional as F

warnings.simplefilter("ignore")  # PIL's note about palette transparency
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
lines = []
SK = "/usr/lib/python3/dist-packages/skimage/data"


def photo():
    p = os.path.join(SK, "chelsea.png")
    if os.path.exists(p):
        return Image.open(p).convert("RGB")
    y, x = np.mgrid[0:300, 0:451]
    a = np.stack([(x * 255 // 450), (y * 255 // 299), ((x + y) * 7) % 256], -1).astype(np.uint8)
    return Image.fromarray(a, "RGB")


def save_raw(name, im):
    with open(os.path.join(out, name), "wb") as f:
        f.write(im.tobytes())


def decode_entry(name, fname):
    im = Image.open(os.path.join(out, fname))
    save_raw(name + ".rgb", im.convert("RGB"))
    save_raw(name + ".l", Image.open(os.path.join(out, fname)).convert("L"))
    lines.append(f"decode {name} {fname} {im.size[0]} {im.size[1]}")


def chunk(t, data):
    c = struct.pack(">I", len(data)) + t + data
    return c + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)


def pack_row(vals, depth):
    if depth == 16:
        return b"".join(struct.pack(">H", int(v)) for v in vals)
    if depth == 8:
        return bytes(int(v) for v in vals)
    per = 8 // depth
    outb = bytearray()
    for i in range(0, len(vals), per):
        b = 0
        for j in range(per):
            v = int(vals[i + j]) if i + j < len(vals) else 0
            b |= v << (8 - depth * (j + 1))
        outb.append(b)
    return bytes(outb)


def write_png(fname, arr, ct, depth, interlace=False, plte=None, trns=None):
    """arr: h x w x samples (ints in range of depth)."""
    h, w = arr.shape[:2]
    arr = arr.reshape(h, w, -1)
    raw = bytearray()
    if not interlace:
        for y in range(h):
            raw += b"\0" + pack_row(arr[y].reshape(-1), depth)
    else:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        for x0, y0, dx, dy in passes:
            for y in range(y0, h, dy):
                row = arr[y, x0::dx]
                if row.shape[0] == 0:
                    continue
                raw += b"\0" + pack_row(row.reshape(-1), depth)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ct, 0, 0, 1 if interlace else 0))
    if plte is not None:
        data += chunk(b"PLTE", bytes(plte))
    if trns is not None:
        data += chunk(b"tRNS", trns)
    data += chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b"")
    with open(os.path.join(out, fname), "wb") as f:
        f.write(data)


rng = np.random.default_rng(7)
ph = photo()
# ---- JPEG variants
ph.save(os.path.join(out, "p420.jpg"), quality=90)
ph.save(os.path.join(out, "p444.jpg"), quality=90, subsampling=0)
ph.save(os.path.join(out, "p422.jpg"), quality=85, subsampling=1)
ph.save(os.path.join(out, "prog.jpg"), quality=90, progressive=True)
ph.convert("L").save(os.path.join(out, "gray.jpg"), quality=90)
ph.convert("CMYK").save(os.path.join(out, "cmyk.jpg"), quality=90)
ph.resize((37, 23)).save(os.path.join(out, "odd.jpg"), quality=95)
ph.crop((0, 0, 500 if ph.size[0] >= 500 else ph.size[0], 200)).save(os.path.join(out, "wide.jpg"), quality=90)
for n in ["p420", "p444", "p422", "prog", "gray", "cmyk", "odd", "wide"]:
    decode_entry(n, n + ".jpg")
# ---- PNG: every colour type and bit depth
a8 = np.asarray(ph.resize((61, 43)))
g8 = np.asarray(ph.resize((61, 43)).convert("L"))
write_png("rgb8.png", a8, 2, 8)
write_png("rgb16.png", a8.astype(np.uint32) * 257 + rng.integers(0, 256, a8.shape), 2, 16)
write_png("rgba8.png", np.concatenate([a8, rng.integers(0, 256, a8.shape[:2] + (1,))], -1), 6, 8)
write_png("rgba16.png", np.concatenate([a8, rng.integers(0, 256, a8.shape[:2] + (1,))], -1).astype(np.uint32) * 257, 6, 16)
write_png("l8.png", g8, 0, 8)
write_png("l16.png", (g8.astype(np.uint32) * 3) % 65536, 0, 16)  # values above 255: PIL clips
write_png("l1.png", g8 > 128, 0, 1)
write_png("l2.png", g8 >> 6, 0, 2)
write_png("l4.png", g8 >> 4, 0, 4)
write_png("la8.png", np.stack([g8, 255 - g8], -1), 4, 8)
write_png("la16.png", np.stack([g8, 255 - g8], -1).astype(np.uint32) * 257, 4, 16)
pal = rng.integers(0, 256, (16, 3)).reshape(-1)
write_png("p4.png", g8 >> 4, 3, 4, plte=pal, trns=bytes(range(0, 160, 10)))
write_png("p8.png", g8 >> 4, 3, 8, plte=pal)
write_png("p1.png", g8 > 100, 3, 1, plte=[255, 0, 0, 0, 0, 255])
write_png("l8trns.png", g8, 0, 8, trns=struct.pack(">H", 77))
write_png("rgb8i.png", a8, 2, 8, interlace=True)
write_png("l16i.png", g8.astype(np.uint32) * 2, 0, 16, interlace=True)
ph.save(os.path.join(out, "pil.png"))
for n in ["rgb8", "rgb16", "rgba8", "rgba16", "l8", "l16", "l1", "l2", "l4", "la8", "la16", "p4", "p8", "p1",
          "l8trns", "rgb8i", "l16i", "pil"]:
    decode_entry(n, n + ".png")
# a PNG named .jpg: decoded by content, as PIL does
with open(os.path.join(out, "pngnamed.jpg"), "wb") as f:
    f.write(open(os.path.join(out, "pil.png"), "rb").read())
decode_entry("pngnamed", "pngnamed.jpg")
# ---- torchvision transforms
def tv_eval(name, fname, resize, size):
    im = Image.open(os.path.join(out, fname)).convert("RGB")
    r = T.Compose([T.Resize(resize), T.CenterCrop(size)])(im)
    save_raw(name + ".out", r)
    lines.append(f"eval {name} {fname} {resize} {size}")

tv_eval("e_p420_256", "p420.jpg", 256, 224)
tv_eval("e_p420_64", "p420.jpg", 64, 56)
tv_eval("e_p420_300", "p420.jpg", 300, 224)
tv_eval("e_p420_pad", "p420.jpg", 150, 200)   # centre crop larger than the short side
tv_eval("e_rgb8", "rgb8.png", 32, 28)
tv_eval("e_odd_up", "odd.jpg", 64, 56)         # upsampling
tv_eval("e_gray", "gray.jpg", 256, 224)


def tv_box(name, fname, top, left, h, w, size, flip):
    im = Image.open(os.path.join(out, fname)).convert("RGB")
    r = F.resized_crop(im, top, left, h, w, [size, size], T.InterpolationMode.BILINEAR)
    if flip:
        r = F.hflip(r)
    save_raw(name + ".out", r)
    lines.append(f"box {name} {fname} {top} {left} {h} {w} {size} {int(flip)}")

tv_box("b1", "p420.jpg", 10, 20, 200, 300, 224, False)
tv_box("b2", "p420.jpg", 0, 0, 300, 451, 224, True)
tv_box("b3", "p420.jpg", 123, 77, 31, 45, 224, False)   # upsampling crop
tv_box("b4", "p420.jpg", 5, 3, 290, 17, 64, True)       # thin
tv_box("b5", "rgb8.png", 1, 2, 40, 50, 28, False)
# ---- bad files (PIL refuses them)
data = open(os.path.join(out, "p420.jpg"), "rb").read()
open(os.path.join(out, "trunc.jpg"), "wb").write(data[: len(data) // 2])
open(os.path.join(out, "noeoi.jpg"), "wb").write(data[:-2])
open(os.path.join(out, "text.jpg"), "wb").write(b"this is not an image, just text\n")
open(os.path.join(out, "empty.jpg"), "wb").write(b"")
pdata = open(os.path.join(out, "rgb8.png"), "rb").read()
open(os.path.join(out, "trunc.png"), "wb").write(pdata[: len(pdata) - 40])
open(os.path.join(out, "garbage_tail.jpg"), "wb").write(data + b"trailing junk")  # PIL accepts
decode_entry("garbage_tail", "garbage_tail.jpg")
for f, what in [("trunc.jpg", "truncated"), ("noeoi.jpg", "truncated"), ("text.jpg", "not an image"),
                ("empty.jpg", "empty"), ("trunc.png", "truncated")]:
    try:
        Image.open(os.path.join(out, f)).convert("RGB")
        sys.exit(f"PIL decoded {f}")
    except Exception:
        lines.append(f"bad {f} {what}")
with open(os.path.join(out, "manifest.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
