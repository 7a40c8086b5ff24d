/* dataset_mem.h: the file readers' decoding on bytes already in memory or on an open
 * stream (private to data/ and its tests). The fuzz harnesses (tests/fuzz/fuzz_cifar.c,
 * fuzz_fashion_mnist.c) call these; the file readers share the same decoding, so what is
 * fuzzed is what reads the user's files.
 */
#ifndef RUNNER_DATA_DATASET_MEM_H
#define RUNNER_DATA_DATASET_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset_impl.h"

/* Decodes one CIFAR-10 (variant 10) or CIFAR-100 (100) file image of len bytes into d
 * (named and split, nothing allocated yet); label names the file in messages. At most
 * CIFAR_MAX_RECORDS records. 0 / -1 (ERR_INPUT). */
int cifar_read_memory_(dataset_t *d, int variant, const char *label, const uint8_t *buf,
                       size_t len, err_t *e);

/* Reads a Fashion-MNIST split from an image stream and a label stream, each a zlib gzFile
 * (plain or gzipped data; void * keeps zlib.h out of here); ipath / lpath name them. At
 * most FM_MAX_IMAGES images. 0 / -1 (ERR_INPUT). */
int fashion_mnist_read_gz_(dataset_t *d, void *images, const char *ipath, void *labels,
                           const char *lpath, err_t *e);

#endif
