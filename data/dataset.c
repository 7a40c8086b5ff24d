/* dataset.c: the dataset interface: names, defaults, opening (with download), accessors.
 *
 * Implements dataset.h except the file formats themselves (cifar.c, fashion_mnist.c,
 * synthetic.c) and the download (download.c).
 */
#include "data/dataset.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset_impl.h"
#include "data/download.h"

#define CIFAR10_URL "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
#define CIFAR10_MD5 "c32a1d4ab5d03f1284b67883e8d87530"
#define CIFAR100_URL "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz"
#define CIFAR100_MD5 "03b5dce01913d631647c71ecec9e9cb8"

static const dataset_info_t dataset_table[] = {
    {"cifar10", "data/cifar-10-batches-bin", CIFAR10_URL, CIFAR10_MD5, 3, 32, 32, 10,
     50000, 10000, {0.4914f, 0.4822f, 0.4465f, 0.5f}, {0.2470f, 0.2435f, 0.2616f, 0.25f}},
    {"cifar100", "data/cifar-100-binary", CIFAR100_URL, CIFAR100_MD5, 3, 32, 32, 100,
     50000, 10000, {0.5071f, 0.4865f, 0.4409f, 0.5f}, {0.2673f, 0.2564f, 0.2762f, 0.25f}},
    {"fashion_mnist", "/usr/share/datasets/fashion-mnist", "", "", 1, 28, 28, 10,
     60000, 10000, {0.2860f, 0.2860f, 0.2860f, 0.2860f}, {0.3530f, 0.3530f, 0.3530f, 0.3530f}},
    {"synthetic", "", "", "", 3, 32, 32, 10,
     1024, 256, {0.5f, 0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f, 0.25f}},
};
#define N_DATASETS (int)(sizeof dataset_table / sizeof dataset_table[0])

int dataset_info(const char *name, dataset_info_t *info, err_t *e) {
    for (int i = 0; i < N_DATASETS; i++)
        if (name && !strcmp(name, dataset_table[i].name)) {
            *info = dataset_table[i];
            return 0;
        }
    return err_set(e, ERR_INPUT,
                   "unknown dataset \"%s\": expected one of cifar10, cifar100, fashion_mnist, "
                   "synthetic (data.dataset)", name ? name : "(null)");
}

int data_join_path_(char *out, size_t len, const char *dir, const char *file) {
    int n;
    if (!dir || !*dir) n = snprintf(out, len, "%s", file);
    else if (dir[strlen(dir) - 1] == '/') n = snprintf(out, len, "%s%s", dir, file);
    else n = snprintf(out, len, "%s/%s", dir, file);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

int data_file_exists_(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The NULL-terminated list of files a split of a named dataset needs (NULL: synthetic). */
static const char *const *files_for(const char *name, data_split_t split) {
    if (!strcmp(name, "cifar10")) return cifar_files_(10, split);
    if (!strcmp(name, "cifar100")) return cifar_files_(100, split);
    if (!strcmp(name, "fashion_mnist")) return fashion_mnist_files_(split);
    return NULL;
}

/* 1 if file (or, for fashion_mnist, file.gz) exists under root. */
static int present(const char *name, const char *root, const char *file) {
    char p[DATA_PATH_MAX];
    if (data_join_path_(p, sizeof p, root, file)) return 0;
    if (data_file_exists_(p)) return 1;
    if (!strcmp(name, "fashion_mnist")) {
        char gz[DATA_PATH_MAX + 4];
        snprintf(gz, sizeof gz, "%s.gz", p);
        return data_file_exists_(gz);
    }
    return 0;
}

int dataset_files_present(const char *name, const char *root, data_split_t split,
                          char *missing, size_t missing_len, err_t *e) {
    dataset_info_t info = {0};
    if (dataset_info(name, &info, e)) return -1;
    if (!root || !*root) root = info.default_root;
    const char *const *files = files_for(info.name, split);
    for (int i = 0; files && files[i]; i++)
        if (!present(info.name, root, files[i])) {
            /* name the file that is normally there: Fashion-MNIST ships as .gz */
            char gz[DATA_PATH_MAX];
            snprintf(gz, sizeof gz, "%s%s", files[i], strcmp(info.name, "fashion_mnist") ? "" : ".gz");
            if (missing && missing_len) data_join_path_(missing, missing_len, root, gz);
            return 0;
        }
    return 1;
}

int dataset_alloc_(dataset_t *d, int64_t n, int c, int h, int w, int classes, err_t *e) {
    d->n = n; d->c = c; d->h = h; d->w = w; d->classes = classes;
    size_t img = (size_t)h * w * c;
    d->pixels = xmalloc((size_t)n * img > 0 ? (size_t)n * img : 1, e);
    d->labels = xmalloc((size_t)n * sizeof(int32_t) > 0 ? (size_t)n * sizeof(int32_t) : 1, e);
    d->class_names = xcalloc((size_t)classes, sizeof(char *), e);
    if (!d->pixels || !d->labels || !d->class_names) return -1;
    for (int k = 0; k < classes; k++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", k);
        if (!(d->class_names[k] = strdup(buf)))
            return err_set(e, ERR_RUNTIME, "out of memory (class names)");
    }
    return 0;
}

void dataset_load_class_names_(dataset_t *d, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char **names = calloc((size_t)d->classes, sizeof(char *));
    char line[256];
    int k = 0;
    while (names && k < d->classes && fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
            line[--len] = 0;
        if (len) names[k++] = strdup(line);
    }
    fclose(f);
    int ok = names && k == d->classes;
    for (int i = 0; ok && i < k; i++) ok = names[i] != NULL;
    if (ok) {
        for (int i = 0; i < d->classes; i++) {
            free(d->class_names[i]);
            d->class_names[i] = names[i];
        }
    } else {
        for (int i = 0; names && i < k; i++) free(names[i]);
    }
    free(names);
}

/* Downloads the archive for a CIFAR dataset into root when files are missing. */
static int ensure_download(const dataset_opts_t *o, const dataset_info_t *info,
                           const char *root, err_t *e) {
    char missing[DATA_PATH_MAX];
    int have_train = dataset_files_present(info->name, root, DATA_SPLIT_TRAIN, missing,
                                           sizeof missing, e);
    int have_val = dataset_files_present(info->name, root, DATA_SPLIT_VAL, missing,
                                         sizeof missing, e);
    if (have_train < 0 || have_val < 0) return -1;
    if (have_train && have_val) return 0;
    if (!o->download) return 0; /* the reader reports what is missing */
    if (!*info->url && !(o->download_url && *o->download_url))
        return err_set(e, ERR_INPUT,
                       "%s: %s is missing and %s has no download (data.download): "
                       "install it with `apt-get install dataset-fashion-mnist` or put the "
                       "files in %s", info->name, missing, info->name, root);
    download_opts_t d = {0};
    d.url = (o->download_url && *o->download_url) ? o->download_url : info->url;
    d.md5 = (o->download_md5 && *o->download_md5) ? o->download_md5
          : (o->download_url && *o->download_url) ? "" : info->md5;
    d.target = root;
    d.progress = -1;
    struct stat st;
    if (stat(root, &st) == 0 && S_ISDIR(st.st_mode)) {
        /* an existing directory missing some files: only an empty one may be replaced */
        if (rmdir(root) != 0)
            return err_set(e, ERR_INPUT,
                           "%s: %s is missing but the directory %s exists and is not empty; "
                           "move it away (or delete it) so data.download can fetch %s there",
                           info->name, missing, root, d.url);
    }
    return download_dataset_archive(&d, e);
}

int dataset_open(const dataset_opts_t *o, dataset_t **out, err_t *e) {
    *out = NULL;
    dataset_info_t info = {0};
    if (dataset_info(o->name, &info, e)) return -1;
    if (o->split != DATA_SPLIT_TRAIN && o->split != DATA_SPLIT_VAL)
        return err_set(e, ERR_INPUT, "dataset %s: split must be train or val", info.name);
    const char *root = (o->root && *o->root) ? o->root : info.default_root;
    if (strlen(root) >= DATA_PATH_MAX - 64)
        return err_set(e, ERR_INPUT, "data.root is too long (%zu bytes)", strlen(root));
    dataset_t *d = xcalloc(1, sizeof *d, e);
    if (!d) return -1;
    snprintf(d->name, sizeof d->name, "%s", info.name);
    snprintf(d->root, sizeof d->root, "%s", root);
    d->split = o->split;
    int rc;
    if (!strcmp(info.name, "synthetic")) {
        d->root[0] = 0;
        rc = synthetic_generate_(d, &o->synthetic, o->seed, e);
    } else if (!strcmp(info.name, "fashion_mnist")) {
        rc = fashion_mnist_read_(d, e);
    } else {
        rc = ensure_download(o, &info, root, e);
        if (!rc) rc = cifar_read_(d, !strcmp(info.name, "cifar10") ? 10 : 100, e);
    }
    if (rc) {
        dataset_free(d);
        return -1;
    }
    *out = d;
    return 0;
}

int dataset_from_memory(const char *name, const uint8_t *pixels, const int32_t *labels,
                        int64_t n, int c, int h, int w, int classes, dataset_t **out,
                        err_t *e) {
    *out = NULL;
    if (n < 1 || c < 1 || c > DATA_MAX_CHANNELS || h < 1 || w < 1 || classes < 1)
        return err_set(e, ERR_INPUT, "dataset_from_memory: bad shape n=%lld c=%d h=%d w=%d "
                       "classes=%d", (long long)n, c, h, w, classes);
    for (int64_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return err_set(e, ERR_INPUT, "dataset_from_memory: label %d of image %lld is "
                           "outside [0, %d)", labels[i], (long long)i, classes);
    dataset_t *d = xcalloc(1, sizeof *d, e);
    if (!d) return -1;
    snprintf(d->name, sizeof d->name, "%s", name ? name : "memory");
    if (dataset_alloc_(d, n, c, h, w, classes, e)) {
        dataset_free(d);
        return -1;
    }
    memcpy(d->pixels, pixels, (size_t)n * h * w * c);
    memcpy(d->labels, labels, (size_t)n * sizeof(int32_t));
    *out = d;
    return 0;
}

void dataset_free(dataset_t *d) {
    if (!d) return;
    for (int k = 0; d->class_names && k < d->classes; k++) free(d->class_names[k]);
    free(d->class_names);
    free(d->pixels);
    free(d->labels);
    free(d);
}

const char *dataset_name(const dataset_t *d) { return d->name; }
const char *dataset_root(const dataset_t *d) { return d->root; }
data_split_t dataset_split(const dataset_t *d) { return d->split; }
int64_t dataset_size(const dataset_t *d) { return d->n; }
int dataset_num_classes(const dataset_t *d) { return d->classes; }
const uint8_t *dataset_pixels(const dataset_t *d) { return d->pixels; }
const int32_t *dataset_labels(const dataset_t *d) { return d->labels; }

void dataset_shape(const dataset_t *d, int *c, int *h, int *w) {
    if (c) *c = d->c;
    if (h) *h = d->h;
    if (w) *w = d->w;
}

const char *dataset_class_name(const dataset_t *d, int k) {
    return (k >= 0 && k < d->classes) ? d->class_names[k] : "";
}

const uint8_t *dataset_get(const dataset_t *d, int64_t i, int *label) {
    if (label) *label = d->labels[i];
    return d->pixels + (size_t)i * d->h * d->w * d->c;
}
