/* fuzz_json.c: the JSON reader (util/json.c) and what reads JSON files: a baseline
 * (check_baseline_from_json, as `runner check --baseline` loads it), a summary.json
 * evaluated against it and printed (check_evaluate / check_print), and plan.json / env.json
 * like any parsed object. Property: what the writer dumps of a parsed value parses again
 * to a value that dumps the same (the writer's escaping and number format round-trip). */
#include <math.h>

#include "runner/report/check.h"
#include "runner/track/track_impl.h"
#include "tests/fuzz/fuzz.h"
#include "util/json.h"

static char *dump(const json_t *j, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) abort();
    track_json_dump(f, j);
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    err_t e = {0};
    json_t *j = json_parse((const char *)data, size, &e);
    if (!j) {
        FUZZ_ERR_OK(&e);
        return 0;
    }
    size_t n1, n2;
    char *d1 = dump(j, &n1);
    err_t e2 = {0};
    json_t *again = json_parse(d1, n1, &e2);
    FUZZ_ASSERT(again != NULL);
    char *d2 = dump(again, &n2);
    FUZZ_ASSERT(n1 == n2 && !memcmp(d1, d2, n1));
    free(d1);
    free(d2);
    json_free(again);

    if (j->type == JSON_OBJECT) {
        check_baseline_t *b = calloc(1, sizeof *b);
        check_result_t *r = calloc(1, sizeof *r);
        if (!b || !r) abort();
        err_t be = {0};
        if (check_baseline_from_json("baseline.json", j, b, &be) == 0) {
            check_evaluate(j, b, r);   /* the file as its own summary */
        } else {
            FUZZ_ERR_OK(&be);
            /* as a summary.json against a fixed baseline */
            b->n = 2;
            snprintf(b->bounds[0].metric, sizeof b->bounds[0].metric, "val_top1");
            b->bounds[0].min = 0.5;
            b->bounds[0].max = NAN;
            snprintf(b->bounds[1].metric, sizeof b->bounds[1].metric, "train_loss");
            b->bounds[1].min = NAN;
            b->bounds[1].max = 2.0;
            check_evaluate(j, b, r);
        }
        FILE *out = fopen("/dev/null", "w");
        if (out) {
            check_print(r, "baseline.json", out);
            fclose(out);
        }
        /* what report/compare read from summary.json and plan.json */
        (void)json_get_number(j, "images_per_second", 0);
        (void)json_get_string(j, "status", "");
        int64_t v;
        (void)json_get_int(j, "world_size", 1, 1 << 20, 1, &v);
        free(b);
        free(r);
    }
    json_free(j);
    return 0;
}
