/* report_table.c: the human formatting of the report's cells (shared with
 * report_html.c), comparison.csv, comparison.md, the console verdict and writing the
 * report's files (report.h). Rows and members are computed in report.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/report/report_impl.h"

/* ---- formatting shared with report_html.c ---- */

void report_fmt(char *buf, size_t cap, report_col_t col, const report_row_t *row) {
    double v;
    buf[0] = '\0';
    switch (col) {
    case RC_IMAGES: v = row->images_per_second; if (!isnan(v)) snprintf(buf, cap, "%.1f", v); break;
    case RC_STEADY: if (row->steady_steps >= 0) snprintf(buf, cap, "%lld", (long long)row->steady_steps); break;
    case RC_SEC_EPOCH: v = row->seconds_per_epoch; if (!isnan(v)) snprintf(buf, cap, "%.2f", v); break;
    case RC_SPEEDUP: v = row->speedup; if (!isnan(v)) snprintf(buf, cap, "%.2fx", v); break;
    case RC_COMM: v = row->comm_exposed_pct; if (!isnan(v)) snprintf(buf, cap, "%.1f%%", v); break;
    case RC_MEMORY:
        v = row->peak_memory_bytes;
        if (isnan(v)) break;
        if (v >= 1024.0 * 1024 * 1024) snprintf(buf, cap, "%.2f GiB", v / (1024.0 * 1024 * 1024));
        else snprintf(buf, cap, "%.1f MiB", v / (1024.0 * 1024));
        break;
    case RC_VAL_FINAL: v = row->final_val_top1; if (!isnan(v)) snprintf(buf, cap, "%.2f%%", 100 * v); break;
    case RC_VAL_BEST: v = row->best_val_top1; if (!isnan(v)) snprintf(buf, cap, "%.2f%%", 100 * v); break;
    case RC_LOSS: v = row->final_train_loss; if (!isnan(v)) snprintf(buf, cap, "%.4f", v); break;
    case RC_STATUS:
        if (row->exit_code > 0) snprintf(buf, cap, "%s (exit %d)", row->status, row->exit_code);
        else snprintf(buf, cap, "%s", row->status);
        break;
    case RC_WORLD: if (row->world_size > 0) snprintf(buf, cap, "%d", row->world_size); break;
    case RC_BATCH: if (row->batch_size > 0) snprintf(buf, cap, "%d", row->batch_size); break;
    case RC_NAME: snprintf(buf, cap, "%s", row->name); break;
    case RC_SEED: snprintf(buf, cap, "%s", row->seed); break;
    case RC_MODE: snprintf(buf, cap, "%s", row->mode); break;
    case RC_PRECISION: snprintf(buf, cap, "%s", row->precision); break;
    case RC_DEVICE: snprintf(buf, cap, "%s", row->device); break;
    case RC_COUNT: break;
    }
}

const char *const report_col_titles[RC_COUNT] = {
    "run", "seed", "mode", "world", "precision", "batch", "device", "images/s", "steady steps", "s/epoch",
    "speed-up", "comm exposed", "peak memory", "val top-1 (final)", "val top-1 (best)", "train loss", "status"};

bool report_numeric_col(report_col_t c) {
    return c == RC_WORLD || c == RC_BATCH || c == RC_SEED || (c >= RC_IMAGES && c <= RC_LOSS);
}

/* "12.3 ± 0.4" with the given decimals and scale (100 for a percentage). */
static void mean_std(char *buf, size_t cap, const stat_summary_t *s, int decimals, double scale, const char *unit) {
    if (s->n >= 2) snprintf(buf, cap, "%.*f%s \xc2\xb1 %.*f", decimals, scale * s->mean, unit, decimals, scale * s->std);
    else if (s->n == 1) snprintf(buf, cap, "%.*f%s", decimals, scale * s->mean, unit);
}

static void range(char *buf, size_t cap, const stat_summary_t *s, int decimals, double scale, const char *unit) {
    if (s->n >= 2) snprintf(buf, cap, "%.*f\xe2\x80\x93%.*f%s", decimals, scale * s->min, decimals, scale * s->max, unit);
}

void report_fmt_member(char *buf, size_t cap, report_mcol_t col, const report_group_t *g) {
    const verdict_member_t *s = &g->stats;
    buf[0] = '\0';
    switch (col) {
    case MC_NAME: snprintf(buf, cap, "%s", g->name); break;
    case MC_RUNS:
        if (g->completed == g->n_rows) snprintf(buf, cap, "%d", g->n_rows);
        else snprintf(buf, cap, "%d of %d", g->completed, g->n_rows);
        break;
    case MC_IMAGES: mean_std(buf, cap, &s->ips, 1, 1, ""); break;
    case MC_IMAGES_RANGE: range(buf, cap, &s->ips, 1, 1, ""); break;
    case MC_STEADY: if (s->ips.n > 0 && s->min_steady_steps >= 0) snprintf(buf, cap, "%lld", (long long)s->min_steady_steps); break;
    case MC_SEC_EPOCH: if (isfinite(g->seconds_per_epoch)) snprintf(buf, cap, "%.2f", g->seconds_per_epoch); break;
    case MC_SPEEDUP:
        if (isfinite(s->speedup_lo)) snprintf(buf, cap, "%.2fx (%.2f\xe2\x80\x93%.2f)", s->speedup, s->speedup_lo, s->speedup_hi);
        else if (isfinite(s->speedup)) snprintf(buf, cap, "%.2fx", s->speedup);
        break;
    case MC_FINAL: mean_std(buf, cap, &s->final_top1, 2, 100, "%"); break;
    case MC_FINAL_RANGE: range(buf, cap, &s->final_top1, 2, 100, "%"); break;
    case MC_BEST: mean_std(buf, cap, &s->best_top1, 2, 100, "%"); break;
    case MC_COUNT: break;
    }
}

const char *const report_mcol_titles[MC_COUNT] = {
    "member", "runs", "images/s", "images/s range", "steady steps (min)", "s/epoch", "speed-up (95%)",
    "val top-1 final", "final range", "val top-1 best"};

/* ---- CSV ---- */

static void csv_field(FILE *f, const char *s) {
    if (strpbrk(s, ",\"\n\r")) {
        fputc('"', f);
        for (; *s; s++) {
            if (*s == '"') fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    } else {
        fputs(s, f);
    }
}

static void csv_num(FILE *f, double v) {
    if (!isnan(v)) fprintf(f, "%.10g", v);
}

/* Numbers separated by commas, each followed by one (empty cells for NaN). */
static void csv_nums(FILE *f, const double *v, size_t n) {
    for (size_t k = 0; k < n; k++) {
        csv_num(f, v[k]);
        fputc(',', f);
    }
}

static void csv_stat(FILE *f, const stat_summary_t *s) {
    const double v[] = {s->mean, s->std, s->min, s->max};
    csv_nums(f, v, 4);
}

int report_write_csv(const report_t *r, FILE *f) {
    fputs("name,mode,world_size,precision,batch_size,device,images_per_second,seconds_per_epoch,"
          "speedup,comm_exposed_pct,peak_memory_bytes,final_val_top1,best_val_top1,final_train_loss,"
          "status,exit_code,run_dir,note,member,seed,steady_steps,warmup_steps,steady_seconds,"
          "images_per_second_se,images_per_second_from,member_runs,member_images_per_second_mean,"
          "member_images_per_second_std,member_images_per_second_min,member_images_per_second_max,"
          "member_seconds_per_epoch,member_speedup,member_speedup_low,member_speedup_high,"
          "member_final_val_top1_mean,member_final_val_top1_std,member_final_val_top1_min,"
          "member_final_val_top1_max,member_best_val_top1_mean,member_best_val_top1_std,"
          "member_best_val_top1_min,member_best_val_top1_max,member_fastest,member_accuracy_differs\n", f);
    for (int i = 0; i < r->n; i++) {
        const report_row_t *w = &r->rows[i];
        const report_group_t *g = &r->groups[w->group];
        const verdict_member_t *s = &g->stats;
        csv_field(f, w->name); fputc(',', f);
        csv_field(f, w->mode); fputc(',', f);
        if (w->world_size > 0) fprintf(f, "%d", w->world_size);
        fputc(',', f);
        csv_field(f, w->precision); fputc(',', f);
        if (w->batch_size > 0) fprintf(f, "%d", w->batch_size);
        fputc(',', f);
        csv_field(f, w->device); fputc(',', f);
        const double nums[] = {w->images_per_second, w->seconds_per_epoch, w->speedup, w->comm_exposed_pct,
                               w->peak_memory_bytes, w->final_val_top1, w->best_val_top1, w->final_train_loss};
        csv_nums(f, nums, sizeof nums / sizeof nums[0]);
        csv_field(f, w->status); fputc(',', f);
        if (w->exit_code >= 0) fprintf(f, "%d", w->exit_code);
        fputc(',', f);
        csv_field(f, w->dir); fputc(',', f);
        csv_field(f, w->note); fputc(',', f);
        csv_field(f, g->name); fputc(',', f);
        csv_field(f, w->seed); fputc(',', f);
        if (w->steady_steps >= 0) fprintf(f, "%lld", (long long)w->steady_steps);
        fputc(',', f);
        if (w->warmup_steps >= 0) fprintf(f, "%lld", (long long)w->warmup_steps);
        fputc(',', f);
        const double timing[] = {w->steady_seconds, w->ips_se};
        csv_nums(f, timing, 2);
        csv_field(f, w->ips_from); fputc(',', f);
        fprintf(f, "%d,", s->ips.n);
        csv_stat(f, &s->ips);
        const double speed[] = {g->seconds_per_epoch, s->speedup, s->speedup_lo, s->speedup_hi};
        csv_nums(f, speed, 4);
        csv_stat(f, &s->final_top1);
        csv_stat(f, &s->best_top1);
        if (s->fastest >= 0) fprintf(f, "%d", s->fastest);
        fputc(',', f);
        if (s->accuracy_differs >= 0) fprintf(f, "%d", s->accuracy_differs);
        fputc('\n', f);
    }
    return ferror(f) ? -1 : 0;
}

/* ---- Markdown ---- */

static void md_cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else if (*s == '\n' || *s == '\r') fputc(' ', f);
        else fputc(*s, f);
    }
}

/* One cell of a table: column c of row i into buf; returns whether the column holds
 * numbers (right-aligned). */
typedef bool (*md_cell_fn)(const report_t *r, int i, int c, char *buf, size_t cap);

static bool member_cell(const report_t *r, int i, int c, char *buf, size_t cap) {
    report_fmt_member(buf, cap, (report_mcol_t)c, &r->groups[i]);
    return c != MC_NAME;
}

static bool run_cell(const report_t *r, int i, int c, char *buf, size_t cap) {
    report_fmt(buf, cap, (report_col_t)c, &r->rows[i]);
    return report_numeric_col((report_col_t)c);
}

/* A Markdown table of rows rows (at least one: a report has a run and a member) and
 * ncols columns; the alignment row asks row 0's cells whether they hold numbers. */
static void md_table(FILE *f, const report_t *r, const char *const *titles, int ncols, int rows, md_cell_fn cell) {
    char buf[512];
    fputc('|', f);
    for (int c = 0; c < ncols; c++) fprintf(f, " %s |", titles[c]);
    fputs("\n|", f);
    for (int c = 0; c < ncols; c++) fputs(cell(r, 0, c, buf, sizeof buf) ? "---:|" : "---|", f);
    fputc('\n', f);
    for (int i = 0; i < rows; i++) {
        fputc('|', f);
        for (int c = 0; c < ncols; c++) {
            cell(r, i, c, buf, sizeof buf);
            fputc(' ', f);
            md_cell(f, buf);
            fputs(" |", f);
        }
        fputc('\n', f);
    }
}

int report_write_md(const report_t *r, FILE *f) {
    fprintf(f, "# %s\n\n**", r->title);
    md_cell(f, r->verdict.speed);
    fputs("**\n\n**", f);
    md_cell(f, r->verdict.accuracy);
    fputs("**\n\n", f);
    md_cell(f, r->verdict.method);
    fputs("\n\n## Members\n\n", f);
    md_table(f, r, report_mcol_titles, MC_COUNT, r->n_groups, member_cell);
    fputs("\n## Runs\n\n", f);
    md_table(f, r, report_col_titles, RC_COUNT, r->n, run_cell);
    bool notes = false;
    for (int i = 0; i < r->n; i++) {
        if (!r->rows[i].note[0]) continue;
        if (!notes) fputs("\nNotes:\n\n", f);
        notes = true;
        fputs("- ", f);
        md_cell(f, r->rows[i].name);
        fputs(": ", f);
        md_cell(f, r->rows[i].note);
        fputc('\n', f);
    }
    fputs("\nimages/s: steady-state rate (every step after the first 10 of each epoch, evaluation excluded); "
          "s/epoch: images per epoch at that rate; speed-up: relative to the first member's mean; ± is the "
          "standard deviation over seeds, ranges are min–max; comm exposed: share of step time spent waiting "
          "on communication.\n\n", f);
    for (int p = 0; p < RP_COUNT; p++)
        fprintf(f, "![%s](plots/%s.svg)\n", report_plot_titles[p], report_plot_files[p]);
    return ferror(f) ? -1 : 0;
}

void report_print_verdict(const report_t *r, const char *prefix, FILE *f) {
    fprintf(f, "%s%s\n%s%s\n", prefix, r->verdict.speed, prefix, r->verdict.accuracy);
}

/* ---- files ---- */

/* What one output file holds: a table rendering of the report, or one chart. */
typedef struct render_job {
    const report_t *r;
    int (*table)(const report_t *, FILE *);   /* CSV, Markdown or HTML; NULL for a chart */
    report_plot_t plot;
    bool png;
} render_job_t;

static int render(const render_job_t *j, FILE *f) {
    return j->table ? j->table(j->r, f) : report_plot(j->r, j->plot, j->png, f);
}

/* Writes dir/name through a temporary file and a rename, so readers never see half a file. */
static int write_atomic(const char *dir, const char *name, const render_job_t *job, err_t *e) {
    char path[REPORT_PATH + 64], tmp[REPORT_PATH + 80];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    FILE *f = fopen(tmp, "wb");
    if (!f) return err_errno(e, ERR_INPUT, "%s: cannot write", tmp);
    int bad = render(job, f);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) bad = -1;
    if (fclose(f) != 0) bad = -1;
    if (bad) {
        unlink(tmp);
        return err_errno(e, ERR_RUNTIME, "%s: write failed", path);
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return err_errno(e, ERR_RUNTIME, "%s: cannot rename into place", path);
    }
    return 0;
}

int report_write(const report_t *r, const char *out_dir, err_t *e) {
    char plots[REPORT_PATH + 16], name[128];
    snprintf(plots, sizeof plots, "%s/plots", out_dir);
    if (mkdir_p(plots, ERR_INPUT, e)) return -1;
    for (int p = 0; p < RP_COUNT; p++)
        for (int png = 0; png <= 1; png++) {
            render_job_t job = {.r = r, .plot = (report_plot_t)p, .png = png};
            snprintf(name, sizeof name, "%s.%s", report_plot_files[p], png ? "png" : "svg");
            if (write_atomic(plots, name, &job, e)) return -1;
        }
    const struct { const char *name; int (*table)(const report_t *, FILE *); } tables[] = {
        {"comparison.csv", report_write_csv}, {"comparison.md", report_write_md},
        {"report.html", report_write_html}};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        render_job_t job = {.r = r, .table = tables[i].table};
        if (write_atomic(out_dir, tables[i].name, &job, e)) return -1;
    }
    return 0;
}
