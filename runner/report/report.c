/* report.c: computing report rows from run directories, the CSV and Markdown renderings,
 * writing the report files and the `runner report` verb (report.h). The HTML page is in
 * report_html.c and the charts in plot.c. */
#include "runner/report/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/report/compare.h"
#include "runner/report/report_impl.h"
#include "runner/report/runread.h"

/* Copies the summary string key into dst when present, else the hint, else "". */
static void pick_str(char *dst, size_t cap, const json_t *summary, const char *key, const char *hint) {
    const char *s = json_get_string(summary, key, NULL);
    snprintf(dst, cap, "%s", s ? s : hint ? hint : "");
}

static const char *base_name(const char *dir) {
    size_t l = strlen(dir);
    while (l > 1 && dir[l - 1] == '/') l--;
    const char *p = dir + l;
    while (p > dir && p[-1] != '/') p--;
    return p;
}

/* Appends text to the row's note, separated by "; ". */
static void add_note(report_row_t *row, const char *text) {
    if (!text || !*text) return;
    size_t l = strlen(row->note);
    snprintf(row->note + l, sizeof row->note - l, "%s%s", l ? "; " : "", text);
}

/* Fills the per-epoch series and the numbers that come from metrics.csv. */
static int row_metrics(report_row_t *row, const run_files_t *rf, err_t *e) {
    const csv_table_t *m = &rf->metrics;
    size_t n = rf->has_metrics ? m->nrows : 0;
    row->n_epochs = n;
    size_t bytes = (n ? n : 1) * sizeof(double);
    row->epoch = xmalloc(bytes, e);
    row->train_loss = xmalloc(bytes, e);
    row->val_top1 = xmalloc(bytes, e);
    row->wall_seconds = xmalloc(bytes, e);
    if (!row->epoch || !row->train_loss || !row->val_top1 || !row->wall_seconds) return -1;
    if (!n) return 0;
    const double *ep = csv_table_col(m, "epoch"), *tl = csv_table_col(m, "train_loss");
    const double *vt = csv_table_col(m, "val_top1"), *es = csv_table_col(m, "epoch_seconds");
    const double *pm = csv_table_col(m, "peak_memory_bytes");
    double wall = 0;
    for (size_t i = 0; i < n; i++) {
        row->epoch[i] = ep[i];
        row->train_loss[i] = tl[i];
        row->val_top1[i] = vt[i];
        if (isfinite(es[i])) wall += es[i];
        row->wall_seconds[i] = isfinite(es[i]) ? wall : NAN;
        if (!isnan(vt[i])) {
            row->final_val_top1 = vt[i];
            if (isnan(row->best_val_top1) || vt[i] > row->best_val_top1) row->best_val_top1 = vt[i];
        }
        if (!isnan(tl[i])) row->final_train_loss = tl[i];
        if (pm && isfinite(pm[i]) && (isnan(row->peak_memory_bytes) || pm[i] > row->peak_memory_bytes))
            row->peak_memory_bytes = pm[i];
    }
    row->seconds_per_epoch = stats_median(es, n);
    return 0;
}

/* The numbers that come from steps.csv: steady-state throughput and exposed comm. */
static void row_steps(report_row_t *row, const run_files_t *rf) {
    if (!rf->has_steps || rf->steps.nrows == 0) return;
    const csv_table_t *s = &rf->steps;
    size_t n = s->nrows;
    size_t warm = n >= 2 ? (n + 9) / 10 : 0;
    row->images_per_second = stats_median(csv_table_col(s, "images_per_second") + warm, n - warm);
    const double *st = csv_table_col(s, "step_seconds"), *cm = csv_table_col(s, "comm_exposed_seconds");
    double sum_step = 0, sum_comm = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(st[i]) || !isfinite(cm[i])) continue;
        sum_step += st[i];
        sum_comm += cm[i];
    }
    if (sum_step > 0) row->comm_exposed_pct = 100.0 * sum_comm / sum_step;
}

/* Fills NaN numbers from summary.json (the run's own final numbers). A run that took no
 * step ("steps": 0) has no training numbers, whatever placeholders its summary holds. */
static void row_summary_fallback(report_row_t *row, const json_t *sm) {
    if (!sm) return;
    bool trained = json_get_number(sm, "steps", 1) > 0;
    struct { double *dst; const char *key; double scale; bool training; } f[] = {
        {&row->images_per_second, "images_per_second", 1, true},
        {&row->seconds_per_epoch, "seconds_per_epoch", 1, true},
        {&row->comm_exposed_pct, "comm_exposed_fraction", 100, true},
        {&row->peak_memory_bytes, "peak_memory_bytes", 1, false},
        {&row->final_val_top1, "val_top1", 1, true}, {&row->best_val_top1, "best_val_top1", 1, true},
        {&row->final_train_loss, "train_loss", 1, true}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (isnan(*f[i].dst) && (trained || !f[i].training))
            *f[i].dst = json_get_number(sm, f[i].key, NAN) * f[i].scale;
}

/* Computes one row from one input. */
static int row_build(const report_input_t *in, report_row_t *row, err_t *e) {
    run_files_t rf;
    if (run_files_load(in->dir, in->lenient, &rf, e)) {
        run_files_free(&rf);
        return -1;
    }
    const json_t *sm = rf.summary;
    snprintf(row->dir, sizeof row->dir, "%s", in->dir);
    const char *label = in->label ? in->label : json_get_string(sm, "name", NULL);
    snprintf(row->name, sizeof row->name, "%s", label && *label ? label : base_name(in->dir));
    pick_str(row->mode, sizeof row->mode, sm, "mode", in->mode);
    pick_str(row->precision, sizeof row->precision, sm, "precision", in->precision);
    pick_str(row->device, sizeof row->device, sm, "device", in->device);
    row->world_size = (int)json_get_number(sm, "world_size", in->world_size);
    row->batch_size = (int)json_get_number(sm, "batch_size", in->batch_size);
    if (in->status) {
        snprintf(row->status, sizeof row->status, "%s", in->status);
        row->exit_code = in->exit_code;
    } else {
        pick_str(row->status, sizeof row->status, sm, "status", sm ? "unknown" : "incomplete");
        row->exit_code = (int)json_get_number(sm, "exit_code", -1);
    }
    /* a run that failed before its first step says why in summary.json ("error"); the
     * files it never wrote are not worth a note then */
    const char *error = json_get_string(sm, "error", NULL);
    bool failed_start = sm && !strcmp(json_get_string(sm, "status", ""), "failed") &&
                        json_get_number(sm, "steps", 0) <= 0;
    add_note(row, in->message ? in->message : error);
    if (!(failed_start && error)) add_note(row, rf.problem);
    if (json_get_number(sm, "config_changes", 0) > 0)
        add_note(row, "the configuration changed during the run (config_changes.jsonl)");
    double *nums[] = {&row->images_per_second, &row->seconds_per_epoch, &row->speedup,
                      &row->comm_exposed_pct, &row->peak_memory_bytes, &row->final_val_top1,
                      &row->best_val_top1, &row->final_train_loss};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) *nums[i] = NAN;
    int rc = row_metrics(row, &rf, e);
    if (rc == 0) {
        row_steps(row, &rf);
        row_summary_fallback(row, sm);
        row->env = rf.env;
        rf.env = NULL;
    }
    run_files_free(&rf);
    return rc;
}

int report_build(const report_input_t *in, int n, const char *title, report_t *r, err_t *e) {
    memset(r, 0, sizeof *r);
    snprintf(r->title, sizeof r->title, "%s", title ? title : "report");
    if (n <= 0) return err_set(e, ERR_INPUT, "report: no run directories given; usage: runner report RUN_DIR...");
    r->rows = xcalloc((size_t)n, sizeof *r->rows, e);
    if (!r->rows) return -1;
    for (int i = 0; i < n; i++) {
        if (row_build(&in[i], &r->rows[i], e)) {
            r->n = i + 1;
            return -1;
        }
        r->n = i + 1;
        /* Two runs of one experiment share a name: tell them apart by directory. */
        for (int j = 0; j < i; j++) {
            if (strcmp(r->rows[j].name, r->rows[i].name)) continue;
            char tmp[REPORT_STR];
            snprintf(tmp, sizeof tmp, "%.120s (%.120s)", r->rows[i].name, base_name(in[i].dir));
            memcpy(r->rows[i].name, tmp, sizeof tmp);
            break;
        }
    }
    double base = r->rows[0].images_per_second;
    for (int i = 0; i < n; i++)
        r->rows[i].speedup = (base > 0) ? r->rows[i].images_per_second / base : NAN;
    return 0;
}

void report_free(report_t *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        report_row_t *row = &r->rows[i];
        free(row->epoch);
        free(row->train_loss);
        free(row->val_top1);
        free(row->wall_seconds);
        json_free(row->env);
    }
    free(r->rows);
    memset(r, 0, sizeof *r);
}

/* ---- formatting shared with report_html.c ---- */

void report_fmt(char *buf, size_t cap, report_col_t col, const report_row_t *row) {
    double v;
    buf[0] = '\0';
    switch (col) {
    case RC_IMAGES: v = row->images_per_second; if (!isnan(v)) snprintf(buf, cap, "%.1f", v); break;
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
    case RC_MODE: snprintf(buf, cap, "%s", row->mode); break;
    case RC_PRECISION: snprintf(buf, cap, "%s", row->precision); break;
    case RC_DEVICE: snprintf(buf, cap, "%s", row->device); break;
    case RC_COUNT: break;
    }
}

const char *const report_col_titles[RC_COUNT] = {
    "run", "mode", "world", "precision", "batch", "device", "images/s", "s/epoch", "speed-up",
    "comm exposed", "peak memory", "val top-1 (final)", "val top-1 (best)", "train loss", "status"};

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

int report_write_csv(const report_t *r, FILE *f) {
    fputs("name,mode,world_size,precision,batch_size,device,images_per_second,seconds_per_epoch,"
          "speedup,comm_exposed_pct,peak_memory_bytes,final_val_top1,best_val_top1,final_train_loss,"
          "status,exit_code,run_dir,note\n", f);
    for (int i = 0; i < r->n; i++) {
        const report_row_t *w = &r->rows[i];
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
        for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
            csv_num(f, nums[k]);
            fputc(',', f);
        }
        csv_field(f, w->status); fputc(',', f);
        if (w->exit_code >= 0) fprintf(f, "%d", w->exit_code);
        fputc(',', f);
        csv_field(f, w->dir); fputc(',', f);
        csv_field(f, w->note);
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

int report_write_md(const report_t *r, FILE *f) {
    fprintf(f, "# %s\n\n|", r->title);
    for (int c = 0; c < RC_COUNT; c++) fprintf(f, " %s |", report_col_titles[c]);
    fputs("\n|", f);
    for (int c = 0; c < RC_COUNT; c++) fputs(c == RC_NAME || c == RC_MODE || c == RC_PRECISION ||
                                             c == RC_DEVICE || c == RC_STATUS ? "---|" : "---:|", f);
    fputc('\n', f);
    char buf[512];
    for (int i = 0; i < r->n; i++) {
        fputc('|', f);
        for (int c = 0; c < RC_COUNT; c++) {
            report_fmt(buf, sizeof buf, (report_col_t)c, &r->rows[i]);
            fputc(' ', f);
            md_cell(f, buf);
            fputs(" |", f);
        }
        fputc('\n', f);
    }
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
    fputs("\nimages/s: median over steps.csv after the first 10% of rows (warm-up); speed-up: "
          "relative to the first row; comm exposed: share of step time spent waiting on "
          "communication.\n\n", f);
    for (int p = 0; p < RP_COUNT; p++)
        fprintf(f, "![%s](plots/%s.svg)\n", report_plot_titles[p], report_plot_files[p]);
    return ferror(f) ? -1 : 0;
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

/* One expanded input of report_runs, with storage for the strings it points to. */
typedef struct expanded {
    char dir[REPORT_PATH + REPORT_STR];
    char label[REPORT_STR];
    char message[1024];
} expanded_t;

/* True when dir is a run directory that lacks summary.json or metrics.csv: a run that
 * failed before its first step or was killed early. It is listed (marked) instead of
 * failing the whole report; malformed files of a complete run stay errors. */
static bool unfinished_run(const char *dir) {
    static const char *const names[] = {"summary.json", "metrics.csv", "resolved.yaml", "logs", "checkpoints"};
    char p[REPORT_PATH + 32];
    struct stat st;
    bool has[5];
    for (size_t i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        has[i] = stat(p, &st) == 0;
    }
    return !(has[0] && has[1]) && (has[0] || has[2] || has[3] || has[4]);
}

/* True when dir is a comparison directory (compare.json and no summary.json). */
static bool is_comparison(const char *dir) {
    char p[REPORT_PATH + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/summary.json", dir);
    if (stat(p, &st) == 0) return false;
    snprintf(p, sizeof p, "%s/compare.json", dir);
    return stat(p, &st) == 0;
}

/* Adds the members of comparison dir (state s) to in/ex from index *k on. */
static void add_members(const char *dir, const compare_state_t *s, report_input_t *in, expanded_t *ex,
                        int *k) {
    for (int j = 0; j < s->n; j++, (*k)++) {
        const compare_member_t *m = &s->members[j];
        snprintf(ex[*k].dir, sizeof ex[*k].dir, "%s/%s", dir, m->name);
        snprintf(ex[*k].label, sizeof ex[*k].label, "%s", m->name);
        snprintf(ex[*k].message, sizeof ex[*k].message, "%s", m->message);
        in[*k].dir = ex[*k].dir;
        in[*k].label = ex[*k].label;
        in[*k].lenient = true;
        in[*k].exit_code = m->exit_code;
        if (m->status != MEMBER_COMPLETED) {
            in[*k].status = compare_member_status_name(m->status);
            in[*k].message = ex[*k].message;
        }
    }
}

int report_runs(const char *const *dirs, int n, const char *out_dir, FILE *out, err_t *e) {
    if (n <= 0) return err_set(e, ERR_INPUT, "report: no run directories given; usage: runner report "
                               "RUN_DIR... [--output DIR]");
    compare_state_t *s = xmalloc(sizeof *s, e);
    if (!s) return -1;
    /* First pass: how many rows (a comparison directory stands for its members). */
    int total = 0, rc = 0;
    char title[REPORT_STR] = "report";
    for (int i = 0; i < n && rc == 0; i++) {
        if (!is_comparison(dirs[i])) { total++; continue; }
        rc = compare_state_load(dirs[i], s, e);
        total += s->n;
        if (n == 1) snprintf(title, sizeof title, "%s", s->matrix);
    }
    report_input_t *in = rc ? NULL : xcalloc((size_t)(total ? total : 1), sizeof *in, e);
    expanded_t *ex = in ? xcalloc((size_t)(total ? total : 1), sizeof *ex, e) : NULL;
    if (!ex) rc = -1;
    int k = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!is_comparison(dirs[i])) {
            in[k].dir = dirs[i];
            in[k].lenient = unfinished_run(dirs[i]);
            in[k++].exit_code = -1;
            continue;
        }
        rc = compare_state_load(dirs[i], s, e);
        if (rc == 0 && k + s->n > total) rc = err_set(e, ERR_INPUT, "%s/compare.json changed while reading it", dirs[i]);
        if (rc == 0) add_members(dirs[i], s, in, ex, &k);
    }
    report_t r;
    memset(&r, 0, sizeof r);
    if (rc == 0 && k == 0) rc = err_set(e, ERR_INPUT, "%s: the comparison has no members", dirs[0]);
    if (rc == 0) rc = report_build(in, k, title, &r, e);
    const char *d = out_dir ? out_dir : "report";
    if (rc == 0) rc = report_write(&r, d, e);
    if (rc == 0 && out) {
        report_write_md(&r, out);
        fprintf(out, "\nwrote %s/report.html, %s/comparison.csv, %s/comparison.md\n", d, d, d);
    }
    report_free(&r);
    free(in);
    free(ex);
    free(s);
    return rc;
}
