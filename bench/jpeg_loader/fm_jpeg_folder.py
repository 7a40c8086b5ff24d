# fm_jpeg_folder.py OUT: Fashion-MNIST (Debian's dataset-fashion-mnist) as an ImageFolder of
# 112x112 JPEGs (4x bicubic upscale, quality 90): 600 train + 100 val images per class, the
# first of each class in file order. Used by dct_accuracy.sh. Runs with Debian's python3.
import gzip, os, sys
import numpy as np
from PIL import Image
d = '/usr/share/datasets/fashion-mnist/'
out = sys.argv[1]
def load(p, l):
    x = np.frombuffer(gzip.open(d + p).read(), np.uint8, offset=16).reshape(-1, 28, 28)
    y = np.frombuffer(gzip.open(d + l).read(), np.uint8, offset=8)
    return x, y
for split, (p, l), per in (('train', ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'), 600),
                           ('val', ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz'), 100)):
    x, y = load(p, l)
    for c in range(10):
        os.makedirs(f'{out}/{split}/c{c}', exist_ok=True)
        idx = np.nonzero(y == c)[0][:per]
        for i in idx:
            Image.fromarray(x[i]).resize((112, 112), Image.BICUBIC).save(f'{out}/{split}/c{c}/{i:05d}.jpg', quality=90)
