/* check.c: the regression gate declared in check.h: baseline parsing (explicit bounds or
 * a summary.json with default tolerances), evaluation and the printed table. It reads only
 * RUN_DIR/summary.json, not the CSV files. */
#include "runner/report/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { CHECK_JSON_MAX = 16 << 20 };

/* Default tolerances for a summary-vs-summary check. */
static const double VAL_TOP1_DROP = 0.005;      /* absolute, on the fraction */
static const double LOSS_RISE = 0.02;           /* relative */
static const double THROUGHPUT_DROP = 0.10;     /* relative */

static const char *type_name(json_type_t t) {
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

/* Fills b from {"metrics": {...}}; top is the parsed file. */
static int load_explicit(const char *path, const json_t *top, check_baseline_t *b, err_t *e) {
    for (size_t i = 0; i < top->count; i++) {
        const char *k = top->keys[i];
        if (!strcmp(k, "metrics")) continue;
        if (!strcmp(k, "note") && top->items[i]->type == JSON_STRING) continue;
        return err_set(e, ERR_INPUT, "%s: unknown top-level key '%s'; a baseline holds \"metrics\" "
                       "(and optionally a \"note\" string)", path, k);
    }
    const json_t *m = json_get(top, "metrics");
    if (m->type != JSON_OBJECT || m->count == 0)
        return err_set(e, ERR_INPUT, "%s: \"metrics\" must be a non-empty object like "
                       "{\"val_top1\": {\"min\": 0.91}}; it is %s", path,
                       m->type == JSON_OBJECT ? "empty" : type_name(m->type));
    if (m->count > CHECK_MAX_METRICS)
        return err_set(e, ERR_INPUT, "%s: \"metrics\" has %zu entries; at most %d are supported", path,
                       m->count, CHECK_MAX_METRICS);
    for (size_t i = 0; i < m->count; i++) {
        const char *name = m->keys[i];
        const json_t *v = m->items[i];
        check_bound_t *bd = &b->bounds[b->n];
        if (strlen(name) == 0 || strlen(name) >= CHECK_KEY)
            return err_set(e, ERR_INPUT, "%s: metrics: key '%.60s' must be a summary.json key", path, name);
        for (int j = 0; j < b->n; j++)
            if (!strcmp(b->bounds[j].metric, name))
                return err_set(e, ERR_INPUT, "%s: metrics.%s appears twice; keep one", path, name);
        snprintf(bd->metric, sizeof bd->metric, "%s", name);
        bd->min = bd->max = NAN;
        if (v->type != JSON_OBJECT)
            return err_set(e, ERR_INPUT, "%s: metrics.%s is %s; write an object like {\"min\": 0.9} "
                           "or {\"max\": 0.3}", path, name, type_name(v->type));
        for (size_t k = 0; k < v->count; k++) {
            const char *key = v->keys[k];
            bool is_min = !strcmp(key, "min"), is_max = !strcmp(key, "max");
            if (!is_min && !is_max)
                return err_set(e, ERR_INPUT, "%s: metrics.%s.%s: unknown key; use \"min\" and/or \"max\"",
                               path, name, key);
            if (v->items[k]->type != JSON_NUMBER)
                return err_set(e, ERR_INPUT, "%s: metrics.%s.%s is %s; it must be a number", path, name,
                               key, type_name(v->items[k]->type));
            *(is_min ? &bd->min : &bd->max) = v->items[k]->number;
        }
        if (isnan(bd->min) && isnan(bd->max))
            return err_set(e, ERR_INPUT, "%s: metrics.%s has no bound; give \"min\" and/or \"max\"",
                           path, name);
        if (!isnan(bd->min) && !isnan(bd->max) && bd->min > bd->max)
            return err_set(e, ERR_INPUT, "%s: metrics.%s: min %g is above max %g; swap them", path,
                           name, bd->min, bd->max);
        b->n++;
    }
    return 0;
}

/* Fills b from another run's summary.json with the default tolerances. */
static int load_from_summary(const char *path, const json_t *top, check_baseline_t *b, err_t *e) {
    static const char *const keys[] = {"val_top1", "train_loss", "images_per_second"};
    bool any = false;
    for (int i = 0; i < 3; i++) any |= json_get(top, keys[i]) != NULL;
    if (!any)
        return err_set(e, ERR_INPUT, "%s: not a baseline: expected {\"metrics\": {\"val_top1\": "
                       "{\"min\": ...}, ...}} or a run's summary.json", path);
    b->from_summary = true;
    for (int i = 0; i < 3; i++) {
        const json_t *v = json_get(top, keys[i]);
        if (!v || v->type != JSON_NUMBER)
            return err_set(e, ERR_INPUT, "%s: the baseline summary has %s for \"%s\"; it needs a number "
                           "(or write explicit bounds: {\"metrics\": {...}})", path,
                           v ? type_name(v->type) : "no value", keys[i]);
        check_bound_t *bd = &b->bounds[b->n++];
        snprintf(bd->metric, sizeof bd->metric, "%s", keys[i]);
        bd->min = bd->max = NAN;
        double x = v->number;
        if (i == 0) bd->min = x - VAL_TOP1_DROP;
        if (i == 1) bd->max = x * (1.0 + LOSS_RISE);
        if (i == 2) bd->min = x * (1.0 - THROUGHPUT_DROP);
    }
    return 0;
}

int check_load_baseline(const char *path, check_baseline_t *b, err_t *e) {
    memset(b, 0, sizeof *b);
    json_t *top = json_parse_file(path, CHECK_JSON_MAX, e);
    if (!top) return -1;
    int rc = check_baseline_from_json(path, top, b, e);
    json_free(top);
    return rc;
}

int check_baseline_from_json(const char *path, const json_t *top, check_baseline_t *b, err_t *e) {
    memset(b, 0, sizeof *b);
    int rc;
    if (top->type != JSON_OBJECT)
        rc = err_set(e, ERR_INPUT, "%s: the baseline is %s; expected an object: {\"metrics\": {...}} or "
                     "a run's summary.json", path, type_name(top->type));
    else if (json_get(top, "metrics"))
        rc = load_explicit(path, top, b, e);
    else
        rc = load_from_summary(path, top, b, e);
    return rc;
}

/* True when v is within bound x (min or max) allowing a tiny relative slack. */
static bool holds_min(double v, double min) { return isnan(min) || v >= min - 1e-9 * fmax(1.0, fabs(min)); }
static bool holds_max(double v, double max) { return isnan(max) || v <= max + 1e-9 * fmax(1.0, fabs(max)); }

void check_evaluate(const json_t *summary, const check_baseline_t *b, check_result_t *r) {
    memset(r, 0, sizeof *r);
    const char *st = json_get_string(summary, "status", NULL);
    snprintf(r->run_status, sizeof r->run_status, "%s", st ? st : "");
    r->status_ok = !st || !strcmp(st, "completed");
    if (!r->status_ok) r->regressed++;
    for (int i = 0; i < b->n; i++) {
        check_item_t *it = &r->items[r->n++];
        it->bound = b->bounds[i];
        const json_t *v = json_get(summary, it->bound.metric);
        if (!v || v->type != JSON_NUMBER || isnan(v->number)) {
            it->value = NAN;
            it->verdict = CHECK_MISSING;
            r->missing++;
            continue;
        }
        it->value = v->number;
        bool ok = holds_min(it->value, it->bound.min) && holds_max(it->value, it->bound.max);
        it->verdict = ok ? CHECK_OK : CHECK_REGRESSED;
        if (!ok) r->regressed++;
    }
}

void check_print(const check_result_t *r, const char *baseline_path, FILE *out) {
    static const char *const verdicts[] = {"ok", "REGRESSED", "missing"};
    fprintf(out, "%-24s %-14s %-28s %s\n", "metric", "value", "bound", "verdict");
    if (r->run_status[0])
        fprintf(out, "%-24s %-14s %-28s %s\n", "status", r->run_status, "completed",
                r->status_ok ? "ok" : "REGRESSED");
    for (int i = 0; i < r->n; i++) {
        const check_item_t *it = &r->items[i];
        char val[64], bound[96];
        if (isnan(it->value)) snprintf(val, sizeof val, "-");
        else snprintf(val, sizeof val, "%.6g", it->value);
        if (!isnan(it->bound.min) && !isnan(it->bound.max))
            snprintf(bound, sizeof bound, ">= %.6g and <= %.6g", it->bound.min, it->bound.max);
        else if (!isnan(it->bound.min))
            snprintf(bound, sizeof bound, ">= %.6g", it->bound.min);
        else
            snprintf(bound, sizeof bound, "<= %.6g", it->bound.max);
        fprintf(out, "%-24s %-14s %-28s %s\n", it->bound.metric, val, bound, verdicts[it->verdict]);
    }
    int ok = r->n - r->regressed - r->missing + (r->status_ok ? 0 : 1);
    if (r->regressed || r->missing)
        fprintf(out, "check FAILED against %s: %d ok, %d regressed, %d missing\n", baseline_path, ok,
                r->regressed, r->missing);
    else
        fprintf(out, "check passed against %s: %d ok\n", baseline_path, ok);
}

int check_run(const char *run_dir, const char *baseline_path, FILE *out, err_t *e) {
    struct stat st;
    if (stat(run_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        err_set(e, ERR_INPUT, "%s: not a directory; give a run directory (runs/<name>/<time>-<id>)", run_dir);
        return CHECK_BAD_INPUT;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.json", run_dir);
    if (stat(path, &st) != 0) {
        err_set(e, ERR_INPUT, "%s: missing; the run has not finished (check reads its summary.json)", path);
        return CHECK_BAD_INPUT;
    }
    json_t *summary = json_parse_file(path, CHECK_JSON_MAX, e);
    if (!summary) return CHECK_BAD_INPUT;
    if (summary->type != JSON_OBJECT) {
        json_free(summary);
        err_set(e, ERR_INPUT, "%s: line 1, column 1: expected a JSON object", path);
        return CHECK_BAD_INPUT;
    }
    check_baseline_t *b = xmalloc(sizeof *b, e);
    check_result_t *r = xmalloc(sizeof *r, e);
    int code = CHECK_BAD_INPUT;
    if (b && r && check_load_baseline(baseline_path, b, e) == 0) {
        check_evaluate(summary, b, r);
        if (out) check_print(r, baseline_path, out);
        code = (r->regressed || r->missing) ? CHECK_FAIL : CHECK_PASS;
    }
    free(b);
    free(r);
    json_free(summary);
    return code;
}
