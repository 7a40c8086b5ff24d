/* fuzz_cifar.c: the CIFAR-10 / CIFAR-100 binary reader (data/cifar.c: record size, label
 * ranges, CHW -> HWC), the decoding every data_batch_N.bin / train.bin goes through.
 * Input: byte 0 picks the variant (even: CIFAR-10, odd: CIFAR-100); the rest is the file.
 * Property: a file that reads gives one label in range per record. */
#include "data/dataset_mem.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int variant = data[0] & 1 ? 100 : 10;
    dataset_t *d = calloc(1, sizeof *d);
    if (!d) abort();
    snprintf(d->name, sizeof d->name, "cifar%d", variant);
    d->split = DATA_SPLIT_TRAIN;
    err_t e = {0};
    if (cifar_read_memory_(d, variant, "fuzz.bin", data + 1, size - 1, &e) == 0) {
        size_t rec = 3072 + (variant == 10 ? 1 : 2);
        FUZZ_ASSERT(dataset_size(d) == (int64_t)((size - 1) / rec));
        for (int64_t i = 0; i < dataset_size(d); i++) {
            int label = -1;
            (void)dataset_get(d, i, &label);
            FUZZ_ASSERT(label >= 0 && label < variant);
        }
    } else {
        FUZZ_ERR_OK(&e);
    }
    dataset_free(d);
    return 0;
}
