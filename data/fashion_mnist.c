/* fashion_mnist.c: reader for Fashion-MNIST in IDX format, plain or gzipped.
 *
 * Files: train-images-idx3-ubyte + train-labels-idx1-ubyte (train), t10k-* (val), each
 * either as named or with .gz (the plain name wins when both exist). IDX: big-endian
 * magic 0x00000803 (uint8, 3 dims: count, 28, 28) for images, 0x00000801 (uint8, 1 dim)
 * for labels, then the bytes. Debian's dataset-fashion-mnist package installs the .gz files
 * in /usr/share/datasets/fashion-mnist, the default root. Images are 1 channel, so HWC is
 * the file's row-major order.
 *
 * Checked: presence, gzip integrity, magic, dimensions (28x28), image/label count match,
 * truncation and trailing bytes, labels in 0..9. Not done: download (Debian packages it).
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/dataset_mem.h"

/* The most images a split may announce (checked before allocating): 16x the official 60000
 * train images, 750 MB of pixels. */
#define FM_MAX_IMAGES 1000000

static const char *const fm_train[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                       NULL};
static const char *const fm_val[] = {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", NULL};

static const char *const fm_class_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress",
    "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

static const char *const *fashion_mnist_files(data_split_t split) {
    return split == DATA_SPLIT_TRAIN ? fm_train : fm_val;
}

/* Finds name or name.gz under the root and opens it with zlib (which reads plain files
 * transparently). path gets the file used. */
static int open_idx(const dataset_t *d, const char *name, char *path, size_t len, gzFile *out,
                    err_t *e) {
    char plain[DATA_PATH_MAX];
    if (data_join_path_(plain, sizeof plain, d->root, name))
        return err_set(e, ERR_INPUT, "fashion_mnist: path too long under %s", d->root);
    snprintf(path, len, "%s", plain);
    if (!data_file_exists_(path)) {
        snprintf(path, len, "%s.gz", plain);
        if (!data_file_exists_(path))
            return err_set(e, ERR_INPUT,
                           "fashion_mnist: %s not found (looked for %s and %s.gz in data.root = "
                           "%s): install the Debian package with `apt-get install "
                           "dataset-fashion-mnist` (files in /usr/share/datasets/fashion-mnist) "
                           "or put the IDX files (plain or .gz) in %s",
                           name, plain, plain, d->root, d->root);
    }
    *out = gzopen(path, "rb");
    if (!*out) return err_errno(e, ERR_INPUT, "fashion_mnist: cannot open %s", path);
    gzbuffer(*out, 1 << 17);
    return 0;
}

/* Reads exactly n bytes; a short read or a zlib error is ERR_INPUT naming what was read. */
static int read_exact(gzFile f, void *buf, size_t n, const char *path, const char *what,
                      err_t *e) {
    size_t got = 0;
    while (got < n) {
        size_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
        int r = gzread(f, (uint8_t *)buf + got, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *m = gzerror(f, &zerr);
            return err_set(e, ERR_INPUT, "fashion_mnist: %s: corrupt gzip data while reading "
                           "the %s (%s): download or reinstall the file", path, what, m);
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    if (got < n) {
        int zerr;
        const char *m = gzerror(f, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END)
            return err_set(e, ERR_INPUT, "fashion_mnist: %s: corrupt or truncated gzip data "
                           "while reading the %s (%s): download or reinstall the file",
                           path, what, m);
        return err_set(e, ERR_INPUT, "fashion_mnist: %s is truncated: expected %zu bytes of "
                       "%s, found %zu: download or reinstall the file", path, n, what, got);
    }
    return 0;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Fails if anything follows the expected data. */
static int expect_end(gzFile f, const char *path, size_t expected, err_t *e) {
    uint8_t extra[4096];
    size_t n = 0;
    int r;
    while ((r = gzread(f, extra, sizeof extra)) > 0) n += (size_t)r;
    if (r < 0) {
        int zerr;
        return err_set(e, ERR_INPUT, "fashion_mnist: %s: corrupt gzip data after the records "
                       "(%s): download or reinstall the file", path, gzerror(f, &zerr));
    }
    if (n)
        return err_set(e, ERR_INPUT, "fashion_mnist: %s has %zu bytes after the %zu its header "
                       "announces: the file is corrupt; download or reinstall it", path, n,
                       expected);
    return 0;
}

static int fashion_mnist_open(dataset_t *d, const dataset_opts_t *o, err_t *e) {
    (void)o;
    const char *const *files = fashion_mnist_files(d->split);
    char ipath[DATA_PATH_MAX + 4], lpath[DATA_PATH_MAX + 4];
    gzFile fi = NULL, fl = NULL;
    int rc = -1;
    if (!open_idx(d, files[0], ipath, sizeof ipath, &fi, e) &&
        !open_idx(d, files[1], lpath, sizeof lpath, &fl, e))
        rc = fashion_mnist_read_gz_(d, fi, ipath, fl, lpath, e);
    if (fi) gzclose(fi);
    if (fl) gzclose(fl);
    return rc;
}

int fashion_mnist_read_gz_(dataset_t *d, void *images, const char *ipath, void *labels,
                           const char *lpath, err_t *e) {
    gzFile fi = images, fl = labels;
    int rc = -1;
    uint8_t hi[16], hl[8];
    if (read_exact(fi, hi, 16, ipath, "IDX header", e)) goto done;
    if (read_exact(fl, hl, 8, lpath, "IDX header", e)) goto done;
    if (be32(hi) != 0x00000803u) {
        err_set(e, ERR_INPUT, "fashion_mnist: %s: IDX magic is 0x%08x, expected 0x00000803 "
                "(unsigned bytes, 3 dimensions): not an IDX image file", ipath, be32(hi));
        goto done;
    }
    if (be32(hl) != 0x00000801u) {
        err_set(e, ERR_INPUT, "fashion_mnist: %s: IDX magic is 0x%08x, expected 0x00000801 "
                "(unsigned bytes, 1 dimension): not an IDX label file", lpath, be32(hl));
        goto done;
    }
    uint32_t n = be32(hi + 4), rows = be32(hi + 8), cols = be32(hi + 12), nl = be32(hl + 4);
    if (rows != 28 || cols != 28) {
        err_set(e, ERR_INPUT, "fashion_mnist: %s: images are %ux%u, expected 28x28", ipath,
                rows, cols);
        goto done;
    }
    if (n == 0 || n != nl) {
        err_set(e, ERR_INPUT, "fashion_mnist: %s has %u images but %s has %u labels; they must "
                "be equal and non-zero: the files are from different sets or corrupt",
                ipath, n, lpath, nl);
        goto done;
    }
    if (n > FM_MAX_IMAGES) {
        err_set(e, ERR_INPUT, "fashion_mnist: %s announces %u images, more than the %d allowed "
                "(FM_MAX_IMAGES; the official train split has 60000): the header is corrupt",
                ipath, n, FM_MAX_IMAGES);
        goto done;
    }
    if (dataset_alloc_(d, n, 1, 28, 28, 10, e)) goto done;
    if (read_exact(fi, d->pixels, (size_t)n * 784, ipath, "pixels", e)) goto done;
    if (expect_end(fi, ipath, (size_t)n * 784 + 16, e)) goto done;
    uint8_t *lab = xmalloc(n, e);
    if (!lab) goto done;
    if (read_exact(fl, lab, n, lpath, "labels", e) || expect_end(fl, lpath, (size_t)n + 8, e)) {
        free(lab);
        goto done;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (lab[i] >= 10) {
            err_set(e, ERR_INPUT, "fashion_mnist: %s: label %u of image %u (byte offset %u) is "
                    "outside 0..9: the file is corrupt", lpath, lab[i], i, i + 8);
            free(lab);
            goto done;
        }
        d->labels[i] = lab[i];
    }
    free(lab);
    for (int k = 0; k < 10; k++)
        if (dataset_set_class_name_(d, k, fm_class_names[k], e)) goto done;
    rc = 0;
done:
    return rc;
}

/* The plain name or name.gz. */
static int fashion_mnist_present(const char *root, data_split_t split, char *missing,
                                 size_t len) {
    return data_files_present_(root, fashion_mnist_files(split), true, missing, len);
}

const dataset_reader_t dataset_reader_fashion_mnist = {
    {"fashion_mnist", "/usr/share/datasets/fashion-mnist", "", "", 1, 28, 28, 10, 60000, 10000,
     {0.2860f, 0.2860f, 0.2860f, 0.2860f}, {0.3530f, 0.3530f, 0.3530f, 0.3530f}},
    fashion_mnist_present, fashion_mnist_open, NULL, NULL, NULL, NULL,
};
