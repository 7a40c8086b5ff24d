/* json.h: a small JSON writer and a DOM parser, enough for the runner's own files
 * (plan.json, env.json, summary.json, baselines, safetensors headers, W&B bodies).
 *
 * Writer: jw_t streams to a FILE* (use open_memstream for a string); the caller
 * balances begin/end calls. Numbers print with %.17g so doubles round-trip; non-finite
 * numbers print as null (JSON has no NaN).
 * Parser: json_parse builds a tree owned by the returned node; json_free frees it.
 * Errors give "line L, column C: what" in err_t (code ERR_INPUT). Bounds, checked before
 * anything is allocated for them, named in the message: JSON_MAX_TEXT of text,
 * JSON_MAX_DEPTH levels of nesting, JSON_MAX_ITEMS items in one array or object (a string
 * is bounded by the text).
 */
#ifndef RUNNER_UTIL_JSON_H
#define RUNNER_UTIL_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- writer ---- */
typedef struct jw {
    FILE *f;
    int depth;
    bool pretty;
    bool need_comma[64];
    bool after_key;
} jw_t;

void jw_init(jw_t *w, FILE *f, bool pretty);
void jw_obj_begin(jw_t *w);
void jw_obj_end(jw_t *w);
void jw_arr_begin(jw_t *w);
void jw_arr_end(jw_t *w);
void jw_key(jw_t *w, const char *key);
void jw_str(jw_t *w, const char *s);         /* NULL writes null */
void jw_num(jw_t *w, double v);
void jw_int(jw_t *w, int64_t v);
void jw_bool(jw_t *w, bool v);
void jw_null(jw_t *w);
/* key + value shorthands */
void jw_kstr(jw_t *w, const char *k, const char *s);
void jw_knum(jw_t *w, const char *k, double v);
void jw_kint(jw_t *w, const char *k, int64_t v);
void jw_kbool(jw_t *w, const char *k, bool v);
/* Writes s as a JSON string literal (quotes included) to f. */
void json_write_string(FILE *f, const char *s);

/* ---- parser ---- */
#define JSON_MAX_TEXT (1024u * 1024u * 1024u)
#define JSON_MAX_DEPTH 256
#define JSON_MAX_ITEMS 16777216
#define JSON_STR_(x) #x
#define JSON_STR(x) JSON_STR_(x)

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type_t;

typedef struct json {
    json_type_t type;
    bool boolean;
    double number;
    char *string;          /* JSON_STRING: NUL-terminated, may contain no NULs */
    size_t count;          /* JSON_ARRAY / JSON_OBJECT: number of items */
    struct json **items;   /* the values */
    char **keys;           /* JSON_OBJECT: the keys, parallel to items */
} json_t;

json_t *json_parse(const char *text, size_t len, err_t *e);
/* Reads and parses a whole file (at most max_bytes); errors name the path. */
json_t *json_parse_file(const char *path, size_t max_bytes, err_t *e);
void json_free(json_t *j);

const json_t *json_get(const json_t *obj, const char *key);  /* NULL if absent / not object */
double json_get_number(const json_t *obj, const char *key, double dflt);
const char *json_get_string(const json_t *obj, const char *key, const char *dflt);
/* An integer value in [lo, hi] into *out; dflt when the key is absent or null. -1 when it
 * is there but not a whole number in range (a double outside int64 cannot be converted). */
int json_get_int(const json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t dflt,
                 int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
