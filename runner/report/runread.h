/* runread.h: reading the files of a finished (or stopped) run directory.
 *
 * Loads summary.json, env.json, plan.json, metrics.csv, steps.csv, timing.csv and the
 * configuration in resolved.yaml (formats in docs/architecture.md) into memory for the
 * report and check verbs. CSV files are read
 * by header name, so added columns are ignored and reordered ones still work; every cell
 * must be a number or empty (empty reads as NaN). A last line without a newline that does
 * not have the header's field count is a half-written line of a killed run and is
 * dropped. This file does not interpret the numbers (report.c does).
 */
#ifndef RUNNER_REPORT_RUNREAD_H
#define RUNNER_REPORT_RUNREAD_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"
#include "util/json.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RUNREAD_PATH = 1024 };

/* A numeric CSV file held column by column: cols[c][r] is row r of column names[c]. */
typedef struct csv_table {
    int ncols;
    char **names;
    size_t nrows;
    double **cols;
} csv_table_t;

/* Reads path. Every name in required[0..nreq) must be in the header, else ERR_INPUT
 * naming the file, line 1 and the missing column. Cells that are not numbers are
 * ERR_INPUT naming file, line and column. Returns 0 / -1. */
int csv_table_load(const char *path, const char *const *required, int nreq, csv_table_t *t,
                   err_t *e);
/* The same on a file's text (NUL-terminated, malloc'd, taken over and freed); path names
 * it in messages. The fuzz harness (tests/fuzz/fuzz_csv.c) reads through it. */
int csv_table_parse(const char *path, char *buf, const char *const *required, int nreq,
                    csv_table_t *t, err_t *e);
void csv_table_free(csv_table_t *t);
/* The column called name, or NULL when the header has no such column. */
const double *csv_table_col(const csv_table_t *t, const char *name);

/* Everything the report needs from one run directory. */
typedef struct run_files {
    char dir[RUNREAD_PATH];
    json_t *summary;        /* summary.json, or NULL when absent (lenient only) */
    json_t *env;            /* env.json, or NULL when absent (optional) */
    bool has_metrics;       /* metrics.csv read */
    csv_table_t metrics;
    bool has_steps;         /* steps.csv read (optional) */
    csv_table_t steps;
    bool has_timing;        /* timing.csv read (optional): every read-back window */
    csv_table_t timing;
    json_t *plan;           /* plan.json, or NULL when absent (optional) */
    char *config;           /* resolved.yaml without its comments and its top-level seed:
                               line (runs that differ only in seed have equal texts); NULL
                               when absent (optional, never an error) */
    char seed[32];          /* resolved.yaml's seed, "" when unknown */
    char problem[1024];     /* lenient: the first file that was missing or unreadable */
} run_files_t;

/* Loads dir. Strict (lenient false): dir, summary.json and metrics.csv must exist and
 * every file present must parse, else ERR_INPUT naming the file (and line). Lenient: a
 * missing or malformed file is left out and described in r->problem; only an unreadable
 * directory path fails. steps.csv, timing.csv, env.json, plan.json and resolved.yaml are
 * optional either way.
 * r is zeroed first; free it with run_files_free even after a failure. */
int run_files_load(const char *dir, bool lenient, run_files_t *r, err_t *e);
void run_files_free(run_files_t *r);

/* Median of the non-NaN values in v[0..n); NaN when there are none. */
double stats_median(const double *v, size_t n);

#ifdef __cplusplus
}
#endif
#endif
