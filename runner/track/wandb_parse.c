/* wandb_parse.c: reading what the W&B service sends back, apart from the sender so that the
 * fuzz harness (tests/fuzz/fuzz_wandb.c) reaches every line of it: the GraphQL answers of
 * Viewer, RunResumeStatus and UpsertBucket, a Retry-After header line, and a netrc file.
 *
 * Every answer is untrusted: a body is at most TRACK_HTTP_MAX_BODY bytes (the sender keeps
 * no more), JSON is bounded by util/json.h, numbers that become offsets must be whole and
 * in [0, 2^53] (anything else leaves the default), strings are cut to the caller's buffer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/track/track_impl.h"
#include "util/json.h"

/* Follows a path of object keys in a parsed answer. */
static const json_t *dig(const json_t *j, const char *const *path) {
    for (; j && *path; path++) j = json_get(j, *path);
    return j;
}

static json_t *parse_body(const char *body, size_t len) {
    if (len > TRACK_HTTP_MAX_BODY) return NULL;
    return json_parse(body, len, NULL);
}

int track_wandb_parse_viewer(const char *body, size_t len, char *entity, size_t cap) {
    json_t *j = parse_body(body, len);
    if (!j) return -1;
    const char *path[] = {"data", "viewer", NULL};
    const char *ent = json_get_string(dig(j, path), "entity", NULL);
    if (ent && cap) snprintf(entity, cap, "%s", ent);
    json_free(j);
    return 0;
}

int track_wandb_parse_resume(const char *body, size_t len, int64_t *hist_offset,
                             int64_t *out_offset, int64_t *skip_through_step) {
    json_t *j = parse_body(body, len);
    if (!j) return -1;
    const char *path[] = {"data", "model", "bucket", NULL};
    const json_t *b = dig(j, path);
    const int64_t big = (int64_t)1 << 53;
    if (b && b->type == JSON_OBJECT) {
        int64_t v;
        if (json_get_int(b, "historyLineCount", 0, big, 0, &v) == 0) *hist_offset = v;
        if (json_get_int(b, "logLineCount", 0, big, 0, &v) == 0) *out_offset = v;
        /* historyTail: a JSON text of an array of JSON texts of rows; the last row's _step */
        const char *tail = json_get_string(b, "historyTail", NULL);
        json_t *t = tail ? json_parse(tail, strlen(tail), NULL) : NULL;
        if (t && t->type == JSON_ARRAY && t->count) {
            const json_t *last = t->items[t->count - 1];
            json_t *row = last->type == JSON_STRING
                ? json_parse(last->string, strlen(last->string), NULL) : NULL;
            if (row && json_get_int(row, "_step", -1, big, -1, &v) == 0) *skip_through_step = v;
            json_free(row);
        }
        json_free(t);
    }
    json_free(j);
    return 0;
}

int track_wandb_parse_upsert(const char *body, size_t len, char *entity, size_t cap,
                             bool *refused) {
    json_t *j = parse_body(body, len);
    if (!j) return -1;
    const char *path[] = {"data", "upsertBucket", "bucket", "project", "entity", NULL};
    const char *ent = json_get_string(dig(j, path), "name", NULL);
    if (ent && cap) snprintf(entity, cap, "%s", ent);
    *refused = json_get(j, "errors") != NULL;
    json_free(j);
    return 0;
}

int track_http_retry_after(const char *line, size_t len, double *seconds) {
    if (len <= 12 || strncasecmp(line, "Retry-After:", 12)) return -1;
    char tmp[64];
    size_t k = len - 12 < sizeof tmp - 1 ? len - 12 : sizeof tmp - 1;
    memcpy(tmp, line + 12, k);
    tmp[k] = 0;
    char *end = NULL;
    double v = strtod(tmp, &end);
    /* an HTTP date (not seconds), a negative or a non-finite value: ignored */
    if (end == tmp || !(v >= 0) || !isfinite(v)) return -1;
    *seconds = v;
    return 0;
}
