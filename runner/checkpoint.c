/* checkpoint.c: writer and reader of the sectioned checkpoint format (checkpoint.h). */
#include "runner/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>
#include <zlib.h>

#include "util/fs.h"
#include "util/json.h"

enum { HEADER_BYTES = 32, TOC_ENTRY_BYTES = 64, ALIGN = 64 };

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* CRC-32 (zlib's polynomial) over any length, in chunks zlib's uInt can take. */
static uint32_t crc32_big(const void *data, uint64_t size) {
    uLong crc = crc32(0L, Z_NULL, 0);
    const Bytef *p = data;
    while (size) {
        uInt chunk = size > (1u << 30) ? (1u << 30) : (uInt)size;
        crc = crc32(crc, p, chunk);
        p += chunk;
        size -= chunk;
    }
    return (uint32_t)crc;
}

static uint64_t align_up(uint64_t v) { return (v + ALIGN - 1) / ALIGN * ALIGN; }

int ckpt_write(const char *path, uint64_t config_hash, const ckpt_section_t *sections, int n,
               err_t *e) {
    if (n < 0 || n > CKPT_MAX_SECTIONS)
        return err_set(e, ERR_RUNTIME, "%s: %d sections (at most %d)", path, n, CKPT_MAX_SECTIONS);
    size_t meta = HEADER_BYTES + (size_t)n * TOC_ENTRY_BYTES + 4;
    unsigned char *head = calloc(1, meta);
    if (!head) return err_set(e, ERR_RUNTIME, "out of memory writing %s", path);
    memcpy(head, CKPT_MAGIC, 8);
    put_u32(head + 8, CKPT_VERSION);
    put_u32(head + 12, (uint32_t)n);
    put_u64(head + 16, config_hash);
    uint64_t off = align_up(meta);
    for (int i = 0; i < n; i++) {
        unsigned char *t = head + HEADER_BYTES + (size_t)i * TOC_ENTRY_BYTES;
        strncpy((char *)t, sections[i].name, CKPT_NAME_MAX - 1);
        put_u64(t + 40, off);
        put_u64(t + 48, sections[i].size);
        put_u32(t + 56, crc32_big(sections[i].data, sections[i].size));
        off = align_up(off + sections[i].size);
    }
    put_u32(head + meta - 4, crc32_big(head, meta - 4));

    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(head);
        return err_errno(e, ERR_RUNTIME, "%s: cannot create the checkpoint's temporary file %s", path, tmp);
    }
    static const unsigned char zeros[ALIGN] = {0};
    int rc = write_all_fd(fd, head, meta);
    uint64_t pos = meta;
    for (int i = 0; i < n && rc == 0; i++) {
        uint64_t start = align_up(pos);
        rc = write_all_fd(fd, zeros, (size_t)(start - pos));
        if (rc == 0) rc = write_all_fd(fd, sections[i].data, (size_t)sections[i].size);
        pos = start + sections[i].size;
    }
    free(head);
    const char *step = "writing";
    if (rc == 0 && fsync(fd) != 0) rc = -1, step = "syncing";
    if (rc == 0 && close(fd) != 0) rc = -1, step = "closing", fd = -1;
    if (rc != 0) {
        /* the temporary file goes; the previous checkpoint at path is untouched */
        err_errno(e, ERR_RUNTIME, "%s: cannot write the checkpoint (%s %s failed)", path, step, tmp);
        if (fd >= 0) close(fd);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        err_errno(e, ERR_RUNTIME, "%s: cannot move the checkpoint into place (rename of %s)", path, tmp);
        unlink(tmp);
        return -1;
    }
    /* make the rename durable */
    if (fsync_parent_dir(path) != 0)
        return err_errno(e, ERR_RUNTIME, "%s: cannot sync the checkpoint's directory", path);
    return 0;
}

int ckpt_read_config_hash(const char *path, uint64_t *hash) {
    unsigned char head[HEADER_BYTES];
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    if (got != sizeof head || memcmp(head, CKPT_MAGIC, 8) != 0 || get_u32(head + 8) != CKPT_VERSION) return -1;
    *hash = get_u64(head + 16);
    return 0;
}

ckpt_t *ckpt_read(const char *path, err_t *e) {
    char *image;
    size_t size;
    if (read_file_bounded(path, CKPT_MAX_BYTES, "checkpoints (CKPT_MAX_BYTES)", ERR_INPUT, &image, &size, e))
        return NULL;
    return ckpt_parse(path, image, size, e);
}

ckpt_t *ckpt_parse(const char *path, void *image, size_t size, err_t *e) {
    ckpt_t *c = calloc(1, sizeof *c);
    if (!c) { free(image); err_set(e, ERR_RUNTIME, "out of memory reading %s", path); return NULL; }
    snprintf(c->path, sizeof c->path, "%s", path);
    c->image = image;
    c->image_size = size;
    size_t got = size;
    const unsigned char *img = c->image;
    if (got < HEADER_BYTES + 4 || memcmp(img, CKPT_MAGIC, 8) != 0) {
        err_set(e, ERR_INPUT, "%s: not a runner checkpoint (bad magic); point resume at a .ckpt file written by runner", path);
        goto fail;
    }
    uint32_t version = get_u32(img + 8), n = get_u32(img + 12);
    if (version != CKPT_VERSION) {
        err_set(e, ERR_INPUT, "%s: checkpoint format version %u, this runner reads version %u", path, version, CKPT_VERSION);
        goto fail;
    }
    if (n > CKPT_MAX_SECTIONS) {
        err_set(e, ERR_INPUT, "%s: corrupt header (%u sections, at most %d: CKPT_MAX_SECTIONS)", path, n,
                CKPT_MAX_SECTIONS);
        goto fail;
    }
    size_t meta = HEADER_BYTES + (size_t)n * TOC_ENTRY_BYTES + 4;
    if (got < meta) { err_set(e, ERR_INPUT, "%s: truncated: %zu bytes, header alone needs %zu", path, got, meta); goto fail; }
    if (crc32_big(img, meta - 4) != get_u32(img + meta - 4)) {
        err_set(e, ERR_INPUT, "%s: header CRC mismatch (file corrupt)", path);
        goto fail;
    }
    c->config_hash = get_u64(img + 16);
    c->n = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *t = img + HEADER_BYTES + (size_t)i * TOC_ENTRY_BYTES;
        ckpt_section_t *s = &c->sections[i];
        memcpy(s->name, t, CKPT_NAME_MAX);
        s->name[CKPT_NAME_MAX - 1] = '\0';
        uint64_t off = get_u64(t + 40), size = get_u64(t + 48);
        if (off > got || size > got - off) {
            err_set(e, ERR_INPUT, "%s: truncated: section '%s' needs bytes %llu..%llu, file has %zu",
                    path, s->name, (unsigned long long)off, (unsigned long long)off + (unsigned long long)size, got);
            goto fail;
        }
        s->data = img + off;
        s->size = size;
        if (crc32_big(s->data, size) != get_u32(t + 56)) {
            err_set(e, ERR_INPUT, "%s: section '%s' CRC mismatch (file corrupt)", path, s->name);
            goto fail;
        }
    }
    return c;
fail:
    free(c->image);
    free(c);
    return NULL;
}

void ckpt_free(ckpt_t *c) {
    if (!c) return;
    free(c->image);
    free(c);
}

const ckpt_section_t *ckpt_find(const ckpt_t *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->sections[i].name, name)) return &c->sections[i];
    return NULL;
}

int ckpt_get(const ckpt_t *c, const char *name, void *dst, size_t size, err_t *e) {
    const ckpt_section_t *s = ckpt_find(c, name);
    if (!s) return err_set(e, ERR_INPUT, "%s: section '%s' missing", c->path, name);
    if (s->size != size)
        return err_set(e, ERR_INPUT, "%s: section '%s' has %llu bytes, expected %zu (was it written for another model?)",
                       c->path, name, (unsigned long long)s->size, size);
    memcpy(dst, s->data, size);
    return 0;
}

/* Bounds of the meta section's numbers (see checkpoint.h): the counts and sizes resume
 * and export convert to integers, and the keys known to hold doubles. */
typedef struct meta_bound {
    const char *key;
    double lo, hi;
} meta_bound_t;

#define BIG 9007199254740992.0   /* 2^53: doubles hold every integer up to here */
static const meta_bound_t META_INTS[] = {
    {"in_channels", 1, 4096},      {"num_classes", 1, 1 << 24},    {"in_h", 1, 8192},
    {"in_w", 1, 8192},             {"param_count", 0, BIG},        {"buffer_count", 0, BIG},
    {"data_world_size", 1, 1 << 20}, {"steps_per_epoch", 0, BIG},  {"step", 0, BIG},
    {"epoch", 0, 1 << 30},         {"start_batch", 0, BIG},        {"ep_correct", 0, BIG},
    {"ep_samples", 0, BIG},        {"best_epoch", 0, 1 << 30},     {"epochs_timed", 0, 1 << 30},
    {"growth_tracker", 0, BIG},    {"optim_steps", 0, BIG},        {"best_value_epoch", 0, 1 << 30},
    {"es_best_epoch", 0, 1 << 30}, {"es_wait", 0, 1 << 30},  {"steady_steps", 0, BIG},
    {"warmup_steps", 0, BIG},      {"groups", 0, 1 << 20},
};
/* numbers that are not counts: any finite value (JSON has no infinity: the writer puts
 * null for a non-finite value and the parser refuses 1e999) */
static const char *const META_DOUBLES[] = {
    "ep_loss_sum", "ep_seconds", "best_val_top1", "val_top1", "epoch_seconds_sum", "loss_scale",
    "best_value", "val_top1_ema", "best_val_top1_ema", "es_best", "steady_images", "steady_seconds",
    "warmup_images", "warmup_seconds", "width", "dropout", NULL};

int ckpt_meta_check(const char *path, const json_t *m, err_t *e) {
    if (!m || m->type != JSON_OBJECT)
        return err_set(e, ERR_INPUT, "%s: meta is not a JSON object; the checkpoint is corrupt", path);
    for (size_t i = 0; i < m->count; i++) {
        const char *k = m->keys[i];
        const json_t *v = m->items[i];
        if (!strcmp(k, "bn_counters")) {
            if (v->type != JSON_ARRAY || v->count > CKPT_META_MAX_COUNTERS)
                return err_set(e, ERR_INPUT, "%s: meta: bn_counters is not an array of at most %d numbers "
                               "(CKPT_META_MAX_COUNTERS); the checkpoint is corrupt", path, CKPT_META_MAX_COUNTERS);
            for (size_t j = 0; j < v->count; j++) {
                const json_t *x = v->items[j];
                if (x->type != JSON_NUMBER || !(x->number >= 0 && x->number <= BIG) || x->number != floor(x->number))
                    return err_set(e, ERR_INPUT, "%s: meta: bn_counters[%zu] is not a whole number in [0, 2^53]; "
                                   "the checkpoint is corrupt", path, j);
            }
            continue;
        }
        if (v->type != JSON_NUMBER) continue;
        bool dbl = false;
        for (int d = 0; META_DOUBLES[d] && !dbl; d++) dbl = !strcmp(k, META_DOUBLES[d]);
        if (dbl) continue;
        const meta_bound_t *mb = NULL;
        for (size_t b = 0; b < sizeof META_INTS / sizeof META_INTS[0]; b++)
            if (!strcmp(k, META_INTS[b].key)) mb = &META_INTS[b];
        /* a key this reader does not know (a newer writer's): a fraction is a double; a
         * whole number must at least fit an int64 */
        if (!mb && v->number != floor(v->number)) continue;
        double lo = mb ? mb->lo : -BIG, hi = mb ? mb->hi : BIG;
        if (!(v->number >= lo && v->number <= hi) || v->number != floor(v->number))
            return err_set(e, ERR_INPUT, "%s: meta: %s is %g, not a whole number in [%.0f, %.0f]; the checkpoint "
                           "is corrupt", path, k, v->number, lo, hi);
    }
    return 0;
}
