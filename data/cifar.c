/* cifar.c: readers for the CIFAR-10 and CIFAR-100 binary versions.
 *
 * CIFAR-10: data_batch_1..5.bin (train), test_batch.bin (val); each record is 1 label byte
 * (0..9) then 3072 pixel bytes as three 32x32 planes (R, G, B). CIFAR-100: train.bin,
 * test.bin; each record is a coarse label byte (0..19), a fine label byte (0..99) and the
 * same 3072 bytes; the fine label is the class. Pixels are converted from CHW planes to
 * HWC. Class names come from batches.meta.txt / fine_label_names.txt when present.
 *
 * Checked: presence (with how to get the files), a size that is a positive whole number of
 * records, and label ranges. Not checked: the official record counts (small files in the
 * real format are accepted, which the tests rely on).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/dataset_mem.h"

#define CIFAR_IMG 3072
#define CIFAR10_URL "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
#define CIFAR100_URL "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz"
/* The most records one split may hold (checked before allocating): 20x the official 50000
 * train images, 3.1 GB of pixels. */
#define CIFAR_MAX_RECORDS 1000000

static const char *split_name(const dataset_t *d) {
    return d->split == DATA_SPLIT_TRAIN ? "train" : "val";
}

static const char *const cifar10_train[] = {"data_batch_1.bin", "data_batch_2.bin",
    "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin", NULL};
static const char *const cifar10_val[] = {"test_batch.bin", NULL};
static const char *const cifar100_train[] = {"train.bin", NULL};
static const char *const cifar100_val[] = {"test.bin", NULL};

static const char *const *cifar_files(int variant, data_split_t split) {
    if (variant == 10) return split == DATA_SPLIT_TRAIN ? cifar10_train : cifar10_val;
    return split == DATA_SPLIT_TRAIN ? cifar100_train : cifar100_val;
}

/* The message for a missing file: where it was looked for and how to get it. */
static int missing_file(const dataset_t *d, int variant, const char *path, err_t *e) {
    const char *url = variant == 10 ? CIFAR10_URL : CIFAR100_URL;
    return err_set(e, ERR_INPUT,
                   "%s: %s not found (looked in data.root = %s): set `data.download: true` to "
                   "fetch it, or download %s yourself and extract it so that the .bin files "
                   "are directly in %s", d->name, path, d->root, url, d->root);
}

/* Record size and file sizes of every file of the split; fills total record count. */
static int scan_files(const dataset_t *d, int variant, const char *const *files,
                      int64_t *total, err_t *e) {
    size_t rec = CIFAR_IMG + (variant == 10 ? 1 : 2);
    *total = 0;
    for (int i = 0; files[i]; i++) {
        char p[DATA_PATH_MAX];
        if (data_join_path_(p, sizeof p, d->root, files[i]))
            return err_set(e, ERR_INPUT, "%s: path too long under %s", d->name, d->root);
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) return missing_file(d, variant, p, e);
        if (st.st_size == 0 || (size_t)st.st_size % rec != 0)
            return err_set(e, ERR_INPUT,
                           "%s: %s has %lld bytes, expected a whole number of %zu-byte records "
                           "(%s: %d label byte%s + 3072 pixels); the file is truncated or not "
                           "the binary version: download it again", d->name, p,
                           (long long)st.st_size, rec, d->name, variant == 10 ? 1 : 2,
                           variant == 10 ? "" : "s");
        *total += (int64_t)((size_t)st.st_size / rec);
        if (*total > CIFAR_MAX_RECORDS)
            return err_set(e, ERR_INPUT, "%s: the %s files under %s hold more than %d records "
                           "(CIFAR_MAX_RECORDS; the official train split has 50000): is this "
                           "the right directory?", d->name, split_name(d), d->root,
                           CIFAR_MAX_RECORDS);
    }
    return 0;
}

/* Decodes nrec records of buf into images [first + *n, ...) of d, advancing *n; label
 * ranges checked, messages name path and the record. */
static int decode_records(dataset_t *d, int variant, const char *p, const uint8_t *buf,
                          size_t nrec, int64_t first, int64_t *np, err_t *e) {
    size_t rec = CIFAR_IMG + (variant == 10 ? 1 : 2);
    int64_t n = *np;
    int rc = 0;
    for (size_t r = 0; r < nrec; r++, n++) {
        const uint8_t *s = buf + r * rec;
        int label = variant == 10 ? s[0] : s[1];
        if (variant == 100 && s[0] >= 20) {
            rc = err_set(e, ERR_INPUT, "%s: %s record %lld (byte offset %lld): coarse "
                         "label %d is outside 0..19; the file is corrupt: download it "
                         "again", d->name, p, (long long)n, (long long)(n * (int64_t)rec),
                         s[0]);
            break;
        }
        if (label >= d->classes) {
            rc = err_set(e, ERR_INPUT, "%s: %s record %lld (byte offset %lld): label %d "
                         "is outside 0..%d; the file is corrupt or from the other CIFAR: "
                         "download it again", d->name, p, (long long)n,
                         (long long)(n * (int64_t)rec + (variant == 10 ? 0 : 1)), label,
                         d->classes - 1);
            break;
        }
        if (first + n >= d->n) {
            rc = err_set(e, ERR_INPUT, "%s: %s grew while being read", d->name, p);
            break;
        }
        const uint8_t *planes = s + (variant == 10 ? 1 : 2);
        uint8_t *dst = d->pixels + (size_t)(first + n) * CIFAR_IMG;
        for (int px = 0; px < 1024; px++) {
            dst[3 * px + 0] = planes[px];
            dst[3 * px + 1] = planes[1024 + px];
            dst[3 * px + 2] = planes[2048 + px];
        }
        d->labels[first + n] = label;
    }
    *np = n;
    return rc;
}

/* Reads one file's records into images [first, first + count) of d. */
static int read_file(dataset_t *d, int variant, const char *file, int64_t first,
                     int64_t *count, err_t *e) {
    size_t rec = CIFAR_IMG + (variant == 10 ? 1 : 2);
    char p[DATA_PATH_MAX];
    data_join_path_(p, sizeof p, d->root, file);
    FILE *f = fopen(p, "rb");
    if (!f) return err_errno(e, ERR_INPUT, "%s: cannot open %s", d->name, p);
    enum { CHUNK = 1000 };
    uint8_t *buf = xmalloc(rec * CHUNK, e);
    if (!buf) { fclose(f); return -1; }
    int64_t n = 0;
    int rc = 0;
    for (;;) {
        size_t got = fread(buf, 1, rec * CHUNK, f);
        if (got % rec != 0) {
            rc = err_set(e, ERR_INPUT, "%s: %s changed size while being read (ends inside "
                         "record %lld): download it again", d->name, p,
                         (long long)(n + (int64_t)(got / rec)));
            break;
        }
        rc = decode_records(d, variant, p, buf, got / rec, first, &n, e);
        if (rc || got < rec * CHUNK) break;
    }
    if (!rc && ferror(f)) rc = err_errno(e, ERR_INPUT, "%s: error reading %s", d->name, p);
    free(buf);
    fclose(f);
    *count = n;
    return rc;
}

int cifar_read_memory_(dataset_t *d, int variant, const char *label, const uint8_t *buf,
                       size_t len, err_t *e) {
    size_t rec = CIFAR_IMG + (variant == 10 ? 1 : 2);
    if (len == 0 || len % rec != 0)
        return err_set(e, ERR_INPUT, "%s: %s has %zu bytes, expected a whole number of %zu-byte "
                       "records", d->name, label, len, rec);
    if (len / rec > CIFAR_MAX_RECORDS)
        return err_set(e, ERR_INPUT, "%s: %s holds more than %d records (CIFAR_MAX_RECORDS)", d->name,
                       label, CIFAR_MAX_RECORDS);
    if (dataset_alloc_(d, (int64_t)(len / rec), 3, 32, 32, variant, e)) return -1;
    int64_t n = 0;
    return decode_records(d, variant, label, buf, len / rec, 0, &n, e);
}

static int cifar_read(dataset_t *d, int variant, err_t *e) {
    const char *const *files = cifar_files(variant, d->split);
    int64_t total;
    if (scan_files(d, variant, files, &total, e)) return -1;
    if (dataset_alloc_(d, total, 3, 32, 32, variant, e)) return -1;
    int64_t at = 0;
    for (int i = 0; files[i]; i++) {
        int64_t got = 0;
        if (read_file(d, variant, files[i], at, &got, e)) return -1;
        at += got;
    }
    if (at != total)
        return err_set(e, ERR_INPUT, "%s: files under %s changed size while being read "
                       "(%lld of %lld records)", d->name, d->root, (long long)at,
                       (long long)total);
    char p[DATA_PATH_MAX];
    if (!data_join_path_(p, sizeof p, d->root,
                         variant == 10 ? "batches.meta.txt" : "fine_label_names.txt"))
        dataset_load_class_names_(d, p);
    return 0;
}

static int cifar10_present(const char *root, data_split_t split, char *missing, size_t len) {
    return data_files_present_(root, cifar_files(10, split), false, missing, len);
}
static int cifar100_present(const char *root, data_split_t split, char *missing, size_t len) {
    return data_files_present_(root, cifar_files(100, split), false, missing, len);
}
static int cifar10_open(dataset_t *d, const dataset_opts_t *o, err_t *e) {
    (void)o;
    return cifar_read(d, 10, e);
}
static int cifar100_open(dataset_t *d, const dataset_opts_t *o, err_t *e) {
    (void)o;
    return cifar_read(d, 100, e);
}

const dataset_reader_t dataset_reader_cifar10 = {
    {"cifar10", "data/cifar-10-batches-bin", CIFAR10_URL, "c32a1d4ab5d03f1284b67883e8d87530",
     3, 32, 32, 10, 50000, 10000, {0.4914f, 0.4822f, 0.4465f, 0.5f},
     {0.2470f, 0.2435f, 0.2616f, 0.25f}},
    cifar10_present, cifar10_open, NULL, NULL, NULL, NULL,
};

const dataset_reader_t dataset_reader_cifar100 = {
    {"cifar100", "data/cifar-100-binary", CIFAR100_URL, "03b5dce01913d631647c71ecec9e9cb8",
     3, 32, 32, 100, 50000, 10000, {0.5071f, 0.4865f, 0.4409f, 0.5f},
     {0.2673f, 0.2564f, 0.2762f, 0.25f}},
    cifar100_present, cifar100_open, NULL, NULL, NULL, NULL,
};
