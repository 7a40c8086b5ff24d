/* config_apply.c: applies a parsed YAML mapping onto the experiment being built, driven
 * by the schema table: each dotted key finds its row (or is a section to descend into,
 * or is unknown and gets a suggestion), and the row's kind parses and range-checks the
 * value before storing it in the field at the row's offset.
 *
 * Value rules (documented in docs/experiment-files.md): booleans accept true/false/
 * yes/no/on/off in any case; numbers may be quoted; integers may be written 1e3 when
 * exact; .inf/.nan are refused; a single scalar where a list is expected is a one-entry
 * list; enum and name values match case-insensitively; `<<: *anchor` merge keys merge
 * deeply with this mapping's own keys winning.
 * It does not check one key against another (config.c does that after all sources).
 */
#include "runner/config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/fs.h"

#define FIELD(st, r) ((char *)&(st)->x + (r)->off)

/* "name: expected X, found Y" with a hint for null and for "key:value" typos. */
static int want(cfg_ctx_t *c, cfg_loc_t loc, const char *key, const char *what,
                const yaml_node_t *n) {
    char buf[96];
    const char *found = cfg_describe(n, buf, sizeof buf);
    const char *hint = "";
    if (cfg_is_null(n))
        hint = "; give a value, or remove the key to use the default";
    else if (n->type == YAML_SCALAR_NODE && strchr(cfg_scalar(n), ':'))
        hint = "; if this was meant as `key: value`, put a space after the colon";
    return cfg_fail(c, loc, "%s: expected %s, found %s%s", key, what, found, hint);
}

/* Range text for a row: "must be > 0", "must be between 1 and 64", ... */
static void bounds_text(const cfg_row_t *r, char *out, size_t cap) {
    bool has_lo = isfinite(r->lo), has_hi = isfinite(r->hi);
    bool lo_open = r->flags & F_LO_OPEN, hi_open = r->flags & F_HI_OPEN;
    if (has_lo && has_hi && !lo_open && !hi_open)
        snprintf(out, cap, "must be between %.15g and %.15g", r->lo, r->hi);
    else if (has_lo && has_hi)
        snprintf(out, cap, "must be %s %.15g and %s %.15g", lo_open ? ">" : ">=", r->lo,
                 hi_open ? "<" : "<=", r->hi);
    else if (has_lo)
        snprintf(out, cap, "must be %s %.15g", lo_open ? ">" : ">=", r->lo);
    else if (has_hi)
        snprintf(out, cap, "must be %s %.15g", hi_open ? "<" : "<=", r->hi);
    else
        snprintf(out, cap, "must be a finite number");
}

static bool in_bounds(const cfg_row_t *r, double v) {
    if (r->flags & F_LO_OPEN ? !(v > r->lo) : !(v >= r->lo)) return false;
    if (r->flags & F_HI_OPEN ? !(v < r->hi) : !(v <= r->hi)) return false;
    return true;
}

static int out_of_range(cfg_ctx_t *c, cfg_loc_t loc, const char *key, const cfg_row_t *r,
                        const char *text) {
    char b[128];
    bounds_text(r, b, sizeof b);
    return cfg_fail(c, loc, "%s: %s is out of range; %s", key, text, b);
}

/* A number beyond what the field can hold: bounds if the row has an upper one, else the
 * type's limit. */
static int too_large(cfg_ctx_t *c, cfg_loc_t loc, const char *key, const cfg_row_t *r,
                     const char *text, const char *limit) {
    if (isfinite(r->hi) || text[0] == '-') return out_of_range(c, loc, key, r, text);
    return cfg_fail(c, loc, "%s: %s is too large; at most %s", key, text, limit);
}

/* YAML number syntax: [+-] digits [. digits] [e [+-] digits], or [+-] . digits [...]. */
static bool number_syntax(const char *s) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    int digits = 0;
    while (isdigit((unsigned char)*p)) p++, digits++;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) p++, digits++;
    }
    if (!digits) return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return false;
        while (isdigit((unsigned char)*p)) p++;
    }
    return *p == '\0';
}

/* .inf, -.Inf, .nan, inf, nan, infinity in any case. */
static bool nonfinite_syntax(const char *s) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (*p == '.') p++;
    return !strcasecmp(p, "inf") || !strcasecmp(p, "infinity") || !strcasecmp(p, "nan");
}

/* Parses a finite double from a scalar; fills the error for the key on failure. */
static int get_double(cfg_ctx_t *c, cfg_loc_t loc, const char *key, const cfg_row_t *r,
                      const yaml_node_t *n, double *out) {
    const char *s = cfg_scalar(n);
    if (!s || cfg_is_null(n)) return want(c, loc, key, "a number", n);
    if (nonfinite_syntax(s))
        return cfg_fail(c, loc, "%s: '%s' is not a finite number; give a number such as 0.1",
                        key, s);
    if (!number_syntax(s)) {
        if (strchr(s, ',') && !strchr(s, ' '))
            return cfg_fail(c, loc, "%s: expected a number, found '%s'; use a dot as the decimal "
                            "separator", key, s);
        return want(c, loc, key, "a number", n);
    }
    errno = 0;
    double v = strtod(s, NULL);
    if (!isfinite(v)) return too_large(c, loc, key, r, s, "about 1.8e308");
    if (!in_bounds(r, v)) return out_of_range(c, loc, key, r, s);
    *out = v;
    return 0;
}

/* Parses an integer (also exact float notation like 1e3) within the row's bounds. */
static int get_int64(cfg_ctx_t *c, cfg_loc_t loc, const char *key, const cfg_row_t *r,
                     const yaml_node_t *n, long long *out) {
    const char *s = cfg_scalar(n);
    if (!s || cfg_is_null(n)) return want(c, loc, key, "an integer", n);
    if (nonfinite_syntax(s) || !number_syntax(s)) return want(c, loc, key, "an integer", n);
    const char *p = s + (*s == '+' || *s == '-');
    bool plain_digits = *p && strspn(p, "0123456789") == strlen(p);
    long long v;
    if (plain_digits) {
        errno = 0;
        v = strtoll(s, NULL, 10);
        if (errno == ERANGE) return too_large(c, loc, key, r, s, "9223372036854775807");
    } else {
        double d = strtod(s, NULL);
        if (!isfinite(d) || fabs(d) > 9007199254740992.0)
            return too_large(c, loc, key, r, s, "9007199254740992 in this notation");
        if (d != floor(d)) return want(c, loc, key, "an integer", n);
        v = (long long)d;
    }
    if (!in_bounds(r, (double)v)) return out_of_range(c, loc, key, r, s);
    *out = v;
    return 0;
}

/* true/false/yes/no/on/off, any case. Returns 0 with *b set, -1 when not a boolean. */
static int bool_text(const yaml_node_t *n, bool *b) {
    const char *s = cfg_scalar(n);
    if (!s) return -1;
    static const char *const T[] = {"true", "yes", "on"}, *const F[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(s, T[i])) return *b = true, 0;
        if (!strcasecmp(s, F[i])) return *b = false, 0;
    }
    return -1;
}

/* Matches a scalar against names[] case-insensitively; the index, or fills the error. */
static int get_name(cfg_ctx_t *c, cfg_loc_t loc, const char *key, const cfg_row_t *r,
                    const yaml_node_t *n) {
    const char *s = cfg_scalar(n);
    char list[512] = "";   /* model.arch lists 24 names */
    for (int i = 0; i < r->n_names; i++) {
        if (!r->names[i]) continue;
        if (s && !cfg_is_null(n) && !strcasecmp(s, r->names[i])) return i;
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", r->names[i]);
    }
    if (r->flags & F_NULLABLE) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, " or null");
    }
    if (!s || cfg_is_null(n)) {
        char what[560];
        snprintf(what, sizeof what, "one of %s", list);
        return want(c, loc, key, what, n);
    }
    const char *near = cfg_closest(s, r->names, r->n_names);
    char hint[96] = "";
    if (near) snprintf(hint, sizeof hint, "; did you mean %s?", near);
    cfg_fail(c, loc, "%s: '%s' is not one of %s%s", key, s, list, near ? hint : "");
    return -1;
}

static int get_string(cfg_ctx_t *c, cfg_loc_t loc, const char *key, const cfg_row_t *r,
                      const yaml_node_t *n, size_t size, char *dst) {
    const char *s = cfg_scalar(n);
    if (cfg_is_null(n) && (r->flags & F_NULLABLE)) s = "";
    else if (!s || cfg_is_null(n)) return want(c, loc, key, "a string", n);
    char expanded[CFG_PATH];
    if ((r->flags & F_PATH) && strpbrk(s, "~$")) {
        /* `~/runs` must never become a directory named `~` (one rm -rf ~ from disaster) */
        err_t pe = {0};
        if (path_expand(s, expanded, sizeof expanded, &pe)) return cfg_fail(c, loc, "%s: %s", key, pe.msg);
        s = expanded;
    }
    size_t len = strlen(s);
    if (len >= size)
        return cfg_fail(c, loc, "%s: the value is %zu bytes long; at most %zu", key, len,
                        size - 1);
    if ((r->flags & F_NONEMPTY) && !len)
        return cfg_fail(c, loc, "%s: must not be empty", key);
    char buf[128];
    const char *why;
    if ((r->flags & F_PLAIN) && (why = cfg_plain_name_problem(s, buf, sizeof buf)))
        return cfg_fail(c, loc,
                        "%s: '%s' is not a plain name: it %s; use letters, digits and . _ - +",
                        key, s, why);
    if ((r->flags & F_MD5) && len && (len != 32 || strspn(s, "0123456789abcdefABCDEF") != 32))
        return cfg_fail(c, loc, "%s: '%s' is not an md5 sum; give 32 hex digits or null", key,
                        s);
    if ((r->flags & F_URL) && len && strncmp(s, "http://", 7) && strncmp(s, "https://", 8) &&
        strncmp(s, "file://", 7))
        return cfg_fail(c, loc,
                        "%s: '%s' is not a URL; give an http://, https:// or file:// URL, or "
                        "null",
                        key, s);
    memset(dst, 0, size);
    memcpy(dst, s, len);
    return 0;
}

/* Turns the K_SWITCH row that owns child row r on (random_crop.size given => cropping). */
static void switch_on_parent(cfg_state_t *st, const cfg_row_t *r) {
    char parent[CFG_STR];
    snprintf(parent, sizeof parent, "%s", r->key);
    char *dot = strrchr(parent, '.');
    if (!dot) return;
    *dot = '\0';
    int p = cfg_row_find(parent);
    if (p < 0 || cfg_rows[p].kind != K_SWITCH) return;
    if (cfg_rows[p].off >= 0)
        *(bool *)FIELD(st, &cfg_rows[p]) = true;
    else
        st->norm_off = false;
}

/* Lists: null (if allowed), a flow/block sequence, or one scalar as a one-entry list. */
static int apply_list(cfg_ctx_t *c, cfg_state_t *st, int ri, const char *key, cfg_loc_t loc,
                      yaml_node_t *val, int depth) {
    const cfg_row_t *r = &cfg_rows[ri];
    yaml_node_t *items[CFG_MAX_LIST];
    int n = 0;
    bool is_null = cfg_is_null(val);
    if (is_null) {
        if (!(r->flags & F_NULLABLE)) return want(c, loc, key, "a list like [1, 2]", val);
    } else if (val->type == YAML_SCALAR_NODE) {
        if (strchr(cfg_scalar(val), ','))
            return cfg_fail(c, loc, "%s: expected a list, found '%s'; put the entries in brackets: "
                            "[%.100s]", key, cfg_scalar(val), cfg_scalar(val));
        items[n++] = val;
    } else if (val->type == YAML_SEQUENCE_NODE) {
        long total = val->data.sequence.items.top - val->data.sequence.items.start;
        if (total > r->max_n)
            return cfg_fail(c, loc, "%s: %ld entries; at most %d", key, total, r->max_n);
        for (yaml_node_item_t *it = val->data.sequence.items.start;
             it < val->data.sequence.items.top; it++) {
            items[n] = cfg_node(c, *it);
            if (cfg_visit(c, items[n], depth + 1)) return -1;
            n++;
        }
    } else {
        return want(c, loc, key, "a list like [1, 2]", val);
    }
    if (!is_null && (n < r->min_n || n > r->max_n)) {
        if (r->min_n == r->max_n)
            return cfg_fail(c, loc, "%s: %d entries; it needs exactly %d", key, n, r->min_n);
        return cfg_fail(c, loc, "%s: %d entries; it needs %d to %d%s", key, n, r->min_n,
                        r->max_n, (r->flags & F_NULLABLE) && !n ? " (or null)" : "");
    }
    char ek[CFG_STR + 16];
    for (int i = 0; i < n; i++) {
        snprintf(ek, sizeof ek, "%s[%d]", key, i);
        cfg_loc_t il = cfg_node_loc(c, items[i]);
        if (items[i]->type != YAML_SCALAR_NODE || cfg_is_null(items[i]))
            return want(c, il, ek, r->kind == K_STRS ? "a string" : "a number", items[i]);
        if (r->kind == K_INTS) {
            long long v;
            if (get_int64(c, il, ek, r, items[i], &v)) return -1;
            int *a = (int *)FIELD(st, r);
            for (int j = 0; j < i; j++) {
                if ((r->flags & F_INCREASING) && a[j] >= v)
                    return cfg_fail(c, il,
                                    "%s: %lld after %d; the entries must be strictly "
                                    "increasing, e.g. [60, 120, 160]",
                                    ek, v, a[j]);
                if ((r->flags & F_UNIQUE) && a[j] == v)
                    return cfg_fail(c, il, "%s: %lld appears twice; list each once", ek, v);
            }
            a[i] = (int)v;
        } else if (r->kind == K_FLOATS) {
            if (get_double(c, il, ek, r, items[i], (double *)FIELD(st, r) + i)) return -1;
        } else if (r->names) {   /* a list of names (train.cuda_fusion): stored as spelled in names[] */
            cfg_row_t er = *r;
            er.flags &= ~(unsigned)F_NULLABLE;
            int k = get_name(c, il, ek, &er, items[i]);
            if (k < 0) return -1;
            for (int j = 0; j < i && (r->flags & F_UNIQUE); j++)
                if (!strcmp(FIELD(st, r) + (size_t)j * r->size, r->names[k]))
                    return cfg_fail(c, il, "%s: '%s' appears twice; list each once", ek, r->names[k]);
            if (strlen(r->names[k]) >= r->size)   /* a schema defect: the field cannot hold the name */
                return cfg_fail(c, il, "%s: '%s' does not fit the runner's %zu-byte field; this is a runner bug, "
                                "please report it", ek, r->names[k], r->size);
            snprintf(FIELD(st, r) + (size_t)i * r->size, r->size, "%s", r->names[k]);
        } else {
            if (get_string(c, il, ek, r, items[i], r->size, FIELD(st, r) + (size_t)i * r->size))
                return -1;
        }
    }
    if (r->count_off >= 0) *(int *)((char *)&st->x + r->count_off) = n;
    st->count[ri] = n;
    return 0;
}

/* Parses val for row ri and stores it. */
static int apply_row(cfg_ctx_t *c, cfg_state_t *st, int ri, const char *key, cfg_loc_t loc,
                     yaml_node_t *val, int depth, bool weak) {
    const cfg_row_t *r = &cfg_rows[ri];
    char *f = FIELD(st, r);
    bool b;
    long long v;
    double d;
    switch (r->kind) {
    case K_INT:
        if ((r->flags & F_AUTO) && cfg_scalar(val) && !strcasecmp(cfg_scalar(val), "auto")) {
            *(int *)f = -1;
            return 0;
        }
        if (get_int64(c, loc, key, r, val, &v)) return -1;
        *(int *)f = (int)v;
        return 0;
    case K_INT64:
        if (cfg_is_null(val) && (r->flags & F_NULLABLE)) v = -1;
        else if (get_int64(c, loc, key, r, val, &v)) return -1;
        *(int64_t *)f = v;
        return 0;
    case K_UINT64: {
        const char *s = cfg_scalar(val);
        if (!s || cfg_is_null(val) || !number_syntax(s))
            return want(c, loc, key, "an integer", val);
        const char *p = s + (*s == '+');
        if (*p == '-' || strspn(p, "0123456789") != strlen(p))
            return strchr(p, '.') || strchr(p, 'e') || strchr(p, 'E')
                       ? want(c, loc, key, "an integer", val)
                       : out_of_range(c, loc, key, r, s);
        errno = 0;
        unsigned long long u = strtoull(p, NULL, 10);
        if (errno == ERANGE) return too_large(c, loc, key, r, s, "18446744073709551615");
        *(uint64_t *)f = u;
        return 0;
    }
    case K_FLOAT:
        if (cfg_is_null(val) && (r->flags & F_NULLABLE)) d = cfg_float_null(r);
        else if (get_double(c, loc, key, r, val, &d)) return -1;
        *(double *)f = d;
        return 0;
    case K_BOOL:
        if (val->type != YAML_SCALAR_NODE || bool_text(val, &b))
            return want(c, loc, key, "true or false", val);
        *(bool *)f = b;
        return 0;
    case K_STR:
        return get_string(c, loc, key, r, val, r->size, f);
    case K_NAME: {
        int i = get_name(c, loc, key, r, val);
        if (i < 0) return -1;
        memset(f, 0, r->size);
        snprintf(f, r->size, "%s", r->names[i]);
        return 0;
    }
    case K_ENUM: {
        /* a nullable enum's null is its first value, whose name is NULL; a F_BOOLS enum
         * takes every bool word for its "false" / "true" */
        if ((r->flags & F_BOOLS) && val->type == YAML_SCALAR_NODE && !bool_text(val, &b)) {
            int i = b ? 1 : 0;
            memcpy(f, &i, sizeof i);
            return 0;
        }
        int i = cfg_is_null(val) && (r->flags & F_NULLABLE) ? 0 : get_name(c, loc, key, r, val);
        if (i < 0) return -1;
        memcpy(f, &i, sizeof i);
        return 0;
    }
    case K_INTS:
    case K_FLOATS:
    case K_STRS:
        return apply_list(c, st, ri, key, loc, val, depth);
    case K_SWITCH: {
        bool on;
        const char *example = r->off < 0 ? "{mean: [0.5], std: [0.25]}"
                              : strstr(r->key, "resized") ? "{scale: [0.08, 1.0], ratio: [0.75, 1.3333]}"
                                                          : "{size: 32, padding: 4}";
        if (cfg_is_null(val)) {
            on = false;
        } else if (val->type == YAML_MAPPING_NODE) {
            on = true;
        } else if (val->type != YAML_SCALAR_NODE || bool_text(val, &on)) {
            char what[96];
            snprintf(what, sizeof what, "false or a mapping like %s", example);
            return want(c, loc, key, what, val);
        }
        if (r->off >= 0) *(bool *)f = on;
        else st->norm_off = !on;
        if (val->type == YAML_MAPPING_NODE)
            return cfg_apply_map(c, st, key, val, depth, weak, NULL);
        return 0;
    }
    case K_ROTATION:
        if (val->type == YAML_SCALAR_NODE && !bool_text(val, &b)) {
            if (b)
                return cfg_fail(c, loc,
                                "%s: true is not an angle; give the degrees (e.g. 15) or false",
                                key);
            *(double *)f = 0;
            return 0;
        }
        if (val->type != YAML_SCALAR_NODE || cfg_is_null(val))
            return want(c, loc, key, "degrees in [0, 180] or false", val);
        if (get_double(c, loc, key, r, val, &d)) return -1;
        *(double *)f = d;
        return 0;
    }
    return cfg_fail(c, loc, "%s: internal error: unknown row kind", key);
}

/* For `data: cifar10`, `model: resnet18`, `amp: true`, `optimizer: sgd`: the key directly
 * under section that this scalar most likely belongs to, or NULL. */
static const char *scalar_home(const char *section, const yaml_node_t *val) {
    size_t n = strlen(section);
    bool b;
    const char *fallback = NULL;
    for (int i = 0; i < cfg_n_rows; i++) {
        const cfg_row_t *r = &cfg_rows[i];
        if (strncmp(r->key, section, n) || r->key[n] != '.' || strchr(r->key + n + 1, '.'))
            continue;
        const char *leafname = r->key + n + 1;
        for (int j = 0; j < r->n_names; j++)
            if (r->names[j] && !strcasecmp(r->names[j], cfg_scalar(val))) return leafname;
        if (r->kind == K_BOOL && !strcmp(leafname, "enabled") && !bool_text(val, &b))
            return leafname;
        if (!strcmp(leafname, "name") && r->kind == K_ENUM) fallback = leafname;
    }
    return fallback;
}

int cfg_apply_value(cfg_ctx_t *c, cfg_state_t *st, const char *full, yaml_node_t *key,
                    yaml_node_t *val, int depth, bool weak) {
    cfg_loc_t kloc = cfg_node_loc(c, key ? key : val), vloc = cfg_node_loc(c, val);
    if (cfg_visit(c, val, depth)) return -1;
    int ri = cfg_row_find(full);
    if (ri >= 0) {
        if (c->is_base && !strcmp(full, "name")) return 0; /* each file names itself */
        if (st->set_now[ri] == 2) {
            if (weak) return 0; /* this mapping's own key beats a << merge */
            return cfg_fail(c, kloc, "%s is given twice (first at line %d); keep one of them",
                            full, st->loc[ri].line);
        }
        if (apply_row(c, st, ri, full, vloc, val, depth, weak)) return -1;
        st->set[ri] = 1;
        st->order[ri] = ++st->n_given;
        st->set_now[ri] = weak ? 1 : 2;
        st->loc[ri] = vloc;
        if (cfg_rows[ri].flags & F_CHILD) switch_on_parent(st, &cfg_rows[ri]);
        return 0;
    }
    if (cfg_is_section(full)) {
        if (cfg_is_null(val)) return 0; /* "logging:" with every sub-key commented out */
        if (val->type == YAML_MAPPING_NODE)
            return cfg_apply_map(c, st, full, val, depth, weak, NULL);
        char what[CFG_STR + 32], hint[CFG_STR + 96] = "";
        snprintf(what, sizeof what, "a mapping of %s keys", full);
        const char *inner = val->type == YAML_SCALAR_NODE ? scalar_home(full, val) : NULL;
        if (inner)
            snprintf(hint, sizeof hint, "; did you mean `%s: {%s: %.60s}`?", full, inner,
                     cfg_scalar(val));
        if (hint[0]) {
            char buf[96];
            return cfg_fail(c, vloc, "%s: expected %s, found %s%s", full, what,
                            cfg_describe(val, buf, sizeof buf), hint);
        }
        return want(c, vloc, full, what, val);
    }
    if (!strcmp(full, "base") || !strcmp(full, "matrix"))
        return cfg_fail(c, kloc,
                        "%s: only allowed at the top level of an experiment file, not in "
                        "--set or a matrix entry",
                        full);
    char advice[700];
    cfg_suggest_key(full, advice, sizeof advice);
    return cfg_fail(c, kloc, "%s: unknown key; %s", full, advice);
}

static bool is_merge_key(const yaml_node_t *k) {
    return k && k->type == YAML_SCALAR_NODE && k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           !strcmp(cfg_scalar(k), "<<");
}

int cfg_apply_map(cfg_ctx_t *c, cfg_state_t *st, const char *prefix, yaml_node_t *m,
                  int depth, bool weak, bool (*skip)(const char *key)) {
    if (cfg_visit(c, m, depth)) return -1;
    yaml_node_pair_t *p0 = m->data.mapping.pairs.start, *pe = m->data.mapping.pairs.top;
    if (pe - p0 > CFG_MAX_KEYS) /* bounds the duplicate check below, which is quadratic */
        return c->fatal = true, cfg_fail(c, cfg_node_loc(c, m),
                                         "a mapping with %ld keys; experiment files have a few dozen (is "
                                         "this the right file?)",
                                         (long)(pe - p0));
    /* A wrong key or value is recorded and the walk goes on with the next key, so every
     * such error of the file is reported at once (cfg_go_on); a key that failed its own
     * checks is not applied. */
    int errs0 = c->n_err;
    bool bad_key[CFG_MAX_KEYS] = {false};
    /* keys: scalars, trimmed, unique (checked before anything is applied) */
    for (yaml_node_pair_t *p = p0; p < pe; p++) {
        yaml_node_t *k = cfg_node(c, p->key);
        int before = c->n_err, rc = 0;
        if (cfg_visit(c, k, depth + 1)) return -1;
        cfg_loc_t kl = cfg_node_loc(c, k);
        const char *ks = cfg_scalar(k);
        size_t kn = ks ? strlen(ks) : 0;
        if (k->type != YAML_SCALAR_NODE)
            rc = cfg_fail(c, kl, "a key must be a name, found %s; write `name: value`",
                          k->type == YAML_SEQUENCE_NODE ? "a list" : "a mapping");
        else if (!kn)
            rc = cfg_fail(c, kl, "empty key; write `name: value`");
        else if (isspace((unsigned char)ks[0]) || isspace((unsigned char)ks[kn - 1]))
            rc = cfg_fail(c, kl, "key '%s' has spaces around it; remove them", ks);
        for (yaml_node_pair_t *q = p0; !rc && q < p; q++) {
            yaml_node_t *qk = cfg_node(c, q->key);
            if (cfg_scalar(qk) && !strcmp(cfg_scalar(qk), ks))
                rc = cfg_fail(c, kl, "duplicate key '%s' (first at line %d); keep one of them",
                              ks, (int)qk->start_mark.line + 1);
        }
        if (rc && !cfg_go_on(c, before)) return -1;
        bad_key[p - p0] = rc != 0;
    }
    /* pass 1: << merge keys (earlier mappings in a << list win, so apply them last) */
    for (yaml_node_pair_t *p = p0; p < pe; p++) {
        if (bad_key[p - p0] || !is_merge_key(cfg_node(c, p->key))) continue;
        yaml_node_t *v = cfg_node(c, p->value);
        int before = c->n_err, rc = 0;
        if (v->type == YAML_MAPPING_NODE) {
            rc = cfg_apply_map(c, st, prefix, v, depth + 1, true, skip);
        } else if (v->type == YAML_SEQUENCE_NODE) {
            if (cfg_visit(c, v, depth + 1)) return -1;
            for (yaml_node_item_t *it = v->data.sequence.items.top;
                 it > v->data.sequence.items.start && (!rc || cfg_go_on(c, before));) {
                yaml_node_t *m2 = cfg_node(c, *--it);
                if (m2->type != YAML_MAPPING_NODE)
                    rc = cfg_fail(c, cfg_node_loc(c, m2),
                                  "<<: expected aliases of mappings, e.g. <<: [*a, *b]");
                else if (cfg_apply_map(c, st, prefix, m2, depth + 2, true, skip))
                    rc = -1;
            }
        } else {
            rc = cfg_fail(c, cfg_node_loc(c, v),
                          "<<: expected an alias of a mapping, e.g. <<: *defaults");
        }
        if (rc && !cfg_go_on(c, before)) return -1;
    }
    /* pass 2: this mapping's own keys */
    for (yaml_node_pair_t *p = p0; p < pe; p++) {
        yaml_node_t *k = cfg_node(c, p->key);
        if (bad_key[p - p0] || is_merge_key(k)) continue;
        const char *ks = cfg_scalar(k);
        if (!prefix[0] && skip && skip(ks)) continue;
        char full[CFG_STR];
        int before = c->n_err, rc;
        if ((size_t)snprintf(full, sizeof full, "%s%s%s", prefix, prefix[0] ? "." : "", ks) >=
            sizeof full)
            rc = cfg_fail(c, cfg_node_loc(c, k), "%.60s...: unknown key (far too long)", full);
        else
            rc = cfg_apply_value(c, st, full, k, cfg_node(c, p->value), depth + 1, weak);
        if (rc && !cfg_go_on(c, before)) return -1;
    }
    return c->n_err > errs0 ? -1 : 0;
}
