/* safetensors.c: reading/validating and writing safetensors files, and net weights I/O.
 *
 * The reader loads the whole file, parses the JSON header with util/json and
 * checks every tensor entry (dtype, shape, byte range inside the data section, no
 * overlaps) before anything uses it. The writer emits the header padded with spaces to
 * a multiple of 8 bytes (as the reference implementation does), then the data, into a
 * temporary file that is fsynced and renamed over the target.
 * What it does not do: memory mapping, big-endian hosts, writing dtypes other than as
 * given.
 */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/net_impl.h"
#include "util/half.h"
#include "util/json.h"

const char *const st_dtype_names[ST_DTYPE_COUNT] = {"F32", "F16", "BF16", "F64", "I64", "I32", "U8"};
_Static_assert(ST_DTYPE_COUNT == 7, "st_dtype_names must list every dtype");
static const size_t st_dtype_size[ST_DTYPE_COUNT] = {4, 2, 2, 8, 8, 4, 1};

enum { ST_MAX_HEADER = 100 * 1024 * 1024 };

static safetensors_t *parse_header(safetensors_t *st, err_t *e);

void safetensors_close(safetensors_t *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) free(st->t[i].name);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->meta_keys);
    free(st->meta_values);
    free(st->t);
    free(st->file);
    free(st->path);
    free(st);
}

/* Reads the whole file at path (at most max_bytes) into st->file. */
static int read_whole(safetensors_t *st, const char *path, size_t max_bytes, err_t *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_errno(e, ERR_INPUT, "%s: cannot open", path);
    struct stat sb;
    if (fstat(fileno(f), &sb) < 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return err_set(e, ERR_INPUT, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        fclose(f);
        return err_set(e, ERR_INPUT, "%s: %lld bytes, more than the %zu allowed for weight files "
                       "(ST_MAX_FILE, or the caller's bound)", path, (long long)sb.st_size, max_bytes);
    }
    st->file_size = (size_t)sb.st_size;
    st->file = malloc(st->file_size ? st->file_size : 1);
    if (!st->file) {
        fclose(f);
        return err_set(e, ERR_RUNTIME, "%s: out of memory reading %zu bytes", path, st->file_size);
    }
    size_t got = fread(st->file, 1, st->file_size, f);
    fclose(f);
    if (got != st->file_size) return err_set(e, ERR_INPUT, "%s: short read (%zu of %zu bytes)", path, got, st->file_size);
    return 0;
}

/* A JSON number that is a non-negative integer below 2^53, into *out. */
static bool json_uint(const json_t *j, uint64_t *out) {
    if (!j || j->type != JSON_NUMBER) return false;
    double v = j->number;
    if (!(v >= 0) || v > 9007199254740992.0 || v != floor(v)) return false;
    *out = (uint64_t)v;
    return true;
}

/* Parses one tensor entry of the header into t; errors name the file and tensor. */
static int parse_entry(const safetensors_t *st, const char *name, const json_t *v, st_tensor_t *t,
                       err_t *e) {
    const char *p = st->path;
    if (!v || v->type != JSON_OBJECT)
        return err_set(e, ERR_INPUT, "%s: header entry '%s' is not an object; the file is not a valid safetensors file", p, name);
    const char *dt = json_get_string(v, "dtype", NULL);
    const json_t *shape = json_get(v, "shape"), *offs = json_get(v, "data_offsets");
    if (!dt || !shape || shape->type != JSON_ARRAY || !offs || offs->type != JSON_ARRAY)
        return err_set(e, ERR_INPUT, "%s: tensor %s: header entry needs dtype, shape and data_offsets", p, name);
    int k = 0;
    while (k < ST_DTYPE_COUNT && strcmp(dt, st_dtype_names[k])) k++;
    if (k == ST_DTYPE_COUNT)
        return err_set(e, ERR_INPUT, "%s: tensor %s: unsupported dtype %s (F32, F16, BF16, F64, I64, I32, U8)", p, name, dt);
    t->dtype = (st_dtype_t)k;
    if (shape->count > ST_MAX_DIMS)
        return err_set(e, ERR_INPUT, "%s: tensor %s: %zu dimensions, at most %d supported", p, name, shape->count, ST_MAX_DIMS);
    t->ndim = (int)shape->count;
    uint64_t numel = 1;
    for (size_t i = 0; i < shape->count; i++) {
        uint64_t d;
        if (!json_uint(shape->items[i], &d) || d > ((uint64_t)1 << 40))
            return err_set(e, ERR_INPUT, "%s: tensor %s: shape entry %zu is not a valid size", p, name, i);
        t->shape[i] = (int64_t)d;
        if (d && numel > ((uint64_t)1 << 40) / d)
            return err_set(e, ERR_INPUT, "%s: tensor %s: shape too large", p, name);
        numel *= d;
    }
    t->numel = (size_t)numel;
    uint64_t b, en;
    if (offs->count != 2 || !json_uint(offs->items[0], &b) || !json_uint(offs->items[1], &en) || b > en)
        return err_set(e, ERR_INPUT, "%s: tensor %s: data_offsets must be [begin, end] with 0 <= begin <= end", p, name);
    if (en > st->data_size)
        return err_set(e, ERR_INPUT, "%s: tensor %s: data_offsets [%llu, %llu] run past the data section (%zu bytes); "
                       "the file is truncated or corrupt", p, name, (unsigned long long)b,
                       (unsigned long long)en, st->data_size);
    if (en - b != numel * st_dtype_size[k])
        return err_set(e, ERR_INPUT, "%s: tensor %s: %llu bytes for %llu elements of %s (expected %llu)", p, name,
                       (unsigned long long)(en - b), (unsigned long long)numel, dt,
                       (unsigned long long)(numel * st_dtype_size[k]));
    t->begin = (size_t)b;
    t->end = (size_t)en;
    return 0;
}

static int cmp_begin(const void *a, const void *b) {
    const st_tensor_t *x = *(const st_tensor_t *const *)a, *y = *(const st_tensor_t *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Checks that no two non-empty tensors share bytes. */
static int check_overlaps(const safetensors_t *st, err_t *e) {
    const st_tensor_t **v = malloc((size_t)(st->n ? st->n : 1) * sizeof *v);
    if (!v) return err_set(e, ERR_RUNTIME, "out of memory");
    int m = 0;
    for (int i = 0; i < st->n; i++)
        if (st->t[i].end > st->t[i].begin) v[m++] = &st->t[i];
    qsort(v, (size_t)m, sizeof *v, cmp_begin);
    for (int i = 1; i < m; i++)
        if (v[i]->begin < v[i - 1]->end) {
            int rc = err_set(e, ERR_INPUT, "%s: tensors %s and %s overlap in the data section; the file is corrupt",
                             st->path, v[i - 1]->name, v[i]->name);
            free(v);
            return rc;
        }
    free(v);
    return 0;
}

safetensors_t *safetensors_open(const char *path, size_t max_bytes, err_t *e) {
    if (!max_bytes) max_bytes = ST_MAX_FILE;
    safetensors_t *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        err_set(e, ERR_RUNTIME, "out of memory");
        return NULL;
    }
    if (read_whole(st, path, max_bytes, e) < 0) {
        safetensors_close(st);
        return NULL;
    }
    return parse_header(st, e);
}

safetensors_t *safetensors_parse(const char *path, void *file, size_t size, err_t *e) {
    safetensors_t *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        free(file);
        err_set(e, ERR_RUNTIME, "out of memory");
        return NULL;
    }
    st->file = file;
    st->file_size = size;
    return parse_header(st, e);
}

/* Validates the header of the file image in st (see safetensors.h); frees st on failure. */
static safetensors_t *parse_header(safetensors_t *st, err_t *e) {
    const char *path = st->path;
    json_t *j = NULL;
    if (st->file_size < 8) {
        err_set(e, ERR_INPUT, "%s: %zu bytes, too short for a safetensors header", path, st->file_size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | st->file[i];
    if (hlen > ST_MAX_HEADER) {
        err_set(e, ERR_INPUT, "%s: header length %llu is more than the %d bytes allowed (ST_MAX_HEADER); "
                "not a safetensors file", path, (unsigned long long)hlen, ST_MAX_HEADER);
        goto fail;
    }
    if (hlen > st->file_size - 8 || hlen < 2) {
        err_set(e, ERR_INPUT, "%s: header length %llu does not fit the file (%zu bytes); not a safetensors file",
                path, (unsigned long long)hlen, st->file_size);
        goto fail;
    }
    st->data = st->file + 8 + hlen;
    st->data_size = st->file_size - 8 - (size_t)hlen;
    j = json_parse((const char *)st->file + 8, (size_t)hlen, e);
    if (!j) {
        err_wrap(e, "%s: header JSON", path);
        e->code = ERR_INPUT;
        goto fail;
    }
    if (j->type != JSON_OBJECT) {
        err_set(e, ERR_INPUT, "%s: header is not a JSON object", path);
        goto fail;
    }
    st->t = calloc(j->count ? j->count : 1, sizeof *st->t);
    st->meta_keys = calloc(1, sizeof(char *));
    st->meta_values = calloc(1, sizeof(char *));
    if (!st->t || !st->meta_keys || !st->meta_values) {
        err_set(e, ERR_RUNTIME, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < j->count; i++) {
        const char *k = j->keys[i];
        const json_t *v = j->items[i];
        if (!strcmp(k, "__metadata__")) {
            if (v->type != JSON_OBJECT) {
                err_set(e, ERR_INPUT, "%s: __metadata__ is not an object of strings", path);
                goto fail;
            }
            /* a second __metadata__ object adds to the first (n_meta counts both) */
            size_t want = (size_t)st->n_meta + v->count + 1;
            char **mk = realloc(st->meta_keys, want * sizeof(char *));
            if (mk) st->meta_keys = mk;
            char **mv = realloc(st->meta_values, want * sizeof(char *));
            if (mv) st->meta_values = mv;
            if (!mk || !mv) {
                err_set(e, ERR_RUNTIME, "out of memory");
                goto fail;
            }
            for (size_t m = 0; m < v->count; m++) {
                if (v->items[m]->type != JSON_STRING) {
                    err_set(e, ERR_INPUT, "%s: __metadata__ value of %s is not a string", path, v->keys[m]);
                    goto fail;
                }
                char *mkey = strdup(v->keys[m]), *mval = strdup(v->items[m]->string);
                if (!mkey || !mval) {
                    free(mkey);
                    free(mval);
                    err_set(e, ERR_RUNTIME, "out of memory");
                    goto fail;
                }
                st->meta_keys[st->n_meta] = mkey;
                st->meta_values[st->n_meta] = mval;
                st->n_meta++;
            }
            continue;
        }
        for (int q = 0; q < st->n; q++)
            if (!strcmp(st->t[q].name, k)) {
                err_set(e, ERR_INPUT, "%s: tensor %s appears twice in the header", path, k);
                goto fail;
            }
        st_tensor_t *t = &st->t[st->n];
        if (!(t->name = strdup(k))) {
            err_set(e, ERR_RUNTIME, "out of memory");
            goto fail;
        }
        st->n++;
        if (parse_entry(st, k, v, t, e) < 0) goto fail;
    }
    if (check_overlaps(st, e) < 0) goto fail;
    json_free(j);
    return st;
fail:
    json_free(j);
    safetensors_close(st);
    return NULL;
}

const st_tensor_t *safetensors_find(const safetensors_t *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

const char *safetensors_meta(const safetensors_t *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta_keys[i], key)) return st->meta_values[i];
    return NULL;
}

/* Little-endian loads from possibly unaligned bytes. */
static uint64_t ld_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

int safetensors_read_f32(const safetensors_t *st, const st_tensor_t *t, float *dst, err_t *e) {
    const uint8_t *p = st->data + t->begin;
    size_t es = st_dtype_size[t->dtype];
    for (size_t i = 0; i < t->numel; i++, p += es) {
        uint64_t u = ld_le(p, (int)es);
        switch (t->dtype) {
        case ST_F32: dst[i] = half_bits_f32((uint32_t)u); break;
        case ST_F16: dst[i] = f16_to_f32((uint16_t)u); break;
        case ST_BF16: dst[i] = bf16_to_f32((uint16_t)u); break;
        case ST_F64: { double d; memcpy(&d, &u, 8); dst[i] = (float)d; break; }
        case ST_I64: dst[i] = (float)(int64_t)u; break;
        case ST_I32: dst[i] = (float)(int32_t)(uint32_t)u; break;
        case ST_U8: dst[i] = (float)u; break;
        default: return err_set(e, ERR_INPUT, "%s: tensor %s: bad dtype", st->path, t->name);
        }
    }
    return 0;
}

int safetensors_read_i64(const safetensors_t *st, const st_tensor_t *t, int64_t *dst, err_t *e) {
    const uint8_t *p = st->data + t->begin;
    size_t es = st_dtype_size[t->dtype];
    for (size_t i = 0; i < t->numel; i++, p += es) {
        uint64_t u = ld_le(p, (int)es);
        switch (t->dtype) {
        case ST_I64: dst[i] = (int64_t)u; break;
        case ST_I32: dst[i] = (int32_t)(uint32_t)u; break;
        case ST_U8: dst[i] = (int64_t)u; break;
        default:
            return err_set(e, ERR_INPUT, "%s: tensor %s is %s, expected an integer dtype (I64)", st->path,
                           t->name, st_dtype_names[t->dtype]);
        }
    }
    return 0;
}

/* ---- writing ---- */

/* Writes the header JSON for entries to f (a memstream); returns 0. */
static void write_header(FILE *f, const st_entry_t *en, int n, const char *const *mk,
                         const char *const *mv, int n_meta) {
    size_t off = 0;
    fputc('{', f);
    if (n_meta > 0) {
        fputs("\"__metadata__\":{", f);
        for (int i = 0; i < n_meta; i++) {
            if (i) fputc(',', f);
            json_write_string(f, mk[i]);
            fputc(':', f);
            json_write_string(f, mv[i]);
        }
        fputc('}', f);
    }
    for (int i = 0; i < n; i++) {
        if (i || n_meta > 0) fputc(',', f);
        size_t numel = 1;
        for (int d = 0; d < en[i].ndim; d++) numel *= (size_t)en[i].shape[d];
        size_t bytes = numel * st_dtype_size[en[i].dtype];
        json_write_string(f, en[i].name);
        fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_names[en[i].dtype]);
        for (int d = 0; d < en[i].ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)en[i].shape[d]);
        fprintf(f, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    fputc('}', f);
}

int safetensors_write(const char *path, const st_entry_t *entries, int n,
                      const char *const *meta_keys, const char *const *meta_values, int n_meta,
                      err_t *e) {
    char *hdr = NULL;
    size_t hlen = 0;
    FILE *mf = open_memstream(&hdr, &hlen);
    if (!mf) return err_errno(e, ERR_RUNTIME, "%s: open_memstream", path);
    write_header(mf, entries, n, meta_keys, meta_values, n_meta);
    fclose(mf);
    size_t padded = (hlen + 7) & ~(size_t)7;
    size_t plen = strlen(path) + 16;
    char *tmp = malloc(plen);
    if (!tmp) {
        free(hdr);
        return err_set(e, ERR_RUNTIME, "out of memory");
    }
    snprintf(tmp, plen, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        err_errno(e, ERR_INPUT, "%s: cannot create a temporary file beside it", path);
        free(hdr);
        free(tmp);
        return -1;
    }
    /* mkstemp creates 0600; the file is a result to share like the run's other files
     * (0644 under the usual umask). umask can only be read by setting it. */
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0644 & ~um);
    FILE *f = fdopen(fd, "wb");
    int rc = -1;
    if (!f) {
        close(fd);
        err_errno(e, ERR_RUNTIME, "%s: fdopen", tmp);
        goto done;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < entries[i].ndim; d++) numel *= (size_t)entries[i].shape[d];
        size_t bytes = numel * st_dtype_size[entries[i].dtype];
        ok = !bytes || fwrite(entries[i].data, 1, bytes, f) == bytes;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        err_errno(e, ERR_RUNTIME, "%s: writing failed", tmp);
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) < 0) {
        err_errno(e, ERR_RUNTIME, "%s: rename to %s", tmp, path);
        unlink(tmp);
        goto done;
    }
    rc = 0;
done:
    free(hdr);
    free(tmp);
    return rc;
}

/* ---- net weights ---- */

/* "[64,3,3,3]" into buf. */
static const char *shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && o < len; i++) o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

int safetensors_load_net(net_t *n, const char *path, err_t *e) {
    if (!net_backend(n)) return err_set(e, ERR_RUNTIME, "safetensors_load_net: net is not bound");
    safetensors_t *st = safetensors_open(path, 0, e);
    if (!st) return -1;
    int rc = safetensors_load_net_from(n, st, NULL, e);
    safetensors_close(st);
    return rc;
}

/* A linear weight over a (flat_h, flat_w, flat_c) map: its columns between torchvision's
 * NCHW flattening (c, h, w) and the net's NHWC one (h, w, c); to_torch: net -> torchvision.
 * Other tensors are copied. (VGG's classifier.0 after the 7x7 average pool.) */
static void flat_linear_xfer(const net_tensor_t *t, const float *src, float *dst, bool to_torch) {
    if (t->flat_c <= 0 || t->ndim != 2) {
        memcpy(dst, src, t->numel * sizeof(float));
        return;
    }
    int64_t hw = (int64_t)t->flat_h * t->flat_w, c = t->flat_c, in = t->shape[1];
    for (int64_t o = 0; o < t->shape[0]; o++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t tv = o * in + ch * hw + p, net = o * in + p * c + ch;
                if (to_torch) dst[tv] = src[net];
                else dst[net] = src[tv];
            }
}

/* True when name starts with prefix (a non-empty one). */
static bool kept(const char *name, const char *prefix) {
    return prefix && prefix[0] && !strncmp(name, prefix, strlen(prefix));
}

int safetensors_check_net(const net_t *n, const safetensors_t *st, const char *keep_prefix, err_t *e) {
    const char *path = st->path;
    for (int i = 0; i < st->n; i++)
        if (!kept(st->t[i].name, keep_prefix) && !net_find_tensor(n, st->t[i].name))
            return err_set(e, ERR_INPUT, "%s: unexpected tensor %s (the model has no such parameter or buffer); "
                           "check model.arch and model.num_classes match the file", path, st->t[i].name);
    for (int i = 0; i < n->n_tensors; i++) {
        const net_tensor_t *t = &n->tensors[i];
        if (kept(t->name, keep_prefix)) continue;
        const st_tensor_t *s = safetensors_find(st, t->name);
        if (!s) return err_set(e, ERR_INPUT, "%s: missing tensor %s; check model.arch matches the file", path, t->name);
        bool same = s->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
        if (!same) {
            char a[96], b[96];
            return err_set(e, ERR_INPUT, "%s: tensor %s has shape %s, expected %s; check model.arch, "
                           "model.num_classes and the input channels", path, t->name,
                           shape_str(a, sizeof a, s->ndim, s->shape), shape_str(b, sizeof b, t->ndim, t->shape));
        }
        bool int_dtype = s->dtype == ST_I64 || s->dtype == ST_I32 || s->dtype == ST_U8;
        if (t->store != NET_STORE_COUNTER && int_dtype)
            return err_set(e, ERR_INPUT, "%s: tensor %s is %s, expected a float dtype (F32, F16, BF16)", path,
                           t->name, st_dtype_names[s->dtype]);
    }
    return 0;
}

int safetensors_load_net_from(net_t *n, const safetensors_t *st, const char *keep_prefix, err_t *e) {
    if (!net_backend(n)) return err_set(e, ERR_RUNTIME, "safetensors_load_net: net is not bound");
    if (safetensors_check_net(n, st, keep_prefix, e)) return -1;
    const char *path = st->path;
    int rc = -1;
    float *hp = malloc((n->n_params + 1) * sizeof(float));
    float *hb = malloc((n->n_buffers + 1) * sizeof(float));
    float *tmp = NULL;
    int64_t *cnt = malloc(((size_t)n->n_counters + 1) * sizeof(int64_t));
    size_t maxw = 1;
    for (int i = 0; i < n->n_tensors; i++)
        if (n->tensors[i].numel > maxw) maxw = n->tensors[i].numel;
    tmp = malloc(maxw * sizeof(float));
    if (!hp || !hb || !tmp || !cnt) {
        err_set(e, ERR_RUNTIME, "%s: out of memory loading weights", path);
        goto done;
    }
    /* what is kept comes from the net itself */
    if (keep_prefix && (net_download_params(n, hp, e) < 0 || net_download_buffers(n, hb, e) < 0)) goto done;
    if (n->n_counters) memcpy(cnt, n->counters, (size_t)n->n_counters * sizeof(int64_t));   /* none: NULL */
    for (int i = 0; i < n->n_tensors; i++) {
        const net_tensor_t *t = &n->tensors[i];
        if (kept(t->name, keep_prefix)) continue;
        const st_tensor_t *s = safetensors_find(st, t->name);   /* checked above */
        if (t->store == NET_STORE_COUNTER) {
            if (safetensors_read_i64(st, s, &cnt[t->offset], e) < 0) goto done;
            continue;
        }
        float *dst = (t->store == NET_STORE_PARAM ? hp : hb) + t->offset;
        if (t->conv_weight || t->flat_c > 0) {
            if (safetensors_read_f32(st, s, tmp, e) < 0) goto done;
            if (t->conv_weight) net_oihw_to_krsc(tmp, dst, t->shape);
            else flat_linear_xfer(t, tmp, dst, false);
        } else if (safetensors_read_f32(st, s, dst, e) < 0) {
            goto done;
        }
    }
    if (net_upload_params(n, hp, e) < 0 || net_upload_buffers(n, hb, e) < 0) goto done;
    if (n->n_counters) memcpy(n->counters, cnt, (size_t)n->n_counters * sizeof(int64_t));
    rc = 0;
done:
    free(hp);
    free(hb);
    free(tmp);
    free(cnt);
    return rc;
}

int safetensors_save_net(net_t *n, const char *path, const char *const *meta_keys,
                         const char *const *meta_values, int n_meta, err_t *e) {
    if (!net_backend(n)) return err_set(e, ERR_RUNTIME, "safetensors_save_net: net is not bound");
    int rc = -1;
    float *hp = malloc((n->n_params + 1) * sizeof(float));
    float *op = malloc((n->n_params + 1) * sizeof(float));
    float *hb = malloc((n->n_buffers + 1) * sizeof(float));
    st_entry_t *en = calloc((size_t)n->n_tensors + 1, sizeof *en);
    if (!hp || !op || !hb || !en) {
        err_set(e, ERR_RUNTIME, "%s: out of memory saving weights", path);
        goto done;
    }
    if (net_download_params(n, hp, e) < 0 || net_download_buffers(n, hb, e) < 0) goto done;
    memcpy(op, hp, n->n_params * sizeof(float));
    for (int i = 0; i < n->n_tensors; i++) {
        const net_tensor_t *t = &n->tensors[i];
        st_entry_t *x = &en[i];
        x->name = t->name;
        x->ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) x->shape[d] = t->shape[d];
        if (t->store == NET_STORE_COUNTER) {
            x->dtype = ST_I64;
            x->data = &n->counters[t->offset];
            continue;
        }
        x->dtype = ST_F32;
        if (t->store == NET_STORE_BUFFER) {
            x->data = hb + t->offset;
        } else {
            if (t->conv_weight) net_krsc_to_oihw(hp + t->offset, op + t->offset, t->shape);
            else if (t->flat_c > 0) flat_linear_xfer(t, hp + t->offset, op + t->offset, true);
            x->data = op + t->offset;
        }
    }
    rc = safetensors_write(path, en, n->n_tensors, meta_keys, meta_values, n_meta, e);
done:
    free(hp);
    free(op);
    free(hb);
    free(en);
    return rc;
}
