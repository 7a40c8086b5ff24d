/* check.h: the CI regression gate, `runner check RUN_DIR --baseline FILE`.
 *
 * A baseline is one of two JSON files:
 *   - explicit bounds: {"metrics": {"val_top1": {"min": 0.91}, "train_loss": {"max": 0.3}}}
 *     (any numeric summary.json key, "min" and/or "max"; an optional "note" string);
 *   - another run's summary.json (no "metrics" key): default tolerances then apply:
 *     val_top1 >= base - 0.005 (half a point), train_loss <= base * 1.02,
 *     images_per_second >= base * 0.90.
 * Bounds are compared with a relative slack of 1e-9 so numbers written in decimal land
 * on the side they were meant for (0.9 - 0.005 accepts 0.895).
 * The run's numbers come from RUN_DIR/summary.json; a run whose "status" is not
 * "completed" fails the gate too. A metric the run does not report is "missing", which
 * fails the gate (a gate that cannot see a number must not pass).
 * This module reads files only; it does not run anything.
 */
#ifndef RUNNER_REPORT_CHECK_H
#define RUNNER_REPORT_CHECK_H

#include <stdbool.h>
#include <stdio.h>

#include "util/err.h"
#include "util/json.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CHECK_MAX_METRICS = 64, CHECK_KEY = 128 };

/* Exit codes of the gate. */
enum { CHECK_PASS = 0, CHECK_FAIL = 1, CHECK_BAD_INPUT = 2 };

typedef struct check_bound {
    char metric[CHECK_KEY];   /* summary.json key */
    double min, max;          /* NaN = no bound on that side */
} check_bound_t;

typedef struct check_baseline {
    bool from_summary;        /* bounds derived from a run's summary.json */
    int n;
    check_bound_t bounds[CHECK_MAX_METRICS];
} check_baseline_t;

typedef enum { CHECK_OK = 0, CHECK_REGRESSED, CHECK_MISSING } check_verdict_t;

typedef struct check_item {
    check_bound_t bound;
    double value;             /* NaN when missing */
    check_verdict_t verdict;
} check_item_t;

typedef struct check_result {
    int n;
    check_item_t items[CHECK_MAX_METRICS];
    char run_status[64];      /* summary.json "status", "" when absent */
    bool status_ok;           /* absent or "completed" */
    int regressed, missing;   /* counts (a bad status counts as regressed) */
} check_result_t;

/* Reads and validates a baseline file (either form). Structure errors are ERR_INPUT naming
 * the file and the key path ("metrics.val_top1.min") and the fix; JSON syntax errors give
 * line and column. Returns 0 / -1. */
int check_load_baseline(const char *path, check_baseline_t *b, err_t *e);
/* The same from a parsed file (path names it in messages); the fuzz harness uses it. */
int check_baseline_from_json(const char *path, const json_t *top, check_baseline_t *b, err_t *e);

/* Evaluates a run's summary (a JSON object) against b. Never fails. */
void check_evaluate(const json_t *summary, const check_baseline_t *b, check_result_t *r);

/* Prints the table "metric value bound verdict" and a last line with the outcome. */
void check_print(const check_result_t *r, const char *baseline_path, FILE *out);

/* The verb: loads RUN_DIR/summary.json and the baseline, prints the table to out (may be
 * NULL) and returns CHECK_PASS, CHECK_FAIL, or CHECK_BAD_INPUT with e filled. */
int check_run(const char *run_dir, const char *baseline_path, FILE *out, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
