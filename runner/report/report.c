/* report.c: computing report rows from run directories, grouping them into members with
 * their statistics and the verdict, and the `runner report` verb (report.h). The CSV and
 * Markdown renderings and the files are in report_table.c, the HTML page in
 * report_html.c, the charts in plot.c, the statistics' wording in verdict.c. */
#include "runner/report/report.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/report/compare.h"
#include "runner/report/report_impl.h"
#include "runner/report/runread.h"
#include "runner/report/steady.h"

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

/* Fills the per-epoch series and the numbers that come from metrics.csv; *epoch_s gets
 * the median epoch_seconds (the s/epoch of a run directory without timing.csv). */
static int row_metrics(report_row_t *row, const run_files_t *rf, double *epoch_s, err_t *e) {
    const csv_table_t *m = &rf->metrics;
    size_t n = rf->has_metrics ? m->nrows : 0;
    row->n_epochs = n;
    size_t bytes = (n ? n : 1) * sizeof(double);
    row->epoch = xmalloc(bytes, e);
    row->train_loss = xmalloc(bytes, e);
    row->val_top1 = xmalloc(bytes, e);
    row->wall_seconds = xmalloc(bytes, e);
    *epoch_s = NAN;
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
    *epoch_s = stats_median(es, n);
    return 0;
}

/* Exposed communication from steps.csv (its rows are a sample every print_every steps). */
static void row_comm(report_row_t *row, const run_files_t *rf) {
    if (!rf->has_steps || rf->steps.nrows == 0) return;
    const double *st = csv_table_col(&rf->steps, "step_seconds");
    const double *cm = csv_table_col(&rf->steps, "comm_exposed_seconds");
    double sum_step = 0, sum_comm = 0;
    for (size_t i = 0; i < rf->steps.nrows; i++) {
        if (!isfinite(st[i]) || !isfinite(cm[i])) continue;
        sum_step += st[i];
        sum_comm += cm[i];
    }
    if (sum_step > 0) row->comm_exposed_pct = 100.0 * sum_comm / sum_step;
}

/* Images one epoch trains: summary.json, else plan.json (samples per rank x ranks). */
static double epoch_images(const run_files_t *rf) {
    double v = json_get_number(rf->summary, "images_per_epoch", NAN);
    if (isfinite(v) && v > 0) return v;
    double spr = json_get_number(rf->plan, "samples_per_rank", NAN);
    bool ddp = !strcmp(json_get_string(rf->plan, "mode", ""), "ddp");
    double ranks = ddp ? json_get_number(rf->plan, "world_size", NAN) : 1;
    return spr > 0 && ranks > 0 ? spr * ranks : NAN;
}

/* Steady-state images/s from timing.csv (every read-back window). Returns false when
 * the file has no window. */
static bool throughput_from_timing(report_row_t *row, const run_files_t *rf) {
    const csv_table_t *t = &rf->timing;
    if (!rf->has_timing || t->nrows == 0) return false;
    steady_window_t *w = malloc(t->nrows * sizeof *w);
    if (!w) return false;
    const double *ss = csv_table_col(t, "since_start"), *st = csv_table_col(t, "steps");
    const double *im = csv_table_col(t, "images"), *sc = csv_table_col(t, "seconds");
    for (size_t i = 0; i < t->nrows; i++)
        w[i] = (steady_window_t){.since_start = isfinite(ss[i]) ? (int64_t)ss[i] : 0,
                                 .steps = isfinite(st[i]) ? (int64_t)st[i] : 0, .images = im[i], .seconds = sc[i]};
    steady_measure_t m;
    steady_measure(w, t->nrows, &m);
    free(w);
    snprintf(row->ips_from, sizeof row->ips_from, "timing.csv");
    row->steady_steps = m.sums.steady_steps;
    row->warmup_steps = m.sums.warmup_steps;
    row->steady_seconds = m.sums.steady_seconds;
    row->images_per_second = m.rate;
    row->ips_se = m.se;
    row->ips_blocks = m.blocks;
    if (isnan(m.rate) && m.sums.warmup_seconds > 0)
        row->images_per_second = m.sums.warmup_images / m.sums.warmup_seconds;
    return true;
}

/* images/s, s/epoch and how they were measured: timing.csv; else the steady-state numbers
 * of summary.json (a run with logging.csv off); else, for a run directory from an older
 * runner, the median of steps.csv rows after the first 10% (or summary.json's number)
 * and the median epoch time, marked as such. */
static void row_throughput(report_row_t *row, const run_files_t *rf, double epoch_s) {
    const json_t *sm = rf->summary;
    bool trained = json_get_number(sm, "steps", 1) > 0;
    row->images_per_epoch = epoch_images(rf);
    if (!throughput_from_timing(row, rf) && trained && json_get(sm, "steady_steps")) {
        snprintf(row->ips_from, sizeof row->ips_from, "summary.json");
        row->steady_steps = (int64_t)json_get_number(sm, "steady_steps", 0);
        row->warmup_steps = (int64_t)json_get_number(sm, "warmup_steps", -1);
        row->steady_seconds = json_get_number(sm, "steady_seconds", NAN);
        row->images_per_second = json_get_number(sm, "images_per_second", NAN);
    }
    if (row->ips_from[0]) {
        if (row->steady_steps == 0 && isfinite(row->images_per_second))
            add_note(row, "no steady-state step: images/s is over all its steps, warm-up included");
        row->seconds_per_epoch = row->images_per_epoch / row->images_per_second;
        return;
    }
    /* an older run directory */
    if (rf->has_steps && rf->steps.nrows > 0) {
        size_t n = rf->steps.nrows, warm = n >= 2 ? (n + 9) / 10 : 0;
        row->images_per_second = stats_median(csv_table_col(&rf->steps, "images_per_second") + warm, n - warm);
        snprintf(row->ips_from, sizeof row->ips_from, "steps.csv");
    } else if (trained) {
        row->images_per_second = json_get_number(sm, "images_per_second", NAN);
        if (isfinite(row->images_per_second)) snprintf(row->ips_from, sizeof row->ips_from, "summary.json");
    }
    row->seconds_per_epoch = isfinite(epoch_s) ? epoch_s : trained ? json_get_number(sm, "seconds_per_epoch", NAN) : NAN;
    if (isfinite(row->images_per_second))
        add_note(row, !strcmp(row->ips_from, "steps.csv")
                 ? "no timing.csv (a run from an older runner): images/s is the median of its steps.csv rows "
                   "and s/epoch its median epoch time, not rates from every step"
                 : "no timing.csv (a run from an older runner): images/s is its summary.json number and "
                   "s/epoch its median epoch time, not rates from every step");
}

/* Fills NaN numbers from summary.json (the run's own final numbers). A run that took no
 * step ("steps": 0) has no training numbers, whatever placeholders its summary holds. */
static void row_summary_fallback(report_row_t *row, const json_t *sm) {
    if (!sm) return;
    bool trained = json_get_number(sm, "steps", 1) > 0;
    struct { double *dst; const char *key; double scale; bool training; } f[] = {
        {&row->comm_exposed_pct, "comm_exposed_fraction", 100, true},
        {&row->peak_memory_bytes, "peak_memory_bytes", 1, false},
        {&row->final_val_top1, "val_top1", 1, true}, {&row->best_val_top1, "best_val_top1", 1, true},
        {&row->final_train_loss, "train_loss", 1, true}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (isnan(*f[i].dst) && (trained || !f[i].training))
            *f[i].dst = json_get_number(sm, f[i].key, NAN) * f[i].scale;
}

/* Computes one row from one input; rf stays loaded for the grouping (its config). */
static int row_build(const report_input_t *in, report_row_t *row, run_files_t *rf, err_t *e) {
    if (run_files_load(in->dir, in->lenient, rf, e)) return -1;
    const json_t *sm = rf->summary;
    snprintf(row->dir, sizeof row->dir, "%s", in->dir);
    const char *label = in->label ? in->label : json_get_string(sm, "name", NULL);
    snprintf(row->name, sizeof row->name, "%s", label && *label ? label : base_name(in->dir));
    snprintf(row->seed, sizeof row->seed, "%s", in->seed ? in->seed : rf->seed);
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
    if (!(failed_start && error)) add_note(row, rf->problem);
    if (json_get_number(sm, "config_changes", 0) > 0)
        add_note(row, "the configuration changed during the run (config_changes.jsonl)");
    double *nums[] = {&row->images_per_second, &row->seconds_per_epoch, &row->speedup,
                      &row->comm_exposed_pct, &row->peak_memory_bytes, &row->final_val_top1,
                      &row->best_val_top1, &row->final_train_loss, &row->steady_seconds,
                      &row->images_per_epoch, &row->ips_se};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) *nums[i] = NAN;
    row->steady_steps = row->warmup_steps = -1;
    double epoch_s;
    int rc = row_metrics(row, rf, &epoch_s, e);
    if (rc == 0) {
        row_throughput(row, rf, epoch_s);
        row_comm(row, rf);
        row_summary_fallback(row, sm);
        row->env = rf->env;
        rf->env = NULL;
    }
    return rc;
}

/* ---- members ---- */

/* The member key of row i: the caller's, else its configuration without the seed, else
 * (no resolved.yaml) its own directory. */
static const char *group_key(const report_input_t *in, const run_files_t *rf) {
    return in->group_key ? in->group_key : rf->config ? rf->config : in->dir;
}

/* Puts every row into a member, in order of first appearance, and names the members
 * (a repeated name gets " (2)", " (3)", ...). */
static int make_groups(report_t *r, const report_input_t *in, const run_files_t *rf, err_t *e) {
    r->groups = xcalloc((size_t)r->n, sizeof *r->groups, e);
    if (!r->groups) return -1;
    for (int i = 0; i < r->n; i++) {
        const char *key = group_key(&in[i], &rf[i]);
        int g = 0;
        while (g < r->n_groups && strcmp(key, group_key(&in[r->groups[g].rows[0]], &rf[r->groups[g].rows[0]]))) g++;
        report_group_t *G = &r->groups[g];
        if (g == r->n_groups) {
            r->n_groups++;
            if (!(G->rows = xcalloc((size_t)r->n, sizeof *G->rows, e))) return -1;
            const char *label = in[i].group_label ? in[i].group_label : json_get_string(rf[i].summary, "name", NULL);
            snprintf(G->name, sizeof G->name, "%s", label && *label ? label : r->rows[i].name);
            size_t l = strlen(G->name);
            int same = 0;
            for (int h = 0; h < g; h++)
                same += !strncmp(r->groups[h].name, G->name, l) &&
                        (!r->groups[h].name[l] || !strncmp(r->groups[h].name + l, " (", 2));
            if (same) {
                char tmp[REPORT_STR];
                snprintf(tmp, sizeof tmp, "%.200s (%d)", G->name, same + 1);
                memcpy(G->name, tmp, sizeof tmp);
            }
        }
        G->rows[G->n_rows++] = i;
        r->rows[i].group = g;
    }
    return 0;
}

/* Adds v (when a number) to the running mean *mean of *n values (NaN while none). */
static void seed_mean(double *mean, int *n, double v) {
    if (!isfinite(v)) return;
    (*n)++;
    *mean = *n == 1 ? v : *mean + (v - *mean) / *n;
}

/* A member's statistics over its completed runs: throughput over every run (each is a
 * measurement of the machine), accuracy over its seeds, a seed run more than once
 * counting once with the mean of its runs (a repeat of one seed is no seed noise; on the
 * CPU it is the same numbers again). A run of unknown seed counts as a seed of its own. */
static void group_stats(report_t *r, report_group_t *G) {
    double ips[REPORT_MAX_RUNS], fin[REPORT_MAX_RUNS], best[REPORT_MAX_RUNS];
    int k = 0, one = -1, n_seeds = 0, fin_n[REPORT_MAX_RUNS], best_n[REPORT_MAX_RUNS];
    const char *seed_of[REPORT_MAX_RUNS];
    verdict_member_t *s = &G->stats;
    s->name = G->name;
    s->runs = G->n_rows;
    s->min_steady_steps = INT64_MAX;
    for (int j = 0; j < G->n_rows && k < REPORT_MAX_RUNS; j++) {
        const report_row_t *w = &r->rows[G->rows[j]];
        if (strcmp(w->status, "completed")) continue;
        G->completed++;
        ips[k] = w->images_per_second;
        if (isfinite(ips[k])) {
            one = G->rows[j];
            if (w->steady_steps < s->min_steady_steps) s->min_steady_steps = w->steady_steps;
        }
        k++;
        int q = 0;
        while (q < n_seeds && !(w->seed[0] && !strcmp(seed_of[q], w->seed))) q++;
        if (q == n_seeds) {
            seed_of[n_seeds] = w->seed;
            fin_n[n_seeds] = best_n[n_seeds] = 0;
            fin[n_seeds] = best[n_seeds] = NAN;
            n_seeds++;
        }
        seed_mean(&fin[q], &fin_n[q], w->final_val_top1);
        seed_mean(&best[q], &best_n[q], w->best_val_top1);
    }
    stats_summarize(ips, k, &s->ips);
    stats_summarize(fin, n_seeds, &s->final_top1);
    stats_summarize(best, n_seeds, &s->best_top1);
    if (s->ips.n == 0) s->min_steady_steps = 0;
    s->ips_se = s->ips_df = NAN;
    if (s->ips.n >= 2) {
        s->ips_se = s->ips.std / sqrt(s->ips.n);
        s->ips_df = s->ips.n - 1;
    } else if (s->ips.n == 1 && r->rows[one].ips_blocks >= 2) {
        s->ips_se = r->rows[one].ips_se;
        s->ips_df = r->rows[one].ips_blocks - 1;
    }
    /* the same measurement as images/s; an older run's own epoch times otherwise */
    double epoch_images = NAN, sec[REPORT_MAX_RUNS];
    int m = 0;
    for (int j = 0; j < G->n_rows && m < REPORT_MAX_RUNS; j++) {
        const report_row_t *w = &r->rows[G->rows[j]];
        if (isnan(epoch_images)) epoch_images = w->images_per_epoch;
        if (!strcmp(w->status, "completed")) sec[m++] = w->seconds_per_epoch;
    }
    stat_summary_t measured;
    stats_summarize(sec, m, &measured);
    G->seconds_per_epoch = s->min_steady_steps >= 0 ? epoch_images / s->ips.mean : measured.mean;
}

int report_build(const report_input_t *in, int n, const char *title, report_t *r, err_t *e) {
    memset(r, 0, sizeof *r);
    snprintf(r->title, sizeof r->title, "%s", title ? title : "report");
    if (n <= 0) return err_set(e, ERR_INPUT, "report: no run directories given; usage: runner report RUN_DIR...");
    if (n > REPORT_MAX_RUNS) return err_set(e, ERR_INPUT, "report: %d runs; at most %d", n, (int)REPORT_MAX_RUNS);
    r->rows = xcalloc((size_t)n, sizeof *r->rows, e);
    run_files_t *rf = xcalloc((size_t)n, sizeof *rf, e);
    int rc = r->rows && rf ? 0 : -1;
    for (int i = 0; i < n && rc == 0; i++) {
        r->n = i + 1;
        rc = row_build(&in[i], &r->rows[i], &rf[i], e);
        /* Two runs of one experiment share a name: tell them apart by directory. */
        for (int j = 0; rc == 0 && j < i; j++) {
            if (strcmp(r->rows[j].name, r->rows[i].name)) continue;
            char tmp[REPORT_STR];
            snprintf(tmp, sizeof tmp, "%.120s (%.120s)", r->rows[i].name, base_name(in[i].dir));
            memcpy(r->rows[i].name, tmp, sizeof tmp);
            break;
        }
    }
    if (rc == 0) rc = make_groups(r, in, rf, e);
    for (int i = 0; rf && i < r->n; i++) run_files_free(&rf[i]);
    free(rf);
    if (rc) return -1;
    verdict_member_t *vm = xcalloc((size_t)r->n_groups, sizeof *vm, e);
    if (!vm) return -1;
    for (int g = 0; g < r->n_groups; g++) {
        group_stats(r, &r->groups[g]);
        vm[g] = r->groups[g].stats;
    }
    verdict_build(vm, r->n_groups, &r->verdict);
    for (int g = 0; g < r->n_groups; g++) {
        r->groups[g].stats = vm[g];
        r->groups[g].stats.name = r->groups[g].name;
    }
    free(vm);
    double base = r->groups[0].stats.ips.mean;
    for (int i = 0; i < n; i++) r->rows[i].speedup = base > 0 ? r->rows[i].images_per_second / base : NAN;
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
    for (int g = 0; g < r->n_groups; g++) free(r->groups[g].rows);
    free(r->groups);
    free(r->rows);
    memset(r, 0, sizeof *r);
}

/* ---- the verb ---- */

/* One expanded input of report_runs, with storage for the strings it points to. */
typedef struct expanded {
    char dir[REPORT_PATH + REPORT_STR];
    char label[REPORT_STR];
    char message[1024];
    char group_key[REPORT_PATH + REPORT_STR];
    char group_label[REPORT_STR];
    char seed[32];
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

/* Adds the members of comparison dir (state s) to in/ex from index *k on: each run is
 * grouped with the other repeats of its matrix entry. */
static void add_members(const char *dir, const compare_state_t *s, report_input_t *in, expanded_t *ex,
                        int *k) {
    for (int j = 0; j < s->n; j++, (*k)++) {
        const compare_member_t *m = &s->members[j];
        expanded_t *x = &ex[*k];
        snprintf(x->dir, sizeof x->dir, "%s/%s", dir, m->name);
        snprintf(x->label, sizeof x->label, "%s", m->name);
        snprintf(x->message, sizeof x->message, "%s", m->message);
        snprintf(x->group_key, sizeof x->group_key, "%s\n%s", dir, m->entry);
        snprintf(x->group_label, sizeof x->group_label, "%s", m->entry);
        in[*k].dir = x->dir;
        in[*k].label = x->label;
        in[*k].group_key = x->group_key;
        in[*k].group_label = x->group_label;
        in[*k].lenient = true;
        in[*k].exit_code = m->exit_code;
        if (m->has_seed) {
            snprintf(x->seed, sizeof x->seed, "%llu", (unsigned long long)m->seed);
            in[*k].seed = x->seed;
        }
        if (m->status != MEMBER_COMPLETED) {
            in[*k].status = compare_member_status_name(m->status);
            in[*k].message = x->message;
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
    if (rc == 0 && total > REPORT_MAX_RUNS)
        rc = err_set(e, ERR_INPUT, "report: %d runs; at most %d in one report", total, (int)REPORT_MAX_RUNS);
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
