/* config_write.c: resolved.yaml (config_write_yaml) and config_hash, both driven by the
 * schema table so a new row is written and hashed without touching this file.
 *
 * Values are written so that config_load reads them back to the same bits (shortest
 * round-trip decimal for doubles) and so that YAML 1.1 readers such as PyYAML see the
 * same types (floats always carry a '.', strings are double-quoted). It does not write
 * base: or matrix: (a resolved file stands alone).
 */
#include "runner/config_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFIELD(x, r) ((const char *)(x) + (r)->off)

/* Shortest decimal that reads back to v, without an exponent for everyday magnitudes,
 * always with a '.' (PyYAML reads 1e-08 or 300 as a string or an int otherwise). */
static void fmt_double(double v, char *out, size_t cap) {
    char buf[64];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    double a = fabs(v);
    if (strchr(buf, 'e') && a >= 1e-4 && a < 1e15) {
        int e10 = (int)floor(log10(a));
        int decimals = p - 1 - e10;
        char plain[64];
        snprintf(plain, sizeof plain, "%.*f", decimals < 0 ? 0 : decimals, v);
        if (strtod(plain, NULL) == v) snprintf(buf, sizeof buf, "%s", plain);
    }
    char *e = strchr(buf, 'e');
    if (!strchr(buf, '.')) {
        if (e) {
            char tail[32];
            snprintf(tail, sizeof tail, "%s", e);
            snprintf(e, sizeof buf - (size_t)(e - buf), ".0%s", tail);
        } else {
            strcat(buf, ".0");
        }
    }
    snprintf(out, cap, "%s", buf);
}

/* A YAML double-quoted string. */
static void fmt_quoted(const char *s, char *out, size_t cap) {
    size_t o = 0;
    if (cap < 3) return;
    out[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 6 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            out[o++] = '\\';
            out[o++] = (char)*p;
        } else if (*p < 0x20 || *p == 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *p);
        } else {
            out[o++] = (char)*p;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
}

static size_t append(char *out, size_t cap, size_t o, const char *s) {
    size_t n = strlen(s);
    if (o + n >= cap) n = o < cap ? cap - o - 1 : 0;
    memcpy(out + o, s, n);
    out[o + n] = '\0';
    return o + n;
}

/* Number of entries of list row r in x. */
static int list_count(const cfg_row_t *r, const experiment_t *x) {
    if (r->count_off >= 0) return *(const int *)((const char *)x + r->count_off);
    if (r->min_n == r->max_n) return r->min_n;
    return x->data.n_norm; /* data.normalize.mean / .std */
}

static void fmt_list(const cfg_row_t *r, const experiment_t *x, char *out, size_t cap) {
    int n = list_count(r, x);
    if (!n && (r->flags & F_NULLABLE) && r->min_n > 0) {
        snprintf(out, cap, "null");
        return;
    }
    size_t o = append(out, cap, 0, "[");
    char item[160];
    for (int i = 0; i < n; i++) {
        if (r->kind == K_INTS)
            snprintf(item, sizeof item, "%d", ((const int *)CFIELD(x, r))[i]);
        else if (r->kind == K_FLOATS)
            fmt_double(((const double *)CFIELD(x, r))[i], item, sizeof item);
        else
            fmt_quoted(CFIELD(x, r) + (size_t)i * r->size, item, sizeof item);
        if (i) o = append(out, cap, o, ", ");
        o = append(out, cap, o, item);
    }
    append(out, cap, o, "]");
}

void cfg_format_value(const cfg_row_t *r, const experiment_t *x, char *out, size_t cap) {
    const char *f = CFIELD(x, r);
    switch (r->kind) {
    case K_INT:
        if ((r->flags & F_AUTO) && *(const int *)f < 0) snprintf(out, cap, "auto");
        else snprintf(out, cap, "%d", *(const int *)f);
        return;
    case K_INT64:
        if (*(const int64_t *)f < 0 && (r->flags & F_NULLABLE))
            snprintf(out, cap, "null");
        else
            snprintf(out, cap, "%" PRId64, *(const int64_t *)f);
        return;
    case K_UINT64:
        snprintf(out, cap, "%" PRIu64, *(const uint64_t *)f);
        return;
    case K_FLOAT:
    case K_ROTATION:
        if ((r->flags & F_NULLABLE) && *(const double *)f == cfg_float_null(r)) snprintf(out, cap, "null");
        else fmt_double(*(const double *)f, out, cap);
        return;
    case K_BOOL:
        snprintf(out, cap, "%s", *(const bool *)f ? "true" : "false");
        return;
    case K_STR:
        if (!*f && (r->flags & F_NULLABLE))
            snprintf(out, cap, "null");
        else
            fmt_quoted(f, out, cap);
        return;
    case K_NAME:
        snprintf(out, cap, "%s", f);
        return;
    case K_ENUM: {
        int v;
        memcpy(&v, f, sizeof v);
        if (v == 0 && !r->names[0] && (r->flags & F_NULLABLE)) snprintf(out, cap, "null");
        else snprintf(out, cap, "%s", v >= 0 && v < r->n_names && r->names[v] ? r->names[v] : "?");
        return;
    }
    case K_INTS:
    case K_FLOATS:
    case K_STRS:
        fmt_list(r, x, out, cap);
        return;
    case K_SWITCH: {
        char a[256], b[256];
        if (r->off >= 0) { /* random_crop, random_resized_crop: {child: value, ...} */
            if (!*(const bool *)f) {
                snprintf(out, cap, "false");
                return;
            }
            size_t o = (size_t)snprintf(out, cap, "{");
            for (int i = (int)(r - cfg_rows) + 1;
                 i < cfg_n_rows && (cfg_rows[i].flags & F_CHILD) && o < cap; i++) {
                cfg_format_value(&cfg_rows[i], x, a, sizeof a);
                o += (size_t)snprintf(out + o, cap - o, "%s%s: %s", o > 1 ? ", " : "",
                                      strrchr(cfg_rows[i].key, '.') + 1, a);
            }
            if (o < cap) snprintf(out + o, cap - o, "}");
            return;
        }
        if (!x->data.n_norm) {
            snprintf(out, cap, "false");
            return;
        }
        fmt_list(&cfg_rows[cfg_row_find("data.normalize.mean")], x, a, sizeof a);
        fmt_list(&cfg_rows[cfg_row_find("data.normalize.std")], x, b, sizeof b);
        snprintf(out, cap, "{mean: %s, std: %s}", a, b);
        return;
    }
    }
    snprintf(out, cap, "null");
}

/* Number of leading dotted components two section paths share. */
static int common_depth(const char *a, const char *b) {
    int d = 0;
    while (*a && *b) {
        size_t la = strcspn(a, "."), lb = strcspn(b, ".");
        if (la != lb || strncmp(a, b, la)) break;
        d++;
        a += la + (a[la] == '.');
        b += lb + (b[lb] == '.');
    }
    return d;
}

int config_write_yaml(const experiment_t *e, FILE *f) {
    if (!e || !f) return -1;
    fprintf(f, "# resolved.yaml: every key of this experiment with its defaults filled in.\n");
    if (e->source_path[0]) fprintf(f, "# loaded from: %s\n", e->source_path);
    fprintf(f, "# runner loads this file back to the same experiment.\n");
    char open_sect[CFG_STR] = "", val[2048], line[2400];
    for (int i = 0; i < cfg_n_rows; i++) {
        const cfg_row_t *r = &cfg_rows[i];
        if (r->flags & F_CHILD) continue;
        char sect[CFG_STR];
        snprintf(sect, sizeof sect, "%s", r->key);
        char *dot = strrchr(sect, '.');
        const char *leafname = dot ? dot + 1 : r->key;
        if (dot) *dot = '\0'; else sect[0] = '\0';
        /* open the sections this row needs beyond those already open */
        int keep = common_depth(open_sect, sect), depth = 0;
        for (const char *p = sect; *p; depth++) {
            size_t n = strcspn(p, ".");
            if (depth >= keep) fprintf(f, "%*s%.*s:\n", 2 * depth, "", (int)n, p);
            p += n + (p[n] == '.');
        }
        snprintf(open_sect, sizeof open_sect, "%s", sect);
        cfg_format_value(r, e, val, sizeof val);
        int n = snprintf(line, sizeof line, "%*s%s: %s", 2 * depth, "", leafname, val);
        fprintf(f, "%s%*s# %s\n", line, n < 40 ? 40 - n : 1, "", r->doc);
    }
    return ferror(f) ? -1 : 0;
}

char *config_yaml_string(const experiment_t *e, size_t *len) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    int rc = config_write_yaml(e, f);
    if (fclose(f) != 0 || rc != 0) {
        free(buf);
        return NULL;
    }
    if (len) *len = n;
    return buf;
}

/* FNV-1a, 64 bit. */
static uint64_t fnv1a(uint64_t h, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

uint64_t config_hash(const experiment_t *e) {
    uint64_t h = fnv1a(1469598103934665603ULL, "runner-config-v1\n");
    char val[2048], dval[2048];
    experiment_t defaults;
    config_defaults(&defaults);
    for (int i = 0; i < cfg_n_rows; i++) {
        const cfg_row_t *r = &cfg_rows[i];
        if (!(r->flags & F_HASH)) continue;
        if ((r->flags & F_IMAGES) && strcmp(e->data.dataset, "image_folder")) continue;
        cfg_format_value(r, e, val, sizeof val);
        if (r->flags & F_HASH_SET) {
            cfg_format_value(r, &defaults, dval, sizeof dval);
            if (!strcmp(val, dval)) continue;
        }
        h = fnv1a(h, r->key);
        h = fnv1a(h, "=");
        h = fnv1a(h, val);
        h = fnv1a(h, "\n");
    }
    return h;
}

int config_diff(const experiment_t *before, const experiment_t *after, bool hashed_only,
                config_change_t *out, int max) {
    int n = 0;
    char a[2048], b[2048];
    for (int i = 0; i < cfg_n_rows; i++) {
        const cfg_row_t *r = &cfg_rows[i];
        if ((r->flags & F_CHILD) || (hashed_only && !(r->flags & F_HASH))) continue;
        cfg_format_value(r, before, a, sizeof a);
        cfg_format_value(r, after, b, sizeof b);
        if (!strcmp(a, b)) continue;
        if (n < max) {
            out[n].key = r->key;
            out[n].hashed = (r->flags & F_HASH) != 0;
            snprintf(out[n].before, sizeof out[n].before, "%.1099s", a);
            snprintf(out[n].after, sizeof out[n].after, "%.1099s", b);
        }
        n++;
    }
    return n;
}
