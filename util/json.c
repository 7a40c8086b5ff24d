/* json.c: the writer and parser declared in json.h. */
#include "util/json.h"
#include "util/fs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- writer ---------------- */

void jw_init(jw_t *w, FILE *f, bool pretty) {
    memset(w, 0, sizeof *w);
    w->f = f;
    w->pretty = pretty;
}

static void jw_indent(jw_t *w) {
    if (!w->pretty) return;
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
}

/* Emits the separator that goes before a value or key at the current depth. */
static void jw_pre(jw_t *w) {
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth > 0) {
        if (w->need_comma[w->depth]) fputc(',', w->f);
        jw_indent(w);
    }
    w->need_comma[w->depth] = true;
}

static void jw_open(jw_t *w, char c) {
    jw_pre(w);
    fputc(c, w->f);
    if (w->depth < 63) w->depth++;
    w->need_comma[w->depth] = false;
}

static void jw_close(jw_t *w, char c) {
    bool had = w->need_comma[w->depth];
    if (w->depth > 0) w->depth--;
    if (had) jw_indent(w);
    fputc(c, w->f);
}

void jw_obj_begin(jw_t *w) { jw_open(w, '{'); }
void jw_obj_end(jw_t *w) { jw_close(w, '}'); }
void jw_arr_begin(jw_t *w) { jw_open(w, '['); }
void jw_arr_end(jw_t *w) { jw_close(w, ']'); }

void json_write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

void jw_key(jw_t *w, const char *key) {
    jw_pre(w);
    json_write_string(w->f, key);
    fputs(w->pretty ? ": " : ":", w->f);
    w->after_key = true;
}

void jw_str(jw_t *w, const char *s) {
    jw_pre(w);
    if (s) json_write_string(w->f, s);
    else fputs("null", w->f);
}

void jw_num(jw_t *w, double v) {
    jw_pre(w);
    if (!isfinite(v)) fputs("null", w->f);
    else if (v == floor(v) && fabs(v) < 1e15) fprintf(w->f, "%.1f", v);
    else fprintf(w->f, "%.17g", v);
}

void jw_int(jw_t *w, int64_t v) {
    jw_pre(w);
    fprintf(w->f, "%lld", (long long)v);
}

void jw_bool(jw_t *w, bool v) {
    jw_pre(w);
    fputs(v ? "true" : "false", w->f);
}

void jw_null(jw_t *w) {
    jw_pre(w);
    fputs("null", w->f);
}

void jw_kstr(jw_t *w, const char *k, const char *s) { jw_key(w, k); jw_str(w, s); }
void jw_knum(jw_t *w, const char *k, double v) { jw_key(w, k); jw_num(w, v); }
void jw_kint(jw_t *w, const char *k, int64_t v) { jw_key(w, k); jw_int(w, v); }
void jw_kbool(jw_t *w, const char *k, bool v) { jw_key(w, k); jw_bool(w, v); }

/* ---------------- parser ---------------- */


typedef struct jp {
    const char *s, *end, *p;
    err_t *e;
} jp_t;

static json_t *jp_fail(jp_t *j, const char *what) {
    int line = 1, col = 1;
    for (const char *q = j->s; q < j->p && q < j->end; q++) {
        if (*q == '\n') { line++; col = 1; } else col++;
    }
    err_set(j->e, ERR_INPUT, "line %d, column %d: %s", line, col, what);
    return NULL;
}

static void jp_ws(jp_t *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static json_t *jp_new(jp_t *j, json_type_t t) {
    json_t *n = xcalloc(1, sizeof *n, j->e);
    if (n) n->type = t;
    return n;
}

static int jp_hex4(jp_t *j, unsigned *out) {
    if (j->end - j->p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = j->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    j->p += 4;
    *out = v;
    return 0;
}

static size_t utf8_put(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string literal at j->p (which points at the opening quote). */
static char *jp_string(jp_t *j) {
    j->p++;
    const char *start = j->p;
    size_t cap = 16;
    while (j->p < j->end && *j->p != '"') {
        if (*j->p == '\\' && j->end - j->p > 1) j->p++;
        j->p++;
        cap++;
    }
    j->p = start;
    /* an escape never produces more bytes than it takes (\uXXXX: 6 in, at most 3 out;
     * a surrogate pair: 12 in, 4 out), so the text's length bounds the output */
    char *out = xmalloc(cap + 8, j->e), *o = out;
    if (!out) return NULL;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) { free(out); jp_fail(j, "control character inside a string"); return NULL; }
        if (c != '\\') { *o++ = (char)c; j->p++; continue; }
        j->p++;
        if (j->p >= j->end) break;
        char esc = *j->p++;
        switch (esc) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp;
            if (jp_hex4(j, &cp)) { free(out); jp_fail(j, "bad \\u escape"); return NULL; }
            if (cp >= 0xD800 && cp < 0xDC00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
                unsigned lo;
                j->p += 2;
                if (jp_hex4(j, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    free(out); jp_fail(j, "bad surrogate pair"); return NULL;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) { free(out); jp_fail(j, "\\u0000 is not allowed"); return NULL; }
            o += utf8_put(o, cp);
            break;
        }
        default: free(out); jp_fail(j, "unknown escape in string"); return NULL;
        }
    }
    if (j->p >= j->end) { free(out); jp_fail(j, "unterminated string"); return NULL; }
    j->p++;
    *o = '\0';
    return out;
}

static json_t *jp_value(jp_t *j, int depth);

static int jp_push(jp_t *j, json_t *n, json_t *item, char *key) {
    if (n->count == 0 || (n->count >= 4 && (n->count & (n->count - 1)) == 0)) { /* grow x2 */
        size_t cap = n->count ? n->count * 2 : 4;
        json_t **items = realloc(n->items, cap * sizeof *items);
        if (!items) return err_set(j->e, ERR_RUNTIME, "out of memory parsing JSON");
        n->items = items;
        if (n->type == JSON_OBJECT) {
            char **keys = realloc(n->keys, cap * sizeof *keys);
            if (!keys) return err_set(j->e, ERR_RUNTIME, "out of memory parsing JSON");
            n->keys = keys;
        }
    }
    if (n->count >= JSON_MAX_ITEMS) {
        jp_fail(j, "more than " JSON_STR(JSON_MAX_ITEMS) " items in one array or object (JSON_MAX_ITEMS)");
        return -1;
    }
    n->items[n->count] = item;
    if (n->type == JSON_OBJECT) n->keys[n->count] = key;
    n->count++;
    return 0;
}

static json_t *jp_container(jp_t *j, int depth, bool object) {
    json_t *n = jp_new(j, object ? JSON_OBJECT : JSON_ARRAY);
    if (!n) return NULL;
    j->p++;
    jp_ws(j);
    if (j->p < j->end && *j->p == (object ? '}' : ']')) { j->p++; return n; }
    for (;;) {
        char *key = NULL;
        jp_ws(j);
        if (object) {
            if (j->p >= j->end || *j->p != '"') { json_free(n); return jp_fail(j, "expected a string key"); }
            if (!(key = jp_string(j))) { json_free(n); return NULL; }
            jp_ws(j);
            if (j->p >= j->end || *j->p != ':') { free(key); json_free(n); return jp_fail(j, "expected ':'"); }
            j->p++;
        }
        json_t *v = jp_value(j, depth + 1);
        if (!v || jp_push(j, n, v, key)) { free(key); json_free(v); json_free(n); return NULL; }
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (j->p < j->end && *j->p == (object ? '}' : ']')) { j->p++; return n; }
        json_free(n);
        return jp_fail(j, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static json_t *jp_value(jp_t *j, int depth) {
    if (depth > JSON_MAX_DEPTH)
        return jp_fail(j, "nesting too deep: more than " JSON_STR(JSON_MAX_DEPTH) " levels (JSON_MAX_DEPTH)");
    jp_ws(j);
    if (j->p >= j->end) return jp_fail(j, "unexpected end of input");
    char c = *j->p;
    if (c == '{') return jp_container(j, depth, true);
    if (c == '[') return jp_container(j, depth, false);
    if (c == '"') {
        char *s = jp_string(j);
        if (!s) return NULL;
        json_t *n = jp_new(j, JSON_STRING);
        if (!n) { free(s); return NULL; }
        n->string = s;
        return n;
    }
    static const struct { const char *word; json_type_t t; bool b; } words[] = {
        {"true", JSON_BOOL, true}, {"false", JSON_BOOL, false}, {"null", JSON_NULL, false}};
    for (size_t i = 0; i < 3; i++) {
        size_t l = strlen(words[i].word);
        if ((size_t)(j->end - j->p) >= l && !memcmp(j->p, words[i].word, l)) {
            j->p += l;
            json_t *n = jp_new(j, words[i].t);
            if (n) n->boolean = words[i].b;
            return n;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char buf[64];
        size_t l = 0;
        while (j->p + l < j->end && l < sizeof buf - 1 && strchr("+-0123456789.eE", j->p[l])) {
            buf[l] = j->p[l];
            l++;
        }
        buf[l] = '\0';
        char *endp;
        double v = strtod(buf, &endp);
        if (endp != buf + l || l == 0) return jp_fail(j, "malformed number");
        /* 1e999 is valid JSON text but no double: refused rather than read as infinity,
         * which no JSON writer can write back */
        if (!isfinite(v)) return jp_fail(j, "number out of range (beyond +-1.7e308)");
        j->p += l;
        json_t *n = jp_new(j, JSON_NUMBER);
        if (n) n->number = v;
        return n;
    }
    return jp_fail(j, "unexpected character");
}

json_t *json_parse(const char *text, size_t len, err_t *e) {
    if (len > JSON_MAX_TEXT) {
        err_set(e, ERR_INPUT, "%zu bytes of JSON, more than the %zu allowed (JSON_MAX_TEXT)", len,
                (size_t)JSON_MAX_TEXT);
        return NULL;
    }
    jp_t j = {text, text + len, text, e};
    json_t *v = jp_value(&j, 0);
    if (!v) return NULL;
    jp_ws(&j);
    if (j.p != j.end) {
        json_free(v);
        return jp_fail(&j, "trailing characters after the JSON value");
    }
    return v;
}

json_t *json_parse_file(const char *path, size_t max_bytes, err_t *e) {
    char *buf;
    size_t n;
    if (read_file_bounded(path, max_bytes, "this JSON file", ERR_INPUT, &buf, &n, e)) return NULL;
    json_t *j = json_parse(buf, n, e);
    free(buf);
    if (!j) err_wrap(e, "%s", path);
    return j;
}

void json_free(json_t *j) {
    if (!j) return;
    for (size_t i = 0; i < j->count; i++) {
        json_free(j->items[i]);
        if (j->keys) free(j->keys[i]);
    }
    free(j->items);
    free(j->keys);
    free(j->string);
    free(j);
}

const json_t *json_get(const json_t *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (!strcmp(obj->keys[i], key)) return obj->items[i];
    return NULL;
}

double json_get_number(const json_t *obj, const char *key, double dflt) {
    const json_t *v = json_get(obj, key);
    return v && v->type == JSON_NUMBER ? v->number : dflt;
}

int json_get_int(const json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t dflt,
                 int64_t *out) {
    const json_t *v = json_get(obj, key);
    if (!v || v->type == JSON_NULL) { *out = dflt; return 0; }
    /* compare as doubles before converting: a double outside int64 converts to nothing */
    if (v->type != JSON_NUMBER || !(v->number >= (double)lo && v->number <= (double)hi) ||
        v->number != floor(v->number))
        return -1;
    *out = (int64_t)v->number;
    return 0;
}

const char *json_get_string(const json_t *obj, const char *key, const char *dflt) {
    const json_t *v = json_get(obj, key);
    return v && v->type == JSON_STRING ? v->string : dflt;
}
