#!/usr/bin/env python3
"""folder_fixtures.py ROOT: an image folder with every ordering corner torchvision's
ImageFolder has, and what ImageFolder makes of it, for test_image_folder.c.

ROOT/train: class folders "b", "a", "A", "a b", "é" (UTF-8), ".hidden" (a class too, as in
torchvision), "link" (a symbolic link to a folder elsewhere); files with upper-case and
mixed extensions, a hidden file, files torchvision ignores (.txt, no extension), nested
folders whose sort order differs from a depth-first walk ("s" < "s b" < "s/x" by path),
a symbolic link to a file. ROOT/val: two of the classes.
Writes ROOT/expected_train.txt and ROOT/expected_val.txt: "label<TAB>path relative to the
split" per sample in ImageFolder's order (val labelled with train's classes), and
ROOT/classes.txt.
"""
import os
import sys

from PIL import Image
from torchvision.datasets import ImageFolder

root = sys.argv[1]


def img(path, color, fmt):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", (9, 7), color).save(path, fmt)


t = os.path.join(root, "train")
files = {
    "b/2.jpg": "JPEG", "b/10.jpg": "JPEG", "b/UPPER.JPG": "JPEG", "b/mixed.JpEg": "JPEG",
    "a/z.png": "PNG", "a/.dot.jpg": "JPEG", "a/s/x.jpg": "JPEG", "a/s b/y.jpg": "JPEG",
    "a/s/deeper/q.png": "PNG", "a/s0/w.jpg": "JPEG", "a/S/cap.jpg": "JPEG",
    "A/one.png": "PNG", "a b/two.jpg": "JPEG", "\u00e9/acc.jpg": "JPEG", ".hidden/h.jpg": "JPEG",
}
for i, (rel, fmt) in enumerate(sorted(files.items())):
    img(os.path.join(t, rel), (i * 13 % 256, 50, 200 - i), fmt)
open(os.path.join(t, "b", "notes.txt"), "w").write("not an image\n")
open(os.path.join(t, "b", "noext"), "w").write("x")
os.makedirs(os.path.join(root, "elsewhere"), exist_ok=True)
img(os.path.join(root, "elsewhere", "far.jpg"), (1, 2, 3), "JPEG")
os.symlink(os.path.join(root, "elsewhere"), os.path.join(t, "link"))
os.symlink(os.path.join(t, "b", "2.jpg"), os.path.join(t, "a", "alias.jpg"))
open(os.path.join(t, "stray.jpg"), "wb").write(open(os.path.join(t, "b", "2.jpg"), "rb").read())
v = os.path.join(root, "val")
img(os.path.join(v, "b", "vb.jpg"), (9, 9, 9), "JPEG")
img(os.path.join(v, "a", "va.png"), (8, 8, 8), "PNG")
img(os.path.join(v, "a", "sub", "vs.jpg"), (7, 7, 7), "JPEG")

tr = ImageFolder(t)
with open(os.path.join(root, "classes.txt"), "w", encoding="utf-8") as f:
    f.write("".join(c + "\n" for c in tr.classes))
for name, ds_dir in [("train", t), ("val", v)]:
    # val with train's labels: the samples of each train class present in val, in order
    from torchvision.datasets.folder import make_dataset, IMG_EXTENSIONS
    present = {c: i for c, i in tr.class_to_idx.items() if os.path.isdir(os.path.join(ds_dir, c))}
    samples = tr.samples if name == "train" else make_dataset(ds_dir, present, IMG_EXTENSIONS)
    with open(os.path.join(root, "expected_%s.txt" % name), "w", encoding="utf-8") as f:
        for p, label in samples:
            f.write("%d\t%s\n" % (label, os.path.relpath(p, ds_dir)))
