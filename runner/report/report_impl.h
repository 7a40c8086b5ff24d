/* report_impl.h: what report.c shares with report_html.c (the table's columns and their
 * human formatting). Private to runner/report/; not part of the public API. */
#ifndef RUNNER_REPORT_REPORT_IMPL_H
#define RUNNER_REPORT_REPORT_IMPL_H

#include <stddef.h>

#include "runner/report/report.h"
#include "util/fs.h"   /* mkdir_p */

/* The runs table: one row per run directory. */
typedef enum {
    RC_NAME, RC_SEED, RC_MODE, RC_WORLD, RC_PRECISION, RC_BATCH, RC_DEVICE, RC_IMAGES, RC_STEADY,
    RC_SEC_EPOCH, RC_SPEEDUP, RC_COMM, RC_MEMORY, RC_VAL_FINAL, RC_VAL_BEST, RC_LOSS, RC_STATUS, RC_COUNT
} report_col_t;

/* Column headings, indexed by report_col_t. */
extern const char *const report_col_titles[RC_COUNT];

/* Formats one cell of the human tables (Markdown, HTML) into buf; "" when unknown. */
void report_fmt(char *buf, size_t cap, report_col_t col, const report_row_t *row);

/* The members table: one row per member (a configuration over its seeds). */
typedef enum {
    MC_NAME, MC_RUNS, MC_IMAGES, MC_IMAGES_RANGE, MC_STEADY, MC_SEC_EPOCH, MC_SPEEDUP, MC_FINAL,
    MC_FINAL_RANGE, MC_BEST, MC_COUNT
} report_mcol_t;
extern const char *const report_mcol_titles[MC_COUNT];
void report_fmt_member(char *buf, size_t cap, report_mcol_t col, const report_group_t *g);

/* True for the runs table's right-aligned number columns. */
bool report_numeric_col(report_col_t c);

/* The charts: in report.html, and each also as its own files plots/<name>.svg and
 * plots/<name>.png (comparison.md links the SVGs). */
typedef enum {
    RP_LOSS_EPOCH, RP_TOP1_EPOCH, RP_LOSS_WALL, RP_TOP1_WALL, RP_THROUGHPUT, RP_COUNT
} report_plot_t;
extern const char *const report_plot_files[RP_COUNT];   /* file names without extension */
extern const char *const report_plot_titles[RP_COUNT];

/* Writes one chart: an <svg> element (also a valid standalone .svg file) or, with png,
 * a PNG image. Returns 0 / -1. */
int report_plot(const report_t *r, report_plot_t which, bool png, FILE *f);


#endif
