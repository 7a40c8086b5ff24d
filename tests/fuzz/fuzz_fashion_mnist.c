/* fuzz_fashion_mnist.c: the Fashion-MNIST IDX reader (data/fashion_mnist.c: gzip or plain
 * through zlib, magic, dimensions, counts, truncation, trailing bytes, labels), reading
 * an image file and a label file as the reader opens them (a gzFile each, here over a
 * memfd holding the bytes, so the code path is the file reader's).
 * Input: a 2-byte little-endian length L, then L bytes of the image file, then the label
 * file. */
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "data/dataset_mem.h"
#include "tests/fuzz/fuzz.h"

/* A gzFile reading n bytes of p from a memfd. */
static gzFile mem_gz(const uint8_t *p, size_t n) {
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0) abort();
    if (n && write(fd, p, n) != (ssize_t)n) abort();
    lseek(fd, 0, SEEK_SET);
    gzFile g = gzdopen(fd, "rb");
    if (!g) abort();
    return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t split = (size_t)data[0] | (size_t)data[1] << 8;
    if (split > size - 2) split = size - 2;
    gzFile fi = mem_gz(data + 2, split), fl = mem_gz(data + 2 + split, size - 2 - split);
    dataset_t *d = calloc(1, sizeof *d);
    if (!d) abort();
    snprintf(d->name, sizeof d->name, "fashion_mnist");
    err_t e = {0};
    if (fashion_mnist_read_gz_(d, fi, "images.gz", fl, "labels.gz", &e) == 0) {
        for (int64_t i = 0; i < dataset_size(d); i++) {
            int label = -1;
            (void)dataset_get(d, i, &label);
            FUZZ_ASSERT(label >= 0 && label < 10);
        }
    } else {
        FUZZ_ERR_OK(&e);
    }
    gzclose(fi);
    gzclose(fl);
    dataset_free(d);
    return 0;
}
