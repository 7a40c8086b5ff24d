/* image_folder.c: the "image_folder" reader: torchvision's ImageFolder layout
 * (root/<train_dir>/<class>/.../<image>, the same under <val_dir>), indexed by
 * image_index.c, read one file per sample (the loader decodes: image_transform.h).
 *
 * Bad files (unreadable, empty, not a JPEG/PNG) found while indexing stop the open with
 * one message naming the first of them and how many there are, unless skip_bad
 * (data.bad_images: skip), which leaves them out and counts them in the notes. A training
 * class left without any usable file is an error either way (torchvision refuses empty
 * classes; a class that exists only by name would silently never be learnt).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset_impl.h"
#include "data/image_index.h"

#define MAX_FILE_BYTES ((size_t)1 << 30)

typedef struct folder {
    folder_index_t ix;
    char split[DATA_PATH_MAX];  /* data.root joined with the split's folder */
    int64_t *map;               /* sample -> index entry (bad files left out) */
    int64_t *bad;               /* the bad files' index entries, in order (skip_bad) */
} folder_t;

static void entry_path(const folder_t *f, int64_t entry, char *out, size_t cap) {
    data_join_path_(out, cap, f->split, f->ix.paths + f->ix.path_off[entry]);
}

static void folder_close(dataset_t *d) {
    folder_t *f = d->impl;
    if (!f) return;
    folder_index_free(&f->ix);
    free(f->map);
    free(f->bad);
    free(f);
    d->impl = NULL;
}

static int folder_open(dataset_t *d, const dataset_opts_t *o, err_t *e) {
    const data_folder_opts_t *fo = &o->folder;
    const char *tdir = fo->train_dir && *fo->train_dir ? fo->train_dir : "train";
    const char *vdir = fo->val_dir && *fo->val_dir ? fo->val_dir : "val";
    folder_t *f = xcalloc(1, sizeof *f, e);
    if (!f) return -1;
    d->impl = f;
    char classes[DATA_PATH_MAX];
    if (data_join_path_(f->split, sizeof f->split, d->root,
                        d->split == DATA_SPLIT_TRAIN ? tdir : vdir) ||
        data_join_path_(classes, sizeof classes, d->root, tdir))
        return err_set(e, ERR_INPUT, "image_folder: data.root %s is too long", d->root);
    folder_index_opts_t io = {f->split, classes, fo->cache_dir, img_default_limits(), 0, fo->cache_read_only};
    if (folder_index_load(&io, &f->ix, &d->notes, e)) return -1;
    const folder_index_t *ix = &f->ix;
    int64_t first_bad = -1;
    for (int64_t i = 0; i < ix->n && first_bad < 0; i++)
        if (ix->status[i] == FOLDER_BAD) first_bad = i;
    if (first_bad >= 0) {
        char p[DATA_PATH_MAX];
        entry_path(f, first_bad, p, sizeof p);
        const char *why = ix->why + ix->why_off[first_bad];
        if (strstr(why, "built without"))
            return err_set(e, ERR_INPUT, "image_folder: %s: %s; image_folder cannot read %s "
                           "without it", p, why, f->split);
        if (!fo->skip_bad)
            return err_set(e, ERR_INPUT, "image_folder: %s: %s; fix or remove the file%s, or set "
                           "data.bad_images: skip to leave such files out (%lld bad file%s in %s)",
                           p, ix->why + ix->why_off[first_bad], ix->n_bad > 1 ? "s" : "",
                           (long long)ix->n_bad, ix->n_bad == 1 ? "" : "s", f->split);
        snprintf(d->notes.first_skipped, sizeof d->notes.first_skipped, "%.700s: %.300s", p,
                 ix->why + ix->why_off[first_bad]);
    }
    d->notes.skipped = ix->n_bad;
    int64_t n = ix->n - ix->n_bad;
    int c = fo->channels == 1 ? 1 : 3;
    if (dataset_alloc_(d, n, c, 0, 0, ix->classes, e)) return -1;
    if (!(f->map = malloc((size_t)(n ? n : 1) * sizeof *f->map)) ||
        !(f->bad = malloc((size_t)(ix->n_bad ? ix->n_bad : 1) * sizeof *f->bad)))
        return err_set(e, ERR_RUNTIME, "out of memory (image_folder)");
    for (int64_t i = 0, k = 0; i < ix->n; i++)
        if (ix->status[i] == FOLDER_BAD) f->bad[k++] = i;
    int64_t *per = calloc((size_t)ix->classes, sizeof *per);
    if (!per) return err_set(e, ERR_RUNTIME, "out of memory (image_folder)");
    for (int64_t i = 0, j = 0; i < ix->n; i++)
        if (ix->status[i] == FOLDER_OK) {
            f->map[j] = i;
            d->labels[j++] = ix->label[i];
            per[ix->label[i]]++;
        }
    int rc = 0;
    for (int k = 0; !rc && k < ix->classes; k++) {
        rc = dataset_set_class_name_(d, k, ix->class_names[k], e);
        if (!rc && d->split == DATA_SPLIT_TRAIN && per[k] == 0)
            rc = err_set(e, ERR_INPUT, "image_folder: every image of class %s (%s/%s) is "
                         "unreadable, so it cannot be learnt; fix its files or remove the "
                         "folder (first bad file: %s)", ix->class_names[k], f->split,
                         ix->class_names[k], d->notes.first_skipped);
    }
    free(per);
    return rc;
}

static int folder_read(const dataset_t *d, int64_t i, data_sample_t *s, data_buf_t *buf,
                       err_t *e) {
    const folder_t *f = d->impl;
    entry_path(f, f->map[i], buf->path, sizeof buf->path);
    s->path = buf->path;
    int fd = open(buf->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_errno(e, ERR_INPUT, "image_folder: %s: cannot open it", buf->path);
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = err_set(e, ERR_INPUT, "image_folder: %s: not a regular file", buf->path);
    } else if ((size_t)st.st_size > MAX_FILE_BYTES) {
        rc = err_set(e, ERR_INPUT, "image_folder: %s: %lld bytes, more than the %zu an image "
                     "file may have (limit max_file_bytes)", buf->path, (long long)st.st_size,
                     MAX_FILE_BYTES);
    } else if (!(rc = data_buf_reserve_(buf, (size_t)st.st_size + 1, e))) {
        size_t got = 0;
        for (;;) { /* to the end, whatever fstat said: the file may have changed */
            if (got == buf->cap && data_buf_reserve_(buf, got + 1, e)) { rc = -1; break; }
            ssize_t r = read(fd, buf->p + got, buf->cap - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                rc = err_errno(e, ERR_INPUT, "image_folder: %s: read error", buf->path);
                break;
            }
            if (r == 0) break;
            got += (size_t)r;
            if (got > MAX_FILE_BYTES) {
                rc = err_set(e, ERR_INPUT, "image_folder: %s grew past %zu bytes while being "
                             "read", buf->path, MAX_FILE_BYTES);
                break;
            }
        }
        buf->len = got;
    }
    close(fd);
    if (rc) return -1;
    s->bytes = buf->p;
    s->len = buf->len;
    return 0;
}

static void folder_path(const dataset_t *d, int64_t i, char *out, size_t cap) {
    const folder_t *f = d->impl;
    entry_path(f, f->map[i], out, cap);
}

static const char *folder_skipped(const dataset_t *d, int64_t k, char *out, size_t cap) {
    const folder_t *f = d->impl;
    entry_path(f, f->bad[k], out, cap);
    return f->ix.why + f->ix.why_off[f->bad[k]];
}

const dataset_reader_t dataset_reader_image_folder = {
    {"image_folder", "data/images", "", "", 3, 0, 0, 0, 0, 0, {0.485f, 0.456f, 0.406f, 0.449f},
     {0.229f, 0.224f, 0.225f, 0.226f}},
    NULL, folder_open, folder_read, folder_close, folder_path, folder_skipped,
};
