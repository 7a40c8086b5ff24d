/* dataset_impl.h: how a reader plugs in, the dataset struct, and the helpers readers share
 * (private to data/).
 *
 * Not a public header: callers use dataset.h. Every reader (cifar.c, fashion_mnist.c,
 * synthetic.c, image_folder.c) exports one dataset_reader_t, a small vtable; dataset.c
 * holds the one table of them and dispatches through it, knowing no reader by name. The
 * helpers below live in dataset_util.c, which calls no reader, so the dependencies point
 * one way: dataset.c -> readers -> dataset_util.c.
 *
 * A reader's split has n samples with labels in [0, classes) and c channels. In-memory
 * readers hold every image at one h x w (pixels, filled by open) and leave read NULL; a
 * reader of variable-size files (h = w = 0) gives each sample's encoded bytes from read,
 * and the loader's transform stage decodes and crops them (image_transform.h).
 */
#ifndef RUNNER_DATA_DATASET_IMPL_H
#define RUNNER_DATA_DATASET_IMPL_H

#include <stdio.h>

#include "data/dataset.h"

#define DATA_PATH_MAX 4096

typedef struct dataset_reader {
    dataset_info_t info;  /* static facts: name, default root, download, sizes, mean/std */
    /* Whether the files a split needs exist under root, without reading them: 1 all there,
     * 0 one missing (its path in missing). NULL: the reader needs no files (synthetic). */
    int (*present)(const char *root, data_split_t split, char *missing, size_t len);
    /* Reads (or indexes) the split into d, whose name, root and split are set: fills the
     * sizes (n, c, h, w, classes), labels and class names, and pixels or impl. */
    int (*open)(dataset_t *d, const dataset_opts_t *o, err_t *e);
    /* Sample i's encoded bytes into s (buf holds them); NULL: pixels in memory. */
    int (*read)(const dataset_t *d, int64_t i, data_sample_t *s, data_buf_t *buf, err_t *e);
    /* Frees what open left in d->impl; NULL: nothing. */
    void (*close)(dataset_t *d);
    /* The file of sample i into out (readers of files only; NULL otherwise). */
    void (*path)(const dataset_t *d, int64_t i, char *out, size_t cap);
    /* The k-th file left out while opening (0 <= k < notes.skipped): its path into out;
     * returns why. NULL: the reader leaves nothing out. */
    const char *(*skipped)(const dataset_t *d, int64_t k, char *out, size_t cap);
} dataset_reader_t;

extern const dataset_reader_t dataset_reader_cifar10, dataset_reader_cifar100,
    dataset_reader_fashion_mnist, dataset_reader_synthetic, dataset_reader_image_folder;

struct dataset {
    const dataset_reader_t *reader;
    char name[32];
    char root[DATA_PATH_MAX];
    data_split_t split;
    int64_t n;
    int c, h, w;         /* h = w = 0: variable size (read gives encoded files) */
    int classes;
    uint8_t *pixels;     /* n*h*w*c, HWC per image; NULL when not in memory */
    int32_t *labels;     /* n */
    char **class_names;  /* classes entries, each malloc'd */
    dataset_notes_t notes; /* what the reader has to say (image_folder) */
    void *impl;          /* the reader's own state */
};

/* Allocates pixels (when h, w > 0) and labels for n images, and numeric class names.
 * 0 / -1 (ERR_RUNTIME). */
int dataset_alloc_(dataset_t *d, int64_t n, int c, int h, int w, int classes, err_t *e);

/* Replaces the class names with the non-empty lines of a text file, if the file exists and
 * has at least `classes` such lines; otherwise keeps the numeric names. Never fails. */
void dataset_load_class_names_(dataset_t *d, const char *path);

/* Replaces class name k by a copy of s. 0 / -1 (ERR_RUNTIME). */
int dataset_set_class_name_(dataset_t *d, int k, const char *s, err_t *e);

/* Joins dir and file into out (len bytes). 0, or -1 if it does not fit. */
int data_join_path_(char *out, size_t len, const char *dir, const char *file);

/* 1 if path names an existing regular file. */
int data_file_exists_(const char *path);

/* 1 if every file of the NULL-terminated list exists under root (with gz: also as
 * name.gz); else 0 with the first missing path in missing (with gz: the .gz name, the
 * form Debian installs). */
int data_files_present_(const char *root, const char *const *files, bool gz, char *missing,
                        size_t len);

/* Makes buf hold at least n bytes. 0 / -1 (ERR_RUNTIME). */
int data_buf_reserve_(data_buf_t *b, size_t n, err_t *e);

#endif
