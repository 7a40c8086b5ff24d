/* dataset.h: image-classification datasets behind one interface.
 *
 * A dataset is one split (train or val) of one of: "cifar10", "cifar100", "fashion_mnist",
 * "synthetic", "image_folder". The first four are held in memory: opening reads and
 * validates every file and keeps the whole split as one uint8 array of N images in HWC
 * order (channels last, like the net's NHWC activations) plus N int32 labels, so get(i) is
 * a pointer, and the CUDA backend can upload a small dataset to the GPU once
 * (dataset_pixels / dataset_labels). "image_folder" (torchvision's ImageFolder layout,
 * image_folder.c) keeps only an index of its files: dataset_read gives a sample's encoded
 * bytes, which the loader decodes and crops per sample (image_transform.h).
 *
 * Files (under root; default roots in dataset_info):
 *   cifar10        data_batch_1..5.bin (train), test_batch.bin (val); optional batches.meta.txt
 *   cifar100       train.bin, test.bin; optional fine_label_names.txt
 *   fashion_mnist  train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-* (val), each
 *                  plain or gzipped (.gz); Debian: apt-get install dataset-fashion-mnist
 *   synthetic      no files: deterministic from the seed (see synthetic.c)
 *   image_folder   <root>/<train_dir>/<class>/[subdirs/]<file>, the same under <val_dir>, with
 *                  torchvision's extensions; JPEG and PNG are decoded (image_folder.c)
 * Bad or missing files are ERR_INPUT with one message naming the file, what was expected
 * and what was found, and how to fix it. With download set, missing CIFAR files are fetched
 * (download.h) before reading.
 *
 * This module never includes runner/config.h: the runner fills dataset_opts_t.
 */
#ifndef RUNNER_DATA_DATASET_H
#define RUNNER_DATA_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DATA_MAX_CHANNELS 4   /* images have 1..4 channels (normalisation arrays) */

typedef enum { DATA_SPLIT_TRAIN = 0, DATA_SPLIT_VAL = 1 } data_split_t;

/* Sizes of the "synthetic" dataset (data.synthetic in the experiment). */
typedef struct data_synthetic_opts {
    int64_t train_size, val_size; /* 1024, 256 */
    int channels, height, width;  /* 3, 32, 32; channels in 1..DATA_MAX_CHANNELS */
    int classes;                  /* 10; >= 2 */
} data_synthetic_opts_t;

/* Options of "image_folder" (data.* keys of the same names). */
typedef struct data_folder_opts {
    const char *train_dir, *val_dir; /* under root; NULL/"" = "train", "val" */
    int channels;                /* 3 (convert("RGB")) or 1 (convert("L")); 0 = 3 */
    bool skip_bad;               /* data.bad_images: skip (else a bad file is an error) */
    const char *cache_dir;       /* file index cache; NULL/"" = $RUNNER_CACHE_DIR, else
                                    $XDG_CACHE_HOME/runner, else ~/.cache/runner */
    bool cache_read_only;        /* use a valid cached index but write none (runner plan) */
} data_folder_opts_t;

/* What dataset_open needs. Strings are copied; NULL or "" means the default. */
typedef struct dataset_opts {
    const char *name;          /* "cifar10" | "cifar100" | "fashion_mnist" | "synthetic" |
                                  "image_folder" */
    const char *root;          /* directory with the files; NULL/"" = dataset_info's root */
    data_split_t split;
    bool download;             /* fetch + verify + extract missing files (cifar10/100) */
    const char *download_url;  /* NULL/"" = the official URL */
    const char *download_md5;  /* NULL/"" = the official md5 (32 hex digits) */
    data_synthetic_opts_t synthetic; /* used by "synthetic" only */
    uint64_t seed;             /* used by "synthetic" only */
    data_folder_opts_t folder; /* used by "image_folder" only */
} dataset_opts_t;

/* A growable byte buffer (one per loader thread) that dataset_read fills. */
typedef struct data_buf {
    uint8_t *p;
    size_t len, cap;
    char path[4096];           /* the file read last */
} data_buf_t;

/* One sample as dataset_read gives it: decoded pixels held in memory (pixels != NULL,
 * h x w x c HWC), or the encoded bytes of a file (pixels == NULL). */
typedef struct data_sample {
    int label;
    const uint8_t *pixels;
    int h, w, c;
    const uint8_t *bytes;
    size_t len;
    const char *path;          /* the file, for messages ("" in memory) */
} data_sample_t;

/* What opening found that the plan and summary report (image_folder; zero otherwise). */
typedef struct dataset_notes {
    int64_t skipped;           /* files left out as unreadable (data.bad_images: skip) */
    char first_skipped[1024];  /* the first of them and why ("" none) */
    char index_path[1024];     /* the cached file index ("" when none could be written) */
    bool index_reused;         /* the cached index was valid (no walk of the tree) */
    int64_t index_rechecked;   /* of a reused index: files whose size, mtime or ctime
                                  changed since, checked again (the cache then rewritten) */
    int64_t other_formats;     /* files torchvision lists that are neither JPEG nor PNG */
} dataset_notes_t;

/* Static facts about a dataset name (no files are touched). */
typedef struct dataset_info {
    const char *name;          /* canonical name */
    const char *default_root;  /* "data/cifar-10-batches-bin", "data/cifar-100-binary",
                                  "/usr/share/datasets/fashion-mnist", "" (synthetic) */
    const char *url;           /* official download URL, "" where none */
    const char *md5;           /* its md5, "" where none */
    int channels, height, width; /* 3x32x32, 1x28x28; synthetic: the defaults 3x32x32 */
    int num_classes;           /* 10, 100, 10, synthetic: 10 */
    int64_t train_size, val_size; /* 50000/10000, 60000/10000, synthetic: 1024/256 */
    float mean[DATA_MAX_CHANNELS], std[DATA_MAX_CHANNELS]; /* default normalisation, per
                                  channel (synthetic: 0.5 / 0.25 for every channel) */
} dataset_info_t;

typedef struct dataset dataset_t;  /* opaque; one split in memory */

/* Fills info for a dataset name. Returns 0, or -1 with ERR_INPUT naming the known names. */
int dataset_info(const char *name, dataset_info_t *info, err_t *e);

/* Checks that every file the split needs exists under root (root NULL/"" = default),
 * without reading them: `runner plan` uses it to say whether a download would happen.
 * Returns 1 if all are present (always for synthetic), 0 if some are missing (then
 * missing, if non-NULL, gets the first missing path: for fashion_mnist the .gz name, the
 * form Debian installs; the uncompressed file would do too), -1 on a bad name. */
int dataset_files_present(const char *name, const char *root, data_split_t split,
                          char *missing, size_t missing_len, err_t *e);

/* Opens one split: downloads if asked and needed, reads and validates every file, and
 * returns a dataset owned by the caller (dataset_free). Returns 0 or -1 (e filled). */
int dataset_open(const dataset_opts_t *o, dataset_t **out, err_t *e);

/* Releases d and all its memory (NULL is fine). */
void dataset_free(dataset_t *d);

const char *dataset_name(const dataset_t *d);   /* canonical name */
const char *dataset_root(const dataset_t *d);   /* directory read ("" for synthetic) */
data_split_t dataset_split(const dataset_t *d);
int64_t dataset_size(const dataset_t *d);       /* N */
void dataset_shape(const dataset_t *d, int *c, int *h, int *w);
int dataset_num_classes(const dataset_t *d);
/* The name of class k (0 <= k < num_classes): from the dataset's meta file when present,
 * else its number as text ("7"). */
const char *dataset_class_name(const dataset_t *d, int k);

/* Image i (0 <= i < N) of an in-memory dataset: H*W*C uint8 pixels in HWC order; *label
 * gets its class if label is non-NULL. The pointer stays valid until dataset_free. NULL
 * for a dataset not in memory. */
const uint8_t *dataset_get(const dataset_t *d, int64_t i, int *label);

/* The whole split: N*H*W*C uint8 pixels (image i at i*H*W*C; NULL when not in memory)
 * and N int32 labels. */
const uint8_t *dataset_pixels(const dataset_t *d);
const int32_t *dataset_labels(const dataset_t *d);

/* True when every image is in memory at one shape (dataset_shape's h, w > 0). */
bool dataset_in_memory(const dataset_t *d);

/* Sample i into s: a pointer into memory, or the file's bytes read into buf (valid until
 * buf is reused). Thread-safe for distinct bufs. 0, or -1 (ERR_INPUT naming the file). */
int dataset_read(const dataset_t *d, int64_t i, data_sample_t *s, data_buf_t *buf, err_t *e);

/* The file of sample i into out ("" in memory); returns out. */
const char *dataset_sample_path(const dataset_t *d, int64_t i, char *out, size_t cap);

/* The k-th file left out as unreadable while opening (0 <= k < notes.skipped, in index
 * order): its path into out, and why (valid until dataset_free); NULL for k out of range. */
const char *dataset_skipped_file(const dataset_t *d, int64_t k, char *out, size_t cap);

/* Samples per class: counts[k] for k < dataset_num_classes. */
void dataset_class_counts(const dataset_t *d, int64_t *counts);

const dataset_notes_t *dataset_notes(const dataset_t *d);

void data_buf_free(data_buf_t *b);

/* Builds a dataset from memory (tests, tools): copies n images of c x h x w HWC pixels and
 * labels in [0, classes). Returns 0 or -1 (ERR_INPUT on bad sizes or labels). */
int dataset_from_memory(const char *name, const uint8_t *pixels, const int32_t *labels,
                        int64_t n, int c, int h, int w, int classes, dataset_t **out,
                        err_t *e);

#ifdef __cplusplus
}
#endif
#endif
