/* dataset_util.c: the helpers every reader shares (dataset_impl.h): allocation, class
 * names, paths, presence checks, byte buffers. Calls no reader, so readers depend on it
 * and it on nothing in data/ (the table and dispatch are in dataset.c).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/dataset_impl.h"

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

int data_files_present_(const char *root, const char *const *files, bool gz, char *missing,
                        size_t len) {
    for (int i = 0; files && files[i]; i++) {
        char p[DATA_PATH_MAX], pz[DATA_PATH_MAX + 4];
        int ok = !data_join_path_(p, sizeof p, root, files[i]) && data_file_exists_(p);
        if (!ok && gz) {
            snprintf(pz, sizeof pz, "%s.gz", p);
            ok = data_file_exists_(pz);
        }
        if (!ok) {
            /* name the file that is normally there (Fashion-MNIST ships as .gz) */
            char name[DATA_PATH_MAX];
            snprintf(name, sizeof name, "%s%s", files[i], gz ? ".gz" : "");
            if (missing && len) data_join_path_(missing, len, root, name);
            return 0;
        }
    }
    return 1;
}

int dataset_alloc_(dataset_t *d, int64_t n, int c, int h, int w, int classes, err_t *e) {
    d->n = n; d->c = c; d->h = h; d->w = w; d->classes = classes;
    size_t img = (size_t)h * w * c;
    if (h > 0 && w > 0) {
        d->pixels = xmalloc((size_t)n * img > 0 ? (size_t)n * img : 1, e);
        if (!d->pixels) return -1;
    }
    d->labels = xmalloc((size_t)n * sizeof(int32_t) > 0 ? (size_t)n * sizeof(int32_t) : 1, e);
    d->class_names = xcalloc((size_t)classes, sizeof(char *), e);
    if (!d->labels || !d->class_names) return -1;
    for (int k = 0; k < classes; k++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", k);
        if (!(d->class_names[k] = strdup(buf)))
            return err_set(e, ERR_RUNTIME, "out of memory (class names)");
    }
    return 0;
}

int dataset_set_class_name_(dataset_t *d, int k, const char *s, err_t *e) {
    char *c = strdup(s);
    if (!c) return err_set(e, ERR_RUNTIME, "out of memory (class names)");
    free(d->class_names[k]);
    d->class_names[k] = c;
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

int data_buf_reserve_(data_buf_t *b, size_t n, err_t *e) {
    if (n <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < n) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return err_set(e, ERR_RUNTIME, "out of memory (%zu-byte read buffer)", cap);
    b->p = p;
    b->cap = cap;
    return 0;
}

void data_buf_free(data_buf_t *b) {
    if (!b) return;
    free(b->p);
    memset(b, 0, sizeof *b);
}
