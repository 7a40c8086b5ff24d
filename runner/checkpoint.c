/* checkpoint.c: writer and reader of the sectioned checkpoint format (checkpoint.h). */
#include "runner/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

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

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

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
        return err_errno(e, ERR_RUNTIME, "%s: cannot create checkpoint", tmp);
    }
    static const unsigned char zeros[ALIGN] = {0};
    int rc = write_all(fd, head, meta);
    uint64_t pos = meta;
    for (int i = 0; i < n && rc == 0; i++) {
        uint64_t start = align_up(pos);
        rc = write_all(fd, zeros, (size_t)(start - pos));
        if (rc == 0) rc = write_all(fd, sections[i].data, (size_t)sections[i].size);
        pos = start + sections[i].size;
    }
    free(head);
    if (rc == 0 && fsync(fd) != 0) rc = -1;
    if (rc != 0) {
        err_errno(e, ERR_RUNTIME, "%s: writing checkpoint failed (disk full?)", tmp);
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        err_errno(e, ERR_RUNTIME, "%s: cannot move checkpoint into place", path);
        unlink(tmp);
        return -1;
    }
    /* make the rename durable */
    char dirbuf[1100];
    snprintf(dirbuf, sizeof dirbuf, "%s", path);
    int dfd = open(dirname(dirbuf), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
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
    ckpt_t *c = calloc(1, sizeof *c);
    if (!c) { err_set(e, ERR_RUNTIME, "out of memory reading %s", path); return NULL; }
    snprintf(c->path, sizeof c->path, "%s", path);
    FILE *f = fopen(path, "rb");
    if (!f) { err_errno(e, ERR_INPUT, "%s: cannot open checkpoint", path); free(c); return NULL; }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        err_set(e, ERR_INPUT, "%s: not a regular file", path);
        fclose(f); free(c); return NULL;
    }
    c->image_size = (size_t)st.st_size;
    c->image = malloc(c->image_size ? c->image_size : 1);
    if (!c->image) {
        err_set(e, ERR_RUNTIME, "out of memory reading %s (%zu bytes)", path, c->image_size);
        fclose(f); free(c); return NULL;
    }
    size_t got = fread(c->image, 1, c->image_size, f);
    fclose(f);
    const unsigned char *img = c->image;
    if (got != c->image_size) { err_set(e, ERR_INPUT, "%s: read error", path); goto fail; }
    if (got < HEADER_BYTES + 4 || memcmp(img, CKPT_MAGIC, 8) != 0) {
        err_set(e, ERR_INPUT, "%s: not a runner checkpoint (bad magic); point resume at a .ckpt file written by runner", path);
        goto fail;
    }
    uint32_t version = get_u32(img + 8), n = get_u32(img + 12);
    if (version != CKPT_VERSION) {
        err_set(e, ERR_INPUT, "%s: checkpoint format version %u, this runner reads version %u", path, version, CKPT_VERSION);
        goto fail;
    }
    if (n > CKPT_MAX_SECTIONS) { err_set(e, ERR_INPUT, "%s: corrupt header (%u sections)", path, n); goto fail; }
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
                    path, s->name, (unsigned long long)off, (unsigned long long)(off + size), got);
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
