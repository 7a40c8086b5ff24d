#!/usr/bin/env python3
"""make_images.py OUTDIR [N]: N (default 3000) ImageNet-like JPEGs for the loader benchmark.

Made from the photographs scikit-image ships (Debian python3-skimage,
/usr/lib/python3/dist-packages/skimage/data): each file is a random crop of one photograph
(a quarter to all of it, 4:3 landscape or 3:4 portrait one time in five), resized to
500x375 (or 375x500) with Lanczos, flipped half the time, with a small brightness and
contrast change, saved as baseline JPEG quality 90 with 4:2:0 chroma (PIL's default), as
ImageNet's photos mostly are (average ~400x350, q~90). Files go to
OUTDIR/train/<photo>/<nnnnn>.jpg, so OUTDIR works for both torchvision's ImageFolder and
data.dataset: image_folder. Deterministic (seeded); skips work when OUTDIR/.done says N.
"""
import os
import random
import sys

from PIL import Image, ImageEnhance

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
done = os.path.join(out, ".done")
if os.path.exists(done) and open(done).read().strip() == str(n):
    sys.exit(0)
SK = "/usr/lib/python3/dist-packages/skimage/data"
NAMES = ["astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "ihc.png",
         "motorcycle_left.png", "motorcycle_right.png", "retina.jpg", "rocket.jpg",
         "camera.png", "moon.png"]
photos = [(os.path.splitext(f)[0], Image.open(os.path.join(SK, f)).convert("RGB"))
          for f in NAMES if os.path.exists(os.path.join(SK, f))]
if not photos:
    sys.exit("no photographs in %s: apt-get install python3-skimage" % SK)
rng = random.Random(16)
for i in range(n):
    name, im = photos[i % len(photos)]
    portrait = rng.random() < 0.2
    ow, oh = (375, 500) if portrait else (500, 375)
    w, h = im.size
    s = rng.uniform(0.5, 1.0)  # side fraction: a quarter to all of the area
    cw = min(w, int(h * ow / oh)) * s
    ch = cw * oh / ow
    x0, y0 = rng.uniform(0, w - cw), rng.uniform(0, h - ch)
    t = im.resize((ow, oh), Image.LANCZOS, box=(x0, y0, x0 + cw, y0 + ch))
    if rng.random() < 0.5:
        t = t.transpose(Image.FLIP_LEFT_RIGHT)
    t = ImageEnhance.Brightness(t).enhance(rng.uniform(0.85, 1.15))
    t = ImageEnhance.Contrast(t).enhance(rng.uniform(0.85, 1.15))
    d = os.path.join(out, "train", name)
    os.makedirs(d, exist_ok=True)
    t.save(os.path.join(d, "%05d.jpg" % i), quality=90)
with open(done, "w") as f:
    f.write(str(n))
