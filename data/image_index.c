/* image_index.c: walking an image_folder split as torchvision does, checking every file's
 * start on several threads, and the fingerprinted cache (see image_index.h for the rules).
 */
#include "data/image_index.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "util/fs.h"

#define INDEX_MAGIC "RNIDX\0\0\4"
#define MAX_DEPTH 64

/* ---- a growable list of strings (one blob, offsets) ---- */

typedef struct strvec {
    char *blob;
    size_t len, cap;
    int64_t *off;
    int64_t n, ncap;
} strvec_t;

static int sv_push(strvec_t *v, const char *s, err_t *e) {
    size_t l = strlen(s) + 1;
    if (v->len + l > v->cap) {
        size_t c = v->cap ? v->cap : 4096;
        while (c < v->len + l) c *= 2;
        char *b = realloc(v->blob, c);
        if (!b) return err_set(e, ERR_RUNTIME, "out of memory (file index)");
        v->blob = b;
        v->cap = c;
    }
    if (v->n == v->ncap) {
        int64_t c = v->ncap ? v->ncap * 2 : 256;
        int64_t *o = realloc(v->off, (size_t)c * sizeof *o);
        if (!o) return err_set(e, ERR_RUNTIME, "out of memory (file index)");
        v->off = o;
        v->ncap = c;
    }
    memcpy(v->blob + v->len, s, l);
    v->off[v->n++] = (int64_t)v->len;
    v->len += l;
    return 0;
}

static const char *sv_at(const strvec_t *v, int64_t i) { return v->blob + v->off[i]; }

static void sv_free(strvec_t *v) {
    free(v->blob);
    free(v->off);
    memset(v, 0, sizeof *v);
}

static int cmp_str(const void *a, const void *b) {
    /* strcmp compares bytes as unsigned char: the code point order of UTF-8 names */
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* v's strings as a sorted array of pointers into v (valid until v changes). */
static const char **sv_sorted(const strvec_t *v, err_t *e) {
    const char **p = malloc((size_t)(v->n ? v->n : 1) * sizeof *p);
    if (!p) {
        err_set(e, ERR_RUNTIME, "out of memory (file index)");
        return NULL;
    }
    for (int64_t i = 0; i < v->n; i++) p[i] = sv_at(v, i);
    qsort(p, (size_t)v->n, sizeof *p, cmp_str);
    return p;
}

/* ---- walking ---- */

static bool has_image_ext(const char *name) {
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif",
                                      ".tiff", ".webp"};
    size_t n = strlen(name);
    for (size_t k = 0; k < sizeof ext / sizeof ext[0]; k++) {
        size_t l = strlen(ext[k]), i = 0;
        if (n < l) continue;
        for (; i < l; i++) {
            char ch = name[n - l + i];
            if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
            if (ch != ext[k][i]) break;
        }
        if (i == l) return true;
    }
    return false;
}

static int join(char *out, size_t cap, const char *a, const char *b, err_t *e) {
    int n = *b ? snprintf(out, cap, "%s/%s", a, b) : snprintf(out, cap, "%s", a);
    if (n < 0 || (size_t)n >= cap) return err_set(e, ERR_INPUT, "path too long: %s/%s", a, b);
    return 0;
}

/* The directory entries of path, split into directories (links followed, as os.walk
 * with followlinks=True and os.scandir's is_dir) and other entries. */
static int list_dir(const char *path, strvec_t *dirs, strvec_t *files, err_t *e) {
    DIR *d = opendir(path);
    if (!d)
        return err_errno(e, ERR_INPUT, "image_folder: cannot read the directory %s", path);
    struct dirent *de;
    char full[PATH_MAX];
    int rc = 0;
    errno = 0;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        bool isdir = de->d_type == DT_DIR;
        if (de->d_type == DT_LNK || de->d_type == DT_UNKNOWN) {
            struct stat st;
            if (join(full, sizeof full, path, de->d_name, e)) { rc = -1; break; }
            isdir = stat(full, &st) == 0 && S_ISDIR(st.st_mode);
        }
        if (isdir) rc = dirs ? sv_push(dirs, de->d_name, e) : 0;
        else rc = files ? sv_push(files, de->d_name, e) : 0;
        errno = 0;
    }
    if (!rc && errno) rc = err_errno(e, ERR_INPUT, "image_folder: error reading the directory %s", path);
    closedir(d);
    return rc;
}

/* The fingerprint of the directories walked. */
typedef struct fp {
    strvec_t path;           /* absolute */
    int64_t *sec, *nsec;
    uint64_t *ino, *dev;
    int64_t cap;
} fp_t;

static int fp_add(fp_t *f, const char *path, const struct stat *st, err_t *e) {
    if (f->path.n == f->cap) {
        int64_t c = f->cap ? f->cap * 2 : 64;
        int64_t *s = realloc(f->sec, (size_t)c * 8), *ns = s ? realloc(f->nsec, (size_t)c * 8) : NULL;
        if (s) f->sec = s;
        if (ns) f->nsec = ns;
        uint64_t *in = ns ? realloc(f->ino, (size_t)c * 8) : NULL, *dv = in ? realloc(f->dev, (size_t)c * 8) : NULL;
        if (in) f->ino = in;
        if (dv) f->dev = dv;
        if (!dv) return err_set(e, ERR_RUNTIME, "out of memory (file index)");
        f->cap = c;
    }
    int64_t i = f->path.n;
    f->sec[i] = (int64_t)st->st_mtim.tv_sec;
    f->nsec[i] = (int64_t)st->st_mtim.tv_nsec;
    f->ino[i] = (uint64_t)st->st_ino;
    f->dev[i] = (uint64_t)st->st_dev;
    return sv_push(&f->path, path, e);
}

static void fp_free(fp_t *f) {
    sv_free(&f->path);
    free(f->sec);
    free(f->nsec);
    free(f->ino);
    free(f->dev);
    memset(f, 0, sizeof *f);
}

/* One class: every directory under base/rel (rel included), recorded in dirs (relative)
 * with its image files in files_of (one strvec per directory). */
typedef struct walk {
    const char *base;
    strvec_t dirs;
    strvec_t *files_of;
    int64_t fcap;
    fp_t *fp;
    dev_t adev[MAX_DEPTH];
    ino_t aino[MAX_DEPTH];
} walk_t;

static int walk_dir(walk_t *w, const char *rel, int depth, err_t *e) {
    char full[PATH_MAX], sub[PATH_MAX];
    if (join(full, sizeof full, w->base, rel, e)) return -1;
    struct stat st;
    if (stat(full, &st) != 0)
        return err_errno(e, ERR_INPUT, "image_folder: cannot read the directory %s", full);
    for (int i = 0; i < depth; i++)
        if (w->adev[i] == st.st_dev && w->aino[i] == st.st_ino)
            return err_set(e, ERR_INPUT, "image_folder: %s leads back to one of its parent "
                           "directories (a symbolic link loop); remove the link", full);
    if (depth >= MAX_DEPTH)
        return err_set(e, ERR_INPUT, "image_folder: %s is nested more than %d directories "
                       "deep", full, MAX_DEPTH);
    w->adev[depth] = st.st_dev;
    w->aino[depth] = st.st_ino;
    if (fp_add(w->fp, full, &st, e)) return -1;
    if (w->dirs.n == w->fcap) {
        int64_t c = w->fcap ? w->fcap * 2 : 16;
        strvec_t *f = realloc(w->files_of, (size_t)c * sizeof *f);
        if (!f) return err_set(e, ERR_RUNTIME, "out of memory (file index)");
        memset(f + w->fcap, 0, (size_t)(c - w->fcap) * sizeof *f);
        w->files_of = f;
        w->fcap = c;
    }
    int64_t me = w->dirs.n;
    if (sv_push(&w->dirs, rel, e)) return -1;
    strvec_t subs = {0}, files = {0};
    int rc = list_dir(full, &subs, &files, e);
    for (int64_t i = 0; !rc && i < files.n; i++)
        if (has_image_ext(sv_at(&files, i))) rc = sv_push(&w->files_of[me], sv_at(&files, i), e);
    for (int64_t i = 0; !rc && i < subs.n; i++) {
        if (join(sub, sizeof sub, rel, sv_at(&subs, i), e)) rc = -1;
        else rc = walk_dir(w, sub, depth + 1, e);
    }
    sv_free(&subs);
    sv_free(&files);
    return rc;
}

typedef struct ordered {
    const char *s;
    int64_t i;
} ordered_t;

static int cmp_ordered(const void *a, const void *b) {
    return strcmp(((const ordered_t *)a)->s, ((const ordered_t *)b)->s);
}

/* Appends class k's files (relative to the split) in torchvision's order. */
static int walk_class(const char *split, const char *cls, int k, fp_t *fp, strvec_t *paths,
                      int32_t **labels, int64_t *lcap, err_t *e) {
    walk_t w = {.base = split, .fp = fp};
    int rc = walk_dir(&w, cls, 0, e);
    ordered_t *order = rc ? NULL : malloc((size_t)w.dirs.n * sizeof *order);
    if (!rc && !order) rc = err_set(e, ERR_RUNTIME, "out of memory (file index)");
    for (int64_t i = 0; !rc && i < w.dirs.n; i++) order[i] = (ordered_t){sv_at(&w.dirs, i), i};
    if (!rc) qsort(order, (size_t)w.dirs.n, sizeof *order, cmp_ordered);
    char rel[PATH_MAX];
    for (int64_t i = 0; !rc && i < w.dirs.n; i++) {
        const strvec_t *files = &w.files_of[order[i].i];
        const char **names = sv_sorted(files, e);
        if (!names) { rc = -1; break; }
        for (int64_t j = 0; !rc && j < files->n; j++) {
            if (join(rel, sizeof rel, order[i].s, names[j], e)) rc = -1;
            else rc = sv_push(paths, rel, e);
            if (!rc && paths->n > *lcap) {
                int64_t c = *lcap ? *lcap * 2 : 1024;
                int32_t *l = realloc(*labels, (size_t)c * sizeof *l);
                if (!l) rc = err_set(e, ERR_RUNTIME, "out of memory (file index)");
                else *labels = l, *lcap = c;
            }
            if (!rc) (*labels)[paths->n - 1] = k;
        }
        free(names);
    }
    free(order);
    for (int64_t i = 0; i < w.fcap; i++) sv_free(&w.files_of[i]);
    free(w.files_of);
    sv_free(&w.dirs);
    return rc;
}

/* ---- checking the files' first bytes ---- */

/* What a file's check depends on, as stat gives it: a file whose stamp differs from the
 * cached one is checked again (size -1: stat failed). ctime is there too because chmod,
 * the fix for "cannot open it: Permission denied", changes only that. */
typedef struct stamp {
    int64_t size, mtime_ns, ctime_ns;
} stamp_t;

static stamp_t stamp_of(const struct stat *st) {
    return (stamp_t){(int64_t)st->st_size, (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
                     (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec};
}

/* Per-file facts of a load that the cache keeps but the index does not (freed after). */
typedef struct file_facts {
    stamp_t *stamp;          /* n */
    uint8_t *other;          /* n: a listed extension holding neither JPEG nor PNG */
} file_facts_t;

static void facts_free(file_facts_t *f) {
    free(f->stamp);
    free(f->other);
    memset(f, 0, sizeof *f);
}

typedef struct check {
    const char *split;
    const folder_index_t *ix;
    img_limits_t lim;
    bool refresh;            /* stat each file; check only those whose stamp changed */
    file_facts_t *facts;
    char **why;              /* per file, malloc'd reason for the bad ones checked now */
    int64_t next;
    int64_t changed;         /* refresh: files checked again */
    pthread_mutex_t mu;
} check_t;

static void check_one(check_t *c, int64_t i) {
    char full[PATH_MAX], msg[600];
    err_t e = {0};
    uint8_t head[64];
    struct stat st;
    msg[0] = 0;
    if (join(full, sizeof full, c->split, c->ix->paths + c->ix->path_off[i], &e)) {
        if (c->refresh) return; /* as it was */
        snprintf(msg, sizeof msg, "%.590s", e.msg);
        c->facts->stamp[i] = (stamp_t){-1, 0, 0};
    } else {
        stamp_t now = stat(full, &st) == 0 ? stamp_of(&st) : (stamp_t){-1, 0, 0};
        if (c->refresh) {
            if (!memcmp(&now, &c->facts->stamp[i], sizeof now)) return;
            pthread_mutex_lock(&c->mu);
            c->changed++;
            pthread_mutex_unlock(&c->mu);
            c->ix->status[i] = FOLDER_OK;
            c->facts->other[i] = 0;
        }
        c->facts->stamp[i] = now; /* taken before reading: a later change is noticed */
        int fd = open(full, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            snprintf(msg, sizeof msg, "cannot open it: %s", strerror(errno));
        } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            snprintf(msg, sizeof msg, "not a regular file");
        } else {
            ssize_t got = pread(fd, head, sizeof head, 0);
            img_info_t info;
            if (got < 0) snprintf(msg, sizeof msg, "cannot read it: %s", strerror(errno));
            else if (img_sniff(head, (size_t)got, &c->lim, &info, &e)) {
                snprintf(msg, sizeof msg, "%.590s", e.msg);
                c->facts->other[i] = info.format == IMG_OTHER;
            }
        }
        if (fd >= 0) close(fd);
    }
    if (msg[0]) {
        c->ix->status[i] = FOLDER_BAD;
        c->why[i] = strdup(msg);
    }
}

static void *check_main(void *arg) {
    check_t *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int64_t i = c->next;
        c->next += 64;
        pthread_mutex_unlock(&c->mu);
        if (i >= c->ix->n) return NULL;
        for (int64_t j = i; j < i + 64 && j < c->ix->n; j++) check_one(c, j);
    }
}

/* Checks every file of ix (refresh false: facts are filled), or with refresh stats every
 * file and checks again those whose stamp differs from facts' (the cached ones), keeping
 * the others' status and reason; *changed gets their count. Rebuilds the reasons,
 * n_bad and n_other. */
static int check_files(const folder_index_opts_t *o, const char *split, folder_index_t *ix, bool refresh,
                       file_facts_t *facts, int64_t *changed, err_t *e) {
    size_t n1 = (size_t)(ix->n ? ix->n : 1);
    check_t c = {.split = split, .ix = ix, .lim = o->limits, .refresh = refresh, .facts = facts};
    c.why = calloc(n1, sizeof *c.why);
    int64_t *why_off = malloc(n1 * sizeof *why_off);
    if (!refresh) {
        facts->stamp = calloc(n1, sizeof *facts->stamp);
        facts->other = calloc(n1, 1);
    }
    if (!c.why || !why_off || !facts->stamp || !facts->other) {
        free(c.why);
        free(why_off);
        return err_set(e, ERR_RUNTIME, "out of memory (file index)");
    }
    pthread_mutex_init(&c.mu, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = o->threads > 0 ? o->threads : (int)(cpus > 0 ? 2 * cpus : 4);
    if (nt > 32) nt = 32;
    if ((int64_t)nt > ix->n / 64 + 1) nt = (int)(ix->n / 64 + 1);
    pthread_t th[32];
    int started = 0;
    for (int i = 1; i < nt; i++)
        if (pthread_create(&th[started], NULL, check_main, &c) == 0) started++;
    check_main(&c);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&c.mu);
    strvec_t why = {0};
    int rc = 0;
    ix->n_bad = ix->n_other = 0;
    for (int64_t i = 0; i < ix->n; i++) {
        why_off[i] = -1;
        ix->n_other += facts->other[i];
        if (ix->status[i] != FOLDER_BAD) continue;
        ix->n_bad++;
        const char *r = c.why[i] ? c.why[i] : refresh && ix->why_off[i] >= 0 ? ix->why + ix->why_off[i]
                                                                               : "out of memory";
        if (!rc && !(rc = sv_push(&why, r, e))) why_off[i] = why.off[why.n - 1];
    }
    for (int64_t i = 0; i < ix->n; i++) free(c.why[i]);
    free(c.why);
    free(why.off);
    free(ix->why);
    free(ix->why_off);
    ix->why = why.blob;
    ix->why_off = why_off;
    if (changed) *changed = c.changed;
    return rc;
}

/* ---- the cache file ---- */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    int failed;
} wbuf_t;

static void wb_put(wbuf_t *b, const void *d, size_t n) {
    if (b->failed) return;
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 1 << 16;
        while (c < b->len + n) c *= 2;
        uint8_t *p = realloc(b->p, c);
        if (!p) { b->failed = 1; return; }
        b->p = p;
        b->cap = c;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void wb_u64(wbuf_t *b, uint64_t v) { wb_put(b, &v, 8); }
static void wb_str(wbuf_t *b, const char *s) {
    uint32_t l = (uint32_t)strlen(s);
    wb_put(b, &l, 4);
    wb_put(b, s, l);
}

typedef struct rbuf {
    const uint8_t *p;
    size_t len, at;
    int bad;
} rbuf_t;

static uint64_t rb_u64(rbuf_t *r) {
    uint64_t v = 0;
    if (r->at + 8 > r->len) r->bad = 1;
    else memcpy(&v, r->p + r->at, 8), r->at += 8;
    return v;
}

/* A string of the cache as a NUL-terminated copy into out (cap bytes). */
static void rb_str(rbuf_t *r, char *out, size_t cap) {
    uint32_t l = 0;
    out[0] = 0;
    if (r->at + 4 > r->len) { r->bad = 1; return; }
    memcpy(&l, r->p + r->at, 4);
    r->at += 4;
    if (l >= cap || r->at + l > r->len) { r->bad = 1; return; }
    memcpy(out, r->p + r->at, l);
    out[l] = 0;
    r->at += l;
}

static void cache_path(const folder_index_opts_t *o, const char *split_rp, const char *classes_rp,
                       char *out, size_t cap) {
    const char *dir = o->cache_dir && *o->cache_dir ? o->cache_dir : getenv("RUNNER_CACHE_DIR");
    char def[PATH_MAX];
    if (!dir || !*dir) {
        const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
        if (x && *x) snprintf(def, sizeof def, "%s/runner", x);
        else if (h && *h) snprintf(def, sizeof def, "%s/.cache/runner", h);
        else def[0] = 0;
        dir = def;
    }
    if (!*dir) { out[0] = 0; return; }
    uint64_t h = 1469598103934665603ULL;
    const char *parts[3] = {INDEX_MAGIC, split_rp, classes_rp};
    for (int k = 0; k < 3; k++)
        for (const unsigned char *p = (const unsigned char *)parts[k]; *p; p++) {
            h ^= *p;
            h *= 1099511628211ULL;
        }
    snprintf(out, cap, "%s/image_folder/%016llx.idx", dir, (unsigned long long)h);
}

static int cache_write(const char *path, const char *split_rp, const char *classes_rp,
                       const fp_t *fp, const folder_index_t *ix, const file_facts_t *facts, err_t *e) {
    wbuf_t b = {0};
    wb_put(&b, INDEX_MAGIC, 8);
    wb_str(&b, split_rp);
    wb_str(&b, classes_rp);
    wb_u64(&b, (uint64_t)fp->path.n);
    for (int64_t i = 0; i < fp->path.n; i++) {
        wb_str(&b, sv_at(&fp->path, i));
        wb_u64(&b, (uint64_t)fp->sec[i]);
        wb_u64(&b, (uint64_t)fp->nsec[i]);
        wb_u64(&b, fp->ino[i]);
        wb_u64(&b, fp->dev[i]);
    }
    wb_u64(&b, (uint64_t)ix->classes);
    for (int k = 0; k < ix->classes; k++) wb_str(&b, ix->class_names[k]);
    wb_u64(&b, (uint64_t)ix->n);
    for (int64_t i = 0; i < ix->n; i++) {
        wb_u64(&b, (uint64_t)(uint32_t)ix->label[i] | (uint64_t)ix->status[i] << 32 |
                   (uint64_t)facts->other[i] << 40);
        wb_str(&b, ix->paths + ix->path_off[i]);
        if (ix->status[i] == FOLDER_BAD) wb_str(&b, ix->why + ix->why_off[i]);
        wb_u64(&b, (uint64_t)facts->stamp[i].size);
        wb_u64(&b, (uint64_t)facts->stamp[i].mtime_ns);
        wb_u64(&b, (uint64_t)facts->stamp[i].ctime_ns);
    }
    uint32_t crc = b.failed ? 0 : (uint32_t)crc32(0L, b.p, (uInt)b.len);
    wb_put(&b, &crc, 4);
    if (b.failed) {
        free(b.p);
        return err_set(e, ERR_RUNTIME, "out of memory (file index cache)");
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    int rc = mkdir_p(dir, ERR_RUNTIME, e) || write_file_atomic(path, b.p, b.len, e) ? -1 : 0;
    free(b.p);
    return rc;
}

/* Loads the cache at path into ix when it is intact, describes these directories and
 * none of them changed; fp gets the directories' fingerprint and facts the files' cached
 * stamps (for check_files' refresh). 1 loaded, 0 not (ix, fp and facts untouched). */
static int cache_read(const char *path, const char *split_rp, const char *classes_rp,
                      folder_index_t *ix, fp_t *fp, file_facts_t *facts) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint8_t *p = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            uint8_t *q = realloc(p, cap);
            if (!q) { free(p); fclose(f); return 0; }
            p = q;
        }
        got = fread(p + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    fclose(f);
    uint32_t crc;
    if (len < 12 || memcmp(p, INDEX_MAGIC, 8) ||
        (memcpy(&crc, p + len - 4, 4), crc != (uint32_t)crc32(0L, p, (uInt)(len - 4)))) {
        free(p);
        return 0;
    }
    rbuf_t r = {p, len - 4, 8, 0};
    char s[PATH_MAX + 16];
    rb_str(&r, s, sizeof s);
    int ok = !r.bad && !strcmp(s, split_rp);
    rb_str(&r, s, sizeof s);
    ok = ok && !r.bad && !strcmp(s, classes_rp);
    uint64_t nd = ok ? rb_u64(&r) : 0;
    fp_t dirs = {0};
    err_t ignore = {0};
    for (uint64_t i = 0; ok && i < nd; i++) {
        rb_str(&r, s, sizeof s);
        int64_t sec = (int64_t)rb_u64(&r), nsec = (int64_t)rb_u64(&r);
        uint64_t ino = rb_u64(&r), dev = rb_u64(&r);
        struct stat st;
        ok = !r.bad && stat(s, &st) == 0 && st.st_mtim.tv_sec == sec &&
             st.st_mtim.tv_nsec == nsec && (uint64_t)st.st_ino == ino && (uint64_t)st.st_dev == dev &&
             !fp_add(&dirs, s, &st, &ignore);
    }
    folder_index_t x = {0};
    uint64_t nc = ok ? rb_u64(&r) : 0;
    ok = ok && !r.bad && nc > 0 && nc < (1u << 24);
    if (ok) ok = (x.class_names = calloc(nc, sizeof *x.class_names)) != NULL;
    x.classes = ok ? (int)nc : 0;
    for (uint64_t k = 0; ok && k < nc; k++) {
        rb_str(&r, s, sizeof s);
        ok = !r.bad && (x.class_names[k] = strdup(s)) != NULL;
    }
    uint64_t n = ok ? rb_u64(&r) : 0;
    ok = ok && !r.bad && n < ((uint64_t)1 << 40) && n * 32 <= r.len;
    strvec_t paths = {0}, why = {0};
    file_facts_t ff = {0};
    if (ok) {
        x.label = malloc((n ? n : 1) * sizeof *x.label);
        x.status = malloc(n ? n : 1);
        x.why_off = malloc((n ? n : 1) * sizeof *x.why_off);
        ff.stamp = malloc((n ? n : 1) * sizeof *ff.stamp);
        ff.other = malloc(n ? n : 1);
        ok = x.label && x.status && x.why_off && ff.stamp && ff.other;
    }
    for (uint64_t i = 0; ok && i < n; i++) {
        uint64_t v = rb_u64(&r);
        x.label[i] = (int32_t)(uint32_t)v;
        x.status[i] = (uint8_t)(v >> 32);
        ff.other[i] = (uint8_t)(v >> 40);
        x.n_other += ff.other[i];
        rb_str(&r, s, sizeof s);
        ok = !r.bad && x.label[i] >= 0 && x.label[i] < x.classes && x.status[i] <= FOLDER_BAD &&
             ff.other[i] <= 1 && v >> 41 == 0 && !sv_push(&paths, s, &ignore);
        x.why_off[i] = -1;
        if (ok && x.status[i] == FOLDER_BAD) {
            rb_str(&r, s, sizeof s);
            ok = !r.bad && !sv_push(&why, s, &ignore);
            x.why_off[i] = ok ? why.off[why.n - 1] : -1;
            x.n_bad++;
        }
        ff.stamp[i].size = (int64_t)rb_u64(&r);
        ff.stamp[i].mtime_ns = (int64_t)rb_u64(&r);
        ff.stamp[i].ctime_ns = (int64_t)rb_u64(&r);
        ok = ok && !r.bad;
    }
    ok = ok && r.at == r.len;
    free(p);
    x.n = ok ? (int64_t)n : 0;
    x.paths = paths.blob;
    x.path_off = paths.off;
    x.why = why.blob;
    free(why.off);
    if (!ok) {
        folder_index_free(&x);
        facts_free(&ff);
        fp_free(&dirs);
        return 0;
    }
    *ix = x;
    *fp = dirs;
    *facts = ff;
    return 1;
}

/* ---- building ---- */

/* The class list: directories of classes_dir, sorted. */
static int list_classes(const char *dir, strvec_t *names, const char ***sorted, err_t *e) {
    if (list_dir(dir, names, NULL, e)) return -1;
    if (!names->n)
        return err_set(e, ERR_INPUT, "image_folder: no class folders in %s: put each class's "
                       "images in a folder of its own (%s/<class>/<image>), as torchvision's "
                       "ImageFolder expects", dir, dir);
    return (*sorted = sv_sorted(names, e)) ? 0 : -1;
}

static int build(const folder_index_opts_t *o, const char *split, const char *classes_dir,
                 fp_t *fp, folder_index_t *ix, file_facts_t *facts, err_t *e) {
    strvec_t names = {0}, paths = {0}, own = {0};
    const char **cls = NULL, **mine = NULL;
    int32_t *labels = NULL;
    int64_t lcap = 0;
    struct stat st;
    int rc = list_classes(classes_dir, &names, &cls, e);
    bool is_train = !strcmp(split, classes_dir);
    if (!rc && !is_train) { /* the val split: its folders must be train's classes */
        if (stat(classes_dir, &st) == 0) rc = fp_add(fp, classes_dir, &st, e);
        if (!rc && stat(split, &st) == 0) rc = fp_add(fp, split, &st, e);
        if (!rc) rc = list_dir(split, &own, NULL, e);
        if (!rc && !(mine = sv_sorted(&own, e))) rc = -1;
        for (int64_t i = 0; !rc && i < own.n; i++)
            if (!bsearch(&mine[i], cls, (size_t)names.n, sizeof *cls, cmp_str))
                rc = err_set(e, ERR_INPUT, "image_folder: %s/%s is not a class of the training "
                             "split %s (its labels come from there); rename or remove it",
                             split, mine[i], classes_dir);
    } else if (!rc && stat(split, &st) == 0) {
        rc = fp_add(fp, split, &st, e);
    }
    char sub[PATH_MAX];
    int64_t empty = 0;
    char empties[512] = "";
    for (int64_t k = 0; !rc && k < names.n; k++) {
        int64_t before = paths.n;
        if (join(sub, sizeof sub, split, cls[k], e)) { rc = -1; break; }
        if (!is_train && (stat(sub, &st) != 0 || !S_ISDIR(st.st_mode))) continue;
        rc = walk_class(split, cls[k], (int)k, fp, &paths, &labels, &lcap, e);
        if (!rc && is_train && paths.n == before) {
            size_t l = strlen(empties);
            if (empty++ < 5) snprintf(empties + l, sizeof empties - l, "%s%s", l ? ", " : "", cls[k]);
        }
    }
    if (!rc && empty)
        rc = err_set(e, ERR_INPUT, "image_folder: %lld class folder%s in %s ha%s no image files "
                     "(%s%s; torchvision's extensions: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff "
                     ".webp): add images or remove the folder%s", (long long)empty,
                     empty == 1 ? "" : "s", split, empty == 1 ? "s" : "ve", empties,
                     empty > 5 ? ", ..." : "", empty == 1 ? "" : "s");
    if (!rc) {
        ix->classes = (int)names.n;
        ix->class_names = calloc((size_t)names.n, sizeof *ix->class_names);
        if (!ix->class_names) rc = err_set(e, ERR_RUNTIME, "out of memory (file index)");
        for (int64_t k = 0; !rc && k < names.n; k++)
            if (!(ix->class_names[k] = strdup(cls[k])))
                rc = err_set(e, ERR_RUNTIME, "out of memory (file index)");
    }
    ix->n = paths.n;
    ix->paths = paths.blob;
    ix->path_off = paths.off;
    ix->label = labels;
    if (!rc && !(ix->status = calloc((size_t)(ix->n ? ix->n : 1), 1)))
        rc = err_set(e, ERR_RUNTIME, "out of memory (file index)");
    if (!rc && !ix->label && !(ix->label = malloc(4)))
        rc = err_set(e, ERR_RUNTIME, "out of memory (file index)");
    if (!rc) rc = check_files(o, split, ix, false, facts, NULL, e);
    free(cls);
    free(mine);
    sv_free(&names);
    sv_free(&own);
    return rc;
}

int folder_index_load(const folder_index_opts_t *o, folder_index_t *ix, dataset_notes_t *notes,
                      err_t *e) {
    memset(ix, 0, sizeof *ix);
    char split[PATH_MAX], classes[PATH_MAX], cpath[PATH_MAX + 64];
    struct stat st;
    if (!realpath(o->split_dir, split) || stat(split, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_errno(e, ERR_INPUT, "image_folder: %s is not a directory (data.root joined "
                         "with data.%s)", o->split_dir,
                         strcmp(o->split_dir, o->classes_dir) ? "val_dir" : "train_dir");
    if (!realpath(o->classes_dir, classes))
        return err_errno(e, ERR_INPUT, "image_folder: the training split %s is not a directory "
                         "(the class list comes from it)", o->classes_dir);
    cache_path(o, split, classes, cpath, sizeof cpath);
    snprintf(notes->index_path, sizeof notes->index_path, "%s", cpath);
    fp_t fp = {0};
    file_facts_t facts = {0};
    int rc = 0;
    int64_t changed = 0;
    if (cpath[0] && cache_read(cpath, split, classes, ix, &fp, &facts)) {
        /* the tree is as it was; a file rewritten in place shows in its own stamp */
        notes->index_reused = true;
        rc = check_files(o, split, ix, true, &facts, &changed, e);
        notes->index_rechecked = changed;
    } else {
        rc = build(o, split, classes, &fp, ix, &facts, e);
    }
    if (!rc && cpath[0] && !o->cache_read_only && (!notes->index_reused || changed)) {
        err_t ce = {0};
        if (cache_write(cpath, split, classes, &fp, ix, &facts, &ce)) notes->index_path[0] = 0;
    }
    fp_free(&fp);
    facts_free(&facts);
    if (rc) folder_index_free(ix);
    notes->other_formats = ix->n_other;
    return rc;
}

void folder_index_free(folder_index_t *ix) {
    if (!ix) return;
    for (int k = 0; ix->class_names && k < ix->classes; k++) free(ix->class_names[k]);
    free(ix->class_names);
    free(ix->paths);
    free(ix->path_off);
    free(ix->label);
    free(ix->status);
    free(ix->why);
    free(ix->why_off);
    memset(ix, 0, sizeof *ix);
}
