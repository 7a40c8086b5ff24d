/* dataset.c: the dataset interface: the table of readers, opening (with download),
 * accessors.
 *
 * Knows the readers only through their vtables (dataset_impl.h): one table, looked up by
 * name. The file formats are in the readers (cifar.c, fashion_mnist.c, synthetic.c,
 * image_folder.c), the shared helpers in dataset_util.c, the download in download.c.
 */
#include "data/dataset.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset_impl.h"
#include "data/download.h"

static const dataset_reader_t *const readers[] = {
    &dataset_reader_cifar10, &dataset_reader_cifar100, &dataset_reader_fashion_mnist,
    &dataset_reader_synthetic, &dataset_reader_image_folder,
};
#define N_READERS (int)(sizeof readers / sizeof readers[0])

static const dataset_reader_t *reader_of(const char *name) {
    for (int i = 0; name && i < N_READERS; i++)
        if (!strcmp(name, readers[i]->info.name)) return readers[i];
    return NULL;
}

int dataset_info(const char *name, dataset_info_t *info, err_t *e) {
    const dataset_reader_t *r = reader_of(name);
    if (r) {
        *info = r->info;
        return 0;
    }
    char known[256] = "";
    for (int i = 0; i < N_READERS; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                 readers[i]->info.name);
    return err_set(e, ERR_INPUT, "unknown dataset \"%s\": expected one of %s (data.dataset)",
                   name ? name : "(null)", known);
}

int dataset_files_present(const char *name, const char *root, data_split_t split,
                          char *missing, size_t missing_len, err_t *e) {
    dataset_info_t info = {0};
    if (dataset_info(name, &info, e)) return -1;
    const dataset_reader_t *r = reader_of(name);
    if (!root || !*root) root = info.default_root;
    return r->present ? r->present(root, split, missing, missing_len) : 1;
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
    d->reader = reader_of(info.name);
    snprintf(d->name, sizeof d->name, "%s", info.name);
    snprintf(d->root, sizeof d->root, "%s", root);
    d->split = o->split;
    int rc = info.url[0] ? ensure_download(o, &info, root, e) : 0;
    if (!rc) rc = d->reader->open(d, o, e);
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
    d->reader = &dataset_reader_synthetic; /* an in-memory dataset; nothing to close */
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
    if (d->reader && d->reader->close) d->reader->close(d);
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
    return d->pixels ? d->pixels + (size_t)i * d->h * d->w * d->c : NULL;
}

bool dataset_in_memory(const dataset_t *d) { return d->pixels != NULL; }
const dataset_notes_t *dataset_notes(const dataset_t *d) { return &d->notes; }

int dataset_read(const dataset_t *d, int64_t i, data_sample_t *s, data_buf_t *buf, err_t *e) {
    memset(s, 0, sizeof *s);
    if (i < 0 || i >= d->n)
        return err_set(e, ERR_RUNTIME, "dataset %s: sample %lld outside 0..%lld", d->name,
                       (long long)i, (long long)d->n - 1);
    s->label = d->labels[i];
    s->path = "";
    if (d->pixels) {
        s->pixels = d->pixels + (size_t)i * d->h * d->w * d->c;
        s->h = d->h;
        s->w = d->w;
        s->c = d->c;
        return 0;
    }
    return d->reader->read(d, i, s, buf, e);
}

const char *dataset_sample_path(const dataset_t *d, int64_t i, char *out, size_t cap) {
    if (cap) out[0] = 0;
    if (d->pixels || !d->reader->path || i < 0 || i >= d->n) return out;
    d->reader->path(d, i, out, cap);
    return out;
}

const char *dataset_skipped_file(const dataset_t *d, int64_t k, char *out, size_t cap) {
    if (cap) out[0] = 0;
    if (!d->reader->skipped || k < 0 || k >= d->notes.skipped) return NULL;
    return d->reader->skipped(d, k, out, cap);
}

void dataset_class_counts(const dataset_t *d, int64_t *counts) {
    memset(counts, 0, (size_t)d->classes * sizeof *counts);
    for (int64_t i = 0; i < d->n; i++) counts[d->labels[i]]++;
}
