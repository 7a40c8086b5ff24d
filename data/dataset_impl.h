/* dataset_impl.h: the dataset struct and helpers shared by the readers (private to data/).
 *
 * Not a public header: callers use dataset.h. Each reader (cifar.c, fashion_mnist.c,
 * synthetic.c) fills a dataset_t allocated by dataset_alloc_.
 */
#ifndef RUNNER_DATA_DATASET_IMPL_H
#define RUNNER_DATA_DATASET_IMPL_H

#include <stdio.h>

#include "data/dataset.h"

#define DATA_PATH_MAX 4096

struct dataset {
    char name[32];
    char root[DATA_PATH_MAX];
    data_split_t split;
    int64_t n;
    int c, h, w;
    int classes;
    uint8_t *pixels;     /* n*h*w*c, HWC per image */
    int32_t *labels;     /* n */
    char **class_names;  /* classes entries, each malloc'd */
};

/* Allocates pixels/labels for n images and numeric class names. 0 / -1 (ERR_RUNTIME). */
int dataset_alloc_(dataset_t *d, int64_t n, int c, int h, int w, int classes, err_t *e);

/* Replaces the class names with the non-empty lines of a text file, if the file exists and
 * has at least `classes` such lines; otherwise keeps the numeric names. Never fails. */
void dataset_load_class_names_(dataset_t *d, const char *path);

/* Joins dir and file into out (len bytes). 0, or -1 if it does not fit. */
int data_join_path_(char *out, size_t len, const char *dir, const char *file);

/* 1 if path names an existing regular file. */
int data_file_exists_(const char *path);

/* The readers: fill d (already named, rooted and split) or fail with ERR_INPUT. */
int cifar_read_(dataset_t *d, int variant /* 10 or 100 */, err_t *e);
int fashion_mnist_read_(dataset_t *d, err_t *e);
int synthetic_generate_(dataset_t *d, const data_synthetic_opts_t *o, uint64_t seed,
                        err_t *e);

/* Files each reader needs for a split (NULL-terminated static list). fashion_mnist lists
 * the uncompressed names; the reader also accepts name.gz. */
const char *const *cifar_files_(int variant, data_split_t split);
const char *const *fashion_mnist_files_(data_split_t split);

#endif
