/* report.h: tables, plots and a verdict from finished runs (`runner report`, end of
 * `runner compare`).
 *
 * A report has one row per run directory, computed from its files (docs/comparisons.md
 * defines each number), and groups its runs into members: the runs of one configuration
 * over seeds (a compare member and its repeats, or runs whose resolved.yaml differ only
 * in seed). Per run:
 *   images/s         steady-state rate from timing.csv: images over seconds of every
 *                    read-back window after the first STEADY_WARMUP_STEPS steps of each
 *                    epoch (steady.h); without timing.csv, summary.json's
 *                    images_per_second when it says steady_steps, else (a run directory
 *                    from an older runner) the median of steps.csv images_per_second
 *                    after its first 10% of rows, marked as not measured from every step
 *   s/epoch          images per epoch (summary.json, else plan.json) / images/s, the same
 *                    measurement; for an older run the median of metrics.csv epoch_seconds
 *   speed-up         images/s divided by the first member's mean images/s
 *   comm exposed %   100 * sum(comm_exposed_seconds) / sum(step_seconds) over steps.csv
 *                    (fallback: 100 * summary.json comm_exposed_fraction)
 *   peak memory      max of metrics.csv peak_memory_bytes (fallback: summary.json)
 *   final/best val top-1, final train loss: from metrics.csv (fallback: summary.json)
 * Per member (completed runs only): mean, standard deviation, min and max of images/s and
 * of final and best val top-1, and the verdict (verdict.h) over the members.
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

#include "runner/report/verdict.h"
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
    /* Which member the run belongs to: runs with the same group_key are repeats of one
       configuration, shown as group_label. NULL key: the runs whose resolved.yaml differ
       at most in seed, labelled with the run's name. */
    const char *group_key, *group_label;
    const char *seed;       /* NULL: resolved.yaml's seed */
} report_input_t;

enum { REPORT_STR = 256, REPORT_PATH = 1024, REPORT_MAX_RUNS = 1024 };

typedef struct report_row {
    char name[REPORT_STR];
    char dir[REPORT_PATH];
    char mode[32], precision[32], device[64], status[32];
    char note[1024];        /* why a number is missing or the run failed; "" if nothing */
    int world_size, batch_size;  /* 0 = unknown */
    int exit_code;          /* -1 = unknown */
    char seed[32];          /* "" = unknown */
    int group;              /* index into report_t.groups */
    double images_per_second, seconds_per_epoch, speedup, comm_exposed_pct;
    double peak_memory_bytes, final_val_top1, best_val_top1, final_train_loss;
    /* how images/s was measured */
    char ips_from[16];      /* "timing.csv" | "summary.json" | "steps.csv" | "" (none) */
    int64_t steady_steps, warmup_steps;  /* -1 = unknown (an older run) */
    double steady_seconds, images_per_epoch;
    double ips_se;          /* within-run standard error of images/s; NaN unknown */
    int ips_blocks;         /* blocks it was taken over (0: none) */
    /* per-epoch series for the plots (n_epochs entries each, NaN where not recorded) */
    size_t n_epochs;
    double *epoch, *train_loss, *val_top1, *wall_seconds;  /* wall: cumulative epoch_seconds */
    json_t *env;            /* env.json (owned), NULL when absent */
} report_row_t;

/* A member: the runs of one configuration (over seeds). */
typedef struct report_group {
    char name[REPORT_STR];
    int n_rows;
    int *rows;              /* indices into report_t.rows, in order */
    int completed;          /* rows with status completed (the statistics are theirs) */
    double seconds_per_epoch;   /* images per epoch / mean images/s */
    verdict_member_t stats; /* statistics, and what the verdict says of the member */
} report_group_t;

typedef struct report {
    char title[REPORT_STR];
    int n;
    report_row_t *rows;
    int n_groups;
    report_group_t *groups;
    verdict_t verdict;
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

/* Prints the verdict as console lines ("fastest: ...", "accuracy: ..."), each prefixed
 * with prefix, to f. */
void report_print_verdict(const report_t *r, const char *prefix, FILE *f);

/* The `runner report RUN_DIR... [--output DIR]` verb: builds a strict report of dirs
 * (title "report"), writes it to out_dir (NULL: "report" in the current directory) and
 * prints the Markdown (verdict and tables) and the output paths to out (may be NULL). A comparison
 * directory (holding compare.json and no summary.json) stands for its members, read as
 * `runner compare` does (failed members marked); given alone, its matrix name is the
 * title. Returns 0 / -1. */
int report_runs(const char *const *dirs, int n, const char *out_dir, FILE *out, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
