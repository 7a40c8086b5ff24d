/* tar.c: safe extraction of .tar.gz / .tar archives (ustar, GNU and pax headers).
 *
 * Reads through zlib's gz* functions (which read uncompressed files transparently).
 * Supported entries: regular files ('0', '\0', '7'), directories ('5'), GNU long names
 * ('L'), pax extended headers ('x': path, size; 'g' ignored). Refused, failing the whole
 * extraction: absolute paths, `..` components, symbolic and hard links ('2', '1'; none of
 * the dataset archives has any, and refusing them all means nothing written can point
 * outside the destination), device files and fifos, bad header checksums, truncation,
 * corrupt gzip data, duplicate files. The caller extracts into a fresh temporary
 * directory and removes it on failure (download.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/download.h"

#define TAR_PATH 4096
/* Bounds of what one archive may extract (checked before writing): CIFAR-100 is 3 files and
 * 185 MB; these allow any plausible dataset archive and stop a corrupt or hostile one. */
#define TAR_MAX_ENTRIES 1000000
#define TAR_MAX_BYTES ((uint64_t)64 << 30)

typedef struct tar_reader {
    gzFile f;
    const char *archive;
    err_t *e;
} tar_reader_t;

/* Reads exactly n bytes; 0, or -1 with a truncation / gzip message. */
static int tread(tar_reader_t *t, void *buf, size_t n, const char *what) {
    size_t got = 0;
    while (got < n) {
        int r = gzread(t->f, (uint8_t *)buf + got, (unsigned)(n - got > (1u << 30) ? (1u << 30)
                                                                                 : n - got));
        if (r < 0) {
            int z;
            return err_set(t->e, ERR_INPUT, "%s: corrupt gzip data while reading %s (%s)",
                           t->archive, what, gzerror(t->f, &z));
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    if (got < n) {
        int z;
        const char *m = gzerror(t->f, &z);
        return err_set(t->e, ERR_INPUT, "%s: archive is truncated while reading %s%s%s",
                       t->archive, what, z != Z_OK ? " (" : "", z != Z_OK ? m : "");
    }
    return 0;
}

/* Parses a numeric header field: octal text, or GNU base-256 when the high bit is set. */
static int parse_num(const uint8_t *p, int len, uint64_t *out) {
    uint64_t v = 0;
    if (p[0] & 0x80) {
        for (int i = 1; i < len; i++) v = v << 8 | p[i];
        v |= (uint64_t)(p[0] & 0x3f) << (8 * (len - 1));
        *out = v;
        return 0;
    }
    int i = 0;
    while (i < len && p[i] == ' ') i++;
    int digits = 0;
    for (; i < len && p[i] >= '0' && p[i] <= '7'; i++, digits++) v = v * 8 + (uint64_t)(p[i] - '0');
    for (; i < len; i++)
        if (p[i] != ' ' && p[i] != 0) return -1;
    *out = v;
    return digits ? 0 : (len == 12 ? -1 : 0);
}

/* Rejects unsafe names; writes the cleaned relative path ("./" and empty parts dropped). */
static int clean_path(tar_reader_t *t, const char *name, char *out, size_t len) {
    if (name[0] == '/')
        return err_set(t->e, ERR_INPUT, "%s: refusing entry \"%s\": absolute path",
                       t->archive, name);
    size_t o = 0;
    const char *p = name;
    while (*p) {
        const char *s = strchr(p, '/');
        size_t n = s ? (size_t)(s - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return err_set(t->e, ERR_INPUT, "%s: refusing entry \"%s\": `..` path component",
                           t->archive, name);
        if (n && !(n == 1 && p[0] == '.')) {
            if (o + n + 2 > len)
                return err_set(t->e, ERR_INPUT, "%s: entry name too long", t->archive);
            if (o) out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
        if (*p == '/') p++;
    }
    out[o] = 0;
    return 0;
}

/* Creates every missing directory of rel (a cleaned path) under dest; the last component
 * too when last is set. */
static int make_dirs(tar_reader_t *t, const char *dest, const char *rel, int last) {
    char p[TAR_PATH * 2];
    int n = snprintf(p, sizeof p, "%s/%s", dest, rel);
    if (n < 0 || (size_t)n >= sizeof p)
        return err_set(t->e, ERR_INPUT, "%s: path too long", t->archive);
    size_t base = strlen(dest) + 1;
    for (size_t i = base; i <= (size_t)n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        if (p[i] == 0 && !last) break;
        char save = p[i];
        p[i] = 0;
        struct stat st;
        if (lstat(p, &st) != 0) {
            if (mkdir(p, 0755) != 0) return err_errno(t->e, ERR_RUNTIME, "cannot create %s", p);
        } else if (!S_ISDIR(st.st_mode)) {
            return err_set(t->e, ERR_INPUT, "%s: entry \"%s\" needs %s to be a directory",
                           t->archive, rel, p);
        }
        p[i] = save;
    }
    return 0;
}

/* Copies size bytes of entry data (plus padding to 512) to path, or skips them if fd < 0. */
static int copy_data(tar_reader_t *t, int fd, uint64_t size, const char *name) {
    uint8_t buf[1 << 16];
    uint64_t left = (size + 511) / 512 * 512, data_left = size;
    while (left) {
        size_t n = left > sizeof buf ? sizeof buf : (size_t)left;
        if (tread(t, buf, n, name)) return -1;
        size_t w = data_left < n ? (size_t)data_left : n;
        if (fd >= 0 && w) {
            size_t off = 0;
            while (off < w) {
                ssize_t r = write(fd, buf + off, w - off);
                if (r < 0) return err_errno(t->e, ERR_RUNTIME, "writing %s", name);
                off += (size_t)r;
            }
        }
        data_left -= w;
        left -= n;
    }
    return 0;
}

/* Reads a pax extended header's records, taking path and size. */
static int read_pax(tar_reader_t *t, uint64_t size, char *path, size_t plen, int64_t *psize) {
    if (size > (1u << 20)) return err_set(t->e, ERR_INPUT, "%s: pax header too large", t->archive);
    uint64_t padded = (size + 511) / 512 * 512;
    char *buf = malloc(padded + 1);
    if (!buf) return err_set(t->e, ERR_RUNTIME, "out of memory");
    if (tread(t, buf, padded, "a pax header")) { free(buf); return -1; }
    buf[size] = 0;
    size_t at = 0;
    while (at < size) {
        char *end;
        unsigned long len = strtoul(buf + at, &end, 10);
        if (len == 0 || at + len > size || *end != ' ') break;
        char *kv = end + 1, *rec_end = buf + at + len - 1; /* the '\n' */
        if (rec_end < kv) break;   /* a length shorter than "<len> " itself */
        char *eq = memchr(kv, '=', (size_t)(rec_end - kv));
        if (eq) {
            size_t kl = (size_t)(eq - kv), vl = (size_t)(rec_end - eq - 1);
            if (kl == 4 && !memcmp(kv, "path", 4) && vl < plen) {
                memcpy(path, eq + 1, vl);
                path[vl] = 0;
            } else if (kl == 4 && !memcmp(kv, "size", 4)) {
                *psize = strtoll(eq + 1, NULL, 10);
            } else if (kl == 8 && !memcmp(kv, "linkpath", 8)) {
                /* links are refused anyway */
            }
        }
        at += len;
    }
    free(buf);
    return 0;
}

int tar_extract(const char *archive, const char *dest, err_t *e) {
    int fd = open(archive, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_errno(e, ERR_INPUT, "cannot open archive %s", archive);
    int rc = tar_extract_fd(fd, archive, dest, e);
    close(fd);
    return rc;
}

int tar_extract_fd(int fd, const char *archive, const char *dest, err_t *e) {
    /* gzdopen takes over the descriptor it is given; the caller keeps its own */
    int own = dup(fd);
    if (own < 0) return err_errno(e, ERR_RUNTIME, "%s: dup", archive);
    tar_reader_t t = {gzdopen(own, "rb"), archive, e};
    if (!t.f) {
        close(own);
        return err_errno(e, ERR_INPUT, "cannot open archive %s", archive);
    }
    gzbuffer(t.f, 1 << 17);
    uint64_t total = 0;
    char long_name[TAR_PATH] = "", pax_path[TAR_PATH] = "";
    int64_t pax_size = -1;
    int rc = -1, entries = 0;
    uint8_t h[512];
    for (;;) {
        if (tread(&t, h, 512, "a header")) goto done;
        int zero = 1;
        for (int i = 0; i < 512 && zero; i++) zero = h[i] == 0;
        if (zero) break; /* end of archive */
        uint64_t sum = 0, want;
        for (int i = 0; i < 512; i++) sum += (i >= 148 && i < 156) ? ' ' : h[i];
        if (parse_num(h + 148, 8, &want) || want != sum) {
            err_set(e, ERR_INPUT, "%s: entry %d: bad tar header checksum (not a tar archive, "
                    "or corrupt)", archive, entries + 1);
            goto done;
        }
        uint64_t size;
        if (parse_num(h + 124, 12, &size)) {
            err_set(e, ERR_INPUT, "%s: entry %d: bad size field", archive, entries + 1);
            goto done;
        }
        char type = (char)h[156];
        if (type == 'L' || type == 'K') {  /* GNU long name / long link name */
            if (size >= TAR_PATH) { err_set(e, ERR_INPUT, "%s: long name too long", archive); goto done; }
            char buf[TAR_PATH + 512];
            if (tread(&t, buf, (size + 511) / 512 * 512, "a long name")) goto done;
            if (type == 'L') { memcpy(long_name, buf, size); long_name[size] = 0; }
            continue;
        }
        if (type == 'x') {
            if (read_pax(&t, size, pax_path, sizeof pax_path, &pax_size)) goto done;
            continue;
        }
        if (type == 'g') {
            if (copy_data(&t, -1, size, "a pax global header")) goto done;
            continue;
        }
        char name[TAR_PATH];
        if (pax_path[0]) snprintf(name, sizeof name, "%s", pax_path);
        else if (long_name[0]) snprintf(name, sizeof name, "%s", long_name);
        else {
            char n100[101], pre[156];
            memcpy(n100, h, 100); n100[100] = 0;
            memcpy(pre, h + 345, 155); pre[155] = 0;
            if (!memcmp(h + 257, "ustar", 5) && pre[0] && h[257 + 5] == 0)
                snprintf(name, sizeof name, "%s/%s", pre, n100);
            else
                snprintf(name, sizeof name, "%s", n100);
        }
        if (pax_size >= 0) size = (uint64_t)pax_size;
        long_name[0] = pax_path[0] = 0;
        pax_size = -1;
        entries++;
        if (entries > TAR_MAX_ENTRIES) {
            err_set(e, ERR_INPUT, "%s: more than %d entries (TAR_MAX_ENTRIES); not a dataset archive",
                    archive, TAR_MAX_ENTRIES);
            goto done;
        }
        if (size > TAR_MAX_BYTES || total + size > TAR_MAX_BYTES) {
            err_set(e, ERR_INPUT, "%s: entry \"%.200s\" takes the extracted size past %llu bytes "
                    "(TAR_MAX_BYTES); not a dataset archive", archive, name,
                    (unsigned long long)TAR_MAX_BYTES);
            goto done;
        }
        total += size;
        char rel[TAR_PATH];
        if (clean_path(&t, name, rel, sizeof rel)) goto done;
        if (type == '1' || type == '2') {
            char link[101];
            memcpy(link, h + 157, 100); link[100] = 0;
            err_set(e, ERR_INPUT, "%s: refusing entry \"%s\": %s link to \"%s\" (links are not "
                    "allowed in dataset archives)", archive, name, type == '2' ? "symbolic"
                    : "hard", link);
            goto done;
        }
        if (type == '5') {
            if (rel[0] && make_dirs(&t, dest, rel, 1)) goto done;
            if (copy_data(&t, -1, size, name)) goto done;
            continue;
        }
        if (type != '0' && type != 0 && type != '7') {
            err_set(e, ERR_INPUT, "%s: refusing entry \"%s\": type '%c' is not a regular file "
                    "or directory", archive, name, type);
            goto done;
        }
        if (!rel[0]) {
            err_set(e, ERR_INPUT, "%s: entry %d has an empty name", archive, entries);
            goto done;
        }
        if (make_dirs(&t, dest, rel, 0)) goto done;
        char path[TAR_PATH * 2];
        snprintf(path, sizeof path, "%s/%s", dest, rel);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) {
            if (errno == EEXIST)
                err_set(e, ERR_INPUT, "%s: entry \"%s\" appears twice", archive, name);
            else
                err_errno(e, ERR_RUNTIME, "cannot create %s", path);
            goto done;
        }
        int crc = copy_data(&t, fd, size, name);
        if (close(fd) != 0 && !crc) crc = err_errno(e, ERR_RUNTIME, "closing %s", path);
        if (crc) goto done;
    }
    if (entries == 0) {
        err_set(e, ERR_INPUT, "%s: the archive is empty", archive);
        goto done;
    }
    rc = 0;
done:
    gzclose(t.f);
    return rc;
}
