/* report.h: tables and plots from finished runs (`runner report`, end of `runner compare`).
 *
 * A report has one row per run directory, computed from its files (docs/comparisons.md
 * defines each number):
 *   images/s         median of steps.csv images_per_second after dropping the first 10%
 *                    of rows (at least one row when there are two or more) as warm-up;
 *                    summary.json images_per_second when steps.csv has no rows
 *   s/epoch          median of metrics.csv epoch_seconds (fallback: summary.json)
 *   speed-up         images/s divided by the first row's images/s
 *   comm exposed %   100 * sum(comm_exposed_seconds) / sum(step_seconds) over steps.csv
 *                    (fallback: 100 * summary.json comm_exposed_fraction)
 *   peak memory      max of metrics.csv peak_memory_bytes (fallback: summary.json)
 *   final/best val top-1, final train loss: from metrics.csv (fallback: summary.json)
 * Unknown numbers are NaN and print as empty cells.
 * report_write produces comparison.csv, comparison.md and a self-contained report.html
 * (inline SVG plots, inline CSS, no scripts, nothing fetched from the network), and the
 * same charts as plots/<chart>.svg (linked from comparison.md) and plots/<chart>.png.
 * This module does not run anything; compare.h runs matrices.
 */
#ifndef RUNNER_REPORT_REPORT_H
#define RUNNER_REPORT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "util/err.h"
#include "util/json.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One run to report on. Only dir is required; the rest refines what the files say. */
typedef struct report_input {
    const char *dir;        /* the run directory */
    const char *label;      /* row name; NULL: summary.json "name", else the dir's base name */
    const char *status;     /* NULL: summary.json "status"; set (compare): this status wins */
    int exit_code;          /* with status: the run's exit code */
    const char *message;    /* with status: why it did not complete; NULL if nothing to say */
    bool lenient;           /* missing/malformed files give a row marked incomplete instead
                               of an ERR_INPUT (compare uses this for failed members) */
    /* What the run was configured as, used where summary.json does not say (a member
       that failed before writing it). NULL / 0 = unknown. */
    const char *mode, *precision, *device;
    int world_size, batch_size;
} report_input_t;

enum { REPORT_STR = 256, REPORT_PATH = 1024 };

typedef struct report_row {
    char name[REPORT_STR];
    char dir[REPORT_PATH];
    char mode[32], precision[32], device[64], status[32];
    char note[1024];        /* why a number is missing or the run failed; "" if nothing */
    int world_size, batch_size;  /* 0 = unknown */
    int exit_code;          /* -1 = unknown */
    double images_per_second, seconds_per_epoch, speedup, comm_exposed_pct;
    double peak_memory_bytes, final_val_top1, best_val_top1, final_train_loss;
    /* per-epoch series for the plots (n_epochs entries each, NaN where not recorded) */
    size_t n_epochs;
    double *epoch, *train_loss, *val_top1, *wall_seconds;  /* wall: cumulative epoch_seconds */
    json_t *env;            /* env.json (owned), NULL when absent */
} report_row_t;

typedef struct report {
    char title[REPORT_STR];
    int n;
    report_row_t *rows;
} report_t;

/* Reads every input's files and computes its row. Strict inputs fail on a missing or
 * malformed file (ERR_INPUT naming the file and line). r is zeroed first; free it with
 * report_free even after a failure. Returns 0 / -1. */
int report_build(const report_input_t *in, int n, const char *title, report_t *r, err_t *e);
void report_free(report_t *r);

/* The three renderings, to a stream. Return 0, or -1 when the stream reports an error. */
int report_write_csv(const report_t *r, FILE *f);
int report_write_md(const report_t *r, FILE *f);
int report_write_html(const report_t *r, FILE *f);

/* Writes out_dir/comparison.csv, comparison.md, report.html and plots/<chart>.svg and
 * .png (each to a temporary file, then renamed), creating out_dir if needed. Returns
 * 0 / -1. */
int report_write(const report_t *r, const char *out_dir, err_t *e);

/* The `runner report RUN_DIR... [--output DIR]` verb: builds a strict report of dirs
 * (title "report"), writes it to out_dir (NULL: "report" in the current directory) and
 * prints the Markdown table and the output paths to out (may be NULL). A comparison
 * directory (holding compare.json and no summary.json) stands for its members, read as
 * `runner compare` does (failed members marked); given alone, its matrix name is the
 * title. Returns 0 / -1. */
int report_runs(const char *const *dirs, int n, const char *out_dir, FILE *out, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
