#!/usr/bin/env python3
"""images_fixtures.py KIND OUTDIR [N_PER_CLASS VAL_PER_CLASS]: data for test_cli_images.c.

fmnist: the first N_PER_CLASS training and VAL_PER_CLASS test images of each Fashion-MNIST
        class (Debian's dataset-fashion-mnist, or the idx .gz files in $RUNNER_FASHION_MNIST:
        a GPU machine gets them from pack-deps.sh FASHION=1) written twice, with the same pixels in the
        same order: OUTDIR/folder/{train,val}/<label>/<nnnnn>.png (8-bit grayscale PNGs;
        torchvision's ImageFolder orders them by class, then name) and OUTDIR/idx/ as IDX
        files (train-images-idx3-ubyte, ..., t10k-...) in that class-sorted order, for the
        built-in reader.
photos: OUTDIR/{train,val}/<name>/<nnn>.jpg: each class is one photograph of
        scikit-image's data set (python3-skimage) cropped at random places and scales and
        resized to 96x72, JPEG quality 90.
"""
import gzip
import os
import random
import struct
import sys

import numpy as np
from PIL import Image

kind, out = sys.argv[1], sys.argv[2]
FM = os.environ.get("RUNNER_FASHION_MNIST") or "/usr/share/datasets/fashion-mnist"


def read_idx(name):
    with gzip.open(os.path.join(FM, name + ".gz"), "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 0x803:
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 28, 28)
    return np.frombuffer(data, np.uint8, offset=8)


if kind == "fmnist":
    per, vper = int(sys.argv[3]), int(sys.argv[4])
    for split, prefix, k in [("train", "train", per), ("val", "t10k", vper)]:
        x, y = read_idx(prefix + "-images-idx3-ubyte"), read_idx(prefix + "-labels-idx1-ubyte")
        imgs, labels = [], []
        for c in range(10):
            idx = np.nonzero(y == c)[0][:k]
            for j, i in enumerate(idx):
                d = os.path.join(out, "folder", split, str(c))
                os.makedirs(d, exist_ok=True)
                Image.fromarray(x[i], "L").save(os.path.join(d, "%05d.png" % j))
                imgs.append(x[i])
                labels.append(c)
        d = os.path.join(out, "idx")
        os.makedirs(d, exist_ok=True)
        n = len(labels)
        with open(os.path.join(d, prefix + "-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + np.stack(imgs).tobytes())
        with open(os.path.join(d, prefix + "-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + bytes(labels))
elif kind == "photos":
    sk = "/usr/lib/python3/dist-packages/skimage/data"
    names = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"]
    if not all(os.path.exists(os.path.join(sk, n)) for n in names):
        sys.exit(77)
    rng = random.Random(3)
    per, vper = int(sys.argv[3]), int(sys.argv[4])
    for name in names:
        im = Image.open(os.path.join(sk, name)).convert("RGB")
        w, h = im.size
        for split, k in [("train", per), ("val", vper)]:
            d = os.path.join(out, split, name.split(".")[0])
            os.makedirs(d, exist_ok=True)
            for j in range(k):
                s = rng.uniform(0.55, 1.0)
                cw, ch = int(w * s), int(min(h, w * s * 0.75))
                x0, y0 = rng.randint(0, w - cw), rng.randint(0, h - ch)
                im.crop((x0, y0, x0 + cw, y0 + ch)).resize((96, 72), Image.BILINEAR).save(
                    os.path.join(d, "%03d.jpg" % j), quality=90)
else:
    sys.exit("unknown kind " + kind)
