/* report_html.c: the self-contained report.html (report.h): the verdict on top, the
 * members table and throughput chart, the runs table, the training-curve charts as inline
 * SVG, and each run's environment in a <details> section. Styles are inline; there are
 * no scripts and no external resources, so the page reads the same offline. The numbers
 * come from report.c, the verdict's words from verdict.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/report/plot.h"
#include "runner/report/report_impl.h"

static const char *const page_css =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}"
    "h1{font-size:24px;margin-bottom:4px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}"
    ".sub{color:#555;margin-top:0}"
    ".verdict{margin:16px 0;max-width:1100px}"
    ".verdict p{font-size:21px;line-height:1.4;margin:0 0 10px 0;padding:12px 16px;border-left:8px solid #999;"
    "background:#f4f4f4;border-radius:4px}"
    ".verdict p.good{border-color:#2e7d32;background:#e8f5e9}.verdict p.warn{border-color:#e6a100;background:#fff6da}"
    ".verdict p.alert{border-color:#c62828;background:#fdecea}.verdict p.plain{border-color:#607d8b;background:#eef2f4}"
    "p.method{color:#555;font-size:13px;max-width:1100px}"
    "table{border-collapse:collapse;font-size:13px}"
    "th,td{border:1px solid #ccc;padding:4px 8px;vertical-align:top}"
    "th{background:#f2f2f2;text-align:left}td.name,td.status{white-space:nowrap}td.num{text-align:right;font-variant-numeric:tabular-nums}"
    "table.members{font-size:15px}table.members td{padding:6px 10px}tr.best td{background:#e8f5e9;font-weight:bold}"
    "tr.failed td{background:#fde2e2}tr.partial td{background:#fff4d6}"
    ".swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}"
    ".charts{display:flex;flex-wrap:wrap;gap:16px;margin-top:12px}.charts svg{border:1px solid #ddd}"
    "details{margin:6px 0}summary{cursor:pointer;font-weight:bold}"
    "details table{margin:6px 0 6px 18px}.muted{color:#777;font-size:12px}"
    "code{background:#f4f4f4;padding:1px 4px}";

/* Writes a JSON value as readable text: scalars plainly, arrays comma-separated,
 * objects as "key: value" pairs. */
static void json_text(FILE *f, const json_t *v, int depth) {
    char num[64];
    switch (v->type) {
    case JSON_NULL: fputs("null", f); break;
    case JSON_BOOL: fputs(v->boolean ? "true" : "false", f); break;
    case JSON_NUMBER:
        snprintf(num, sizeof num, "%.15g", v->number);
        fputs(num, f);
        break;
    case JSON_STRING: plot_escape(f, v->string); break;
    case JSON_ARRAY:
        if (!v->count) fputs("(none)", f);
        for (size_t i = 0; i < v->count; i++) {
            if (i) fputs(depth ? ", " : "<br>", f);
            json_text(f, v->items[i], depth + 1);
        }
        break;
    case JSON_OBJECT:
        if (depth) fputc('{', f);
        for (size_t i = 0; i < v->count; i++) {
            if (i) fputs(", ", f);
            plot_escape(f, v->keys[i]);
            fputs(": ", f);
            json_text(f, v->items[i], depth + 1);
        }
        if (depth) fputc('}', f);
        break;
    }
}

/* The class a table row gets from its status. */
static const char *row_class(const report_row_t *row) {
    if (!strcmp(row->status, "completed")) return "";
    if (!strcmp(row->status, "failed")) return " class=\"failed\"";
    return " class=\"partial\"";
}

static void html_table(const report_t *r, FILE *f) {
    fputs("<table>\n<tr>", f);
    for (int c = 0; c < RC_COUNT; c++) {
        fputs("<th>", f);
        plot_escape(f, report_col_titles[c]);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    char buf[512];
    for (int i = 0; i < r->n; i++) {
        const report_row_t *row = &r->rows[i];
        fprintf(f, "<tr%s>", row_class(row));
        for (int c = 0; c < RC_COUNT; c++) {
            report_fmt(buf, sizeof buf, (report_col_t)c, row);
            bool num = report_numeric_col((report_col_t)c);
            fputs(num ? "<td class=\"num\">" : c == RC_NAME ? "<td class=\"name\">"
                  : c == RC_STATUS ? "<td class=\"status\">" : "<td>", f);
            if (c == RC_NAME) fprintf(f, "<span class=\"swatch\" style=\"background:%s\"></span>", plot_color(row->group));
            plot_escape(f, buf);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
    bool notes = false;
    for (int i = 0; i < r->n; i++) {
        if (!r->rows[i].note[0]) continue;
        if (!notes) fputs("<h3>Notes</h3>\n<ul>\n", f);
        notes = true;
        fputs("<li><b>", f);
        plot_escape(f, r->rows[i].name);
        fputs("</b>: ", f);
        plot_escape(f, r->rows[i].note);
        fputs("</li>\n", f);
    }
    if (notes) fputs("</ul>\n", f);
    fputs("<p class=\"muted\">images/s: steady-state rate of the run (the images of every step after the "
          "first 10 of each epoch over their time; evaluation excluded). steady steps: the steps it counts. "
          "s/epoch: the images of one epoch at that rate. speed-up: images/s relative to the first member's "
          "mean. comm exposed: communication time not hidden behind compute, as a share of step time.</p>\n", f);
}

/* The members table: mean, spread and range over seeds; a clear fastest highlighted. */
static void html_members(const report_t *r, FILE *f) {
    fputs("<table class=\"members\">\n<tr>", f);
    for (int c = 0; c < MC_COUNT; c++) {
        fputs("<th>", f);
        plot_escape(f, report_mcol_titles[c]);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    char buf[512];
    for (int g = 0; g < r->n_groups; g++) {
        const report_group_t *G = &r->groups[g];
        bool best = r->verdict.speed_kind == SPEED_CLEAR && r->verdict.fastest == g;
        fputs(best ? "<tr class=\"best\">" : G->completed == 0 ? "<tr class=\"failed\">" : "<tr>", f);
        for (int c = 0; c < MC_COUNT; c++) {
            report_fmt_member(buf, sizeof buf, (report_mcol_t)c, G);
            fputs(c == MC_NAME ? "<td class=\"name\">" : "<td class=\"num\">", f);
            if (c == MC_NAME) fprintf(f, "<span class=\"swatch\" style=\"background:%s\"></span>", plot_color(g));
            plot_escape(f, buf);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n<p class=\"muted\">&plusmn; is the standard deviation over a member's seeds; ranges are "
          "min&ndash;max; speed-up is the member's mean images/s over the first member's, with its 95% "
          "interval.</p>\n", f);
}

/* One verdict sentence: its lead ("Fastest:") in bold, the box coloured by what it says. */
static void html_verdict_line(FILE *f, const char *cls, const char *text) {
    fprintf(f, "<p class=\"%s\">", cls);
    const char *colon = strchr(text, ':');
    if (colon && colon - text < 80) {
        fputs("<b>", f);
        char lead[96];
        snprintf(lead, sizeof lead, "%.*s", (int)(colon - text + 1), text);
        plot_escape(f, lead);
        fputs("</b>", f);
        text = colon + 1;
    }
    plot_escape(f, text);
    fputs("</p>\n", f);
}

static void html_verdict(const report_t *r, FILE *f) {
    const verdict_t *v = &r->verdict;
    const char *speed = v->speed_kind == SPEED_CLEAR ? "good" : v->speed_kind == SPEED_TIE || v->speed_kind == SPEED_ONE
                        ? "plain" : "warn";
    const char *acc = v->accuracy_kind == ACC_SAME ? "good" : v->accuracy_kind == ACC_DIFFERS ? "alert"
                      : v->accuracy_kind == ACC_UNKNOWN ? "warn" : "plain";
    fputs("<div class=\"verdict\">\n", f);
    html_verdict_line(f, speed, v->speed);
    html_verdict_line(f, acc, v->accuracy);
    fputs("</div>\n<p class=\"method\">", f);
    plot_escape(f, v->method);
    fputs("</p>\n", f);
}

/* One line chart of every run: y against epoch or against cumulative wall time. */
static int html_curve(const report_t *r, FILE *f, bool wall, bool loss, bool png) {
    plot_series_t *s = calloc((size_t)r->n, sizeof *s);
    if (!s) return -1;
    for (int i = 0; i < r->n; i++) {
        const report_row_t *row = &r->rows[i];
        s[i].label = row->name;
        s[i].color = row->group;
        s[i].x = wall ? row->wall_seconds : row->epoch;
        s[i].y = loss ? row->train_loss : row->val_top1;
        s[i].n = (int)row->n_epochs;
    }
    plot_opts_t o = {0};
    o.title = report_plot_titles[loss ? (wall ? RP_LOSS_WALL : RP_LOSS_EPOCH) : (wall ? RP_TOP1_WALL : RP_TOP1_EPOCH)];
    o.xlabel = wall ? "wall time (s, sum of epoch times)" : "epoch";
    o.ylabel = loss ? "train loss" : "val top-1 (%)";
    o.y_scale = loss ? 1.0 : 100.0;
    o.width = 540;
    o.x_integer = !wall;
    o.x_from_zero = wall;
    int rc = png ? plot_line_png(f, &o, s, r->n) : plot_line_svg(f, &o, s, r->n);
    free(s);
    return rc;
}

/* The members' mean images/s as bars, the range over their seeds as whiskers. */
static int html_throughput(const report_t *r, FILE *f, bool png) {
    int n = r->n_groups;
    const char **labels = calloc((size_t)n, sizeof *labels);
    double *v = calloc((size_t)n * 3, sizeof *v);
    int rc = -1;
    if (labels && v) {
        for (int g = 0; g < n; g++) {
            const stat_summary_t *s = &r->groups[g].stats.ips;
            labels[g] = r->groups[g].name;
            v[g] = s->mean;
            v[n + g] = s->n >= 2 ? s->min : NAN;
            v[2 * n + g] = s->n >= 2 ? s->max : NAN;
        }
        plot_opts_t o = {0};
        o.title = report_plot_titles[RP_THROUGHPUT];
        o.xlabel = "images per second (mean over seeds; whiskers: min to max)";
        o.width = 760;
        o.lo = v + n;
        o.hi = v + 2 * n;
        rc = png ? plot_bar_png(f, &o, labels, v, n) : plot_bar_svg(f, &o, labels, v, n);
    }
    free(labels);
    free(v);
    return rc;
}

/* Each run's directory, note and env.json in a collapsed section. */
static void html_env(const report_t *r, FILE *f) {
    for (int i = 0; i < r->n; i++) {
        const report_row_t *row = &r->rows[i];
        fputs("<details>\n<summary>", f);
        plot_escape(f, row->name);
        fputs(" <span class=\"muted\">", f);
        plot_escape(f, row->status);
        fputs(" &middot; ", f);
        plot_escape(f, json_get_string(row->env, "host", "host not recorded"));
        fputs("</span></summary>\n<table>\n<tr><th>run directory</th><td><code>", f);
        plot_escape(f, row->dir);
        fputs("</code></td></tr>\n", f);
        if (row->note[0]) {
            fputs("<tr><th>note</th><td>", f);
            plot_escape(f, row->note);
            fputs("</td></tr>\n", f);
        }
        if (!row->env) {
            fputs("<tr><th>env.json</th><td>not recorded</td></tr>\n", f);
        } else {
            for (size_t k = 0; k < row->env->count; k++) {
                fputs("<tr><th>", f);
                plot_escape(f, row->env->keys[k]);
                fputs("</th><td>", f);
                json_text(f, row->env->items[k], 0);
                fputs("</td></tr>\n", f);
            }
        }
        fputs("</table>\n</details>\n", f);
    }
}

const char *const report_plot_files[RP_COUNT] = {
    "train_loss_vs_epoch", "val_top1_vs_epoch", "train_loss_vs_wall_time", "val_top1_vs_wall_time",
    "throughput"};
const char *const report_plot_titles[RP_COUNT] = {
    "Train loss vs epoch", "Val top-1 vs epoch", "Train loss vs wall time", "Val top-1 vs wall time",
    "Throughput (images/s, steady state)"};

int report_plot(const report_t *r, report_plot_t which, bool png, FILE *f) {
    switch (which) {
    case RP_LOSS_EPOCH: return html_curve(r, f, false, true, png);
    case RP_TOP1_EPOCH: return html_curve(r, f, false, false, png);
    case RP_LOSS_WALL: return html_curve(r, f, true, true, png);
    case RP_TOP1_WALL: return html_curve(r, f, true, false, png);
    case RP_THROUGHPUT: return html_throughput(r, f, png);
    case RP_COUNT: break;
    }
    return -1;
}

int report_write_html(const report_t *r, FILE *f) {
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>", f);
    plot_escape(f, r->title);
    fprintf(f, " - runner report</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", page_css);
    plot_escape(f, r->title);
    int completed = 0;
    for (int i = 0; i < r->n; i++) completed += !strcmp(r->rows[i].status, "completed");
    fprintf(f, "</h1>\n<p class=\"sub\">%d member%s, %d run%s, %d completed", r->n_groups,
            r->n_groups == 1 ? "" : "s", r->n, r->n == 1 ? "" : "s", completed);
    if (r->n && r->rows[0].device[0]) {
        fputs(" &middot; ", f);
        plot_escape(f, r->rows[0].device);
    }
    fputs("</p>\n", f);
    html_verdict(r, f);
    fputs("<h2>Members</h2>\n", f);
    html_members(r, f);
    fputs("<div class=\"charts\">\n", f);
    int rc = report_plot(r, RP_THROUGHPUT, false, f);
    fputs("</div>\n<h2>Runs</h2>\n", f);
    html_table(r, f);
    fputs("<h2>Training curves</h2>\n<div class=\"charts\">\n", f);
    for (int p = RP_LOSS_EPOCH; p <= RP_TOP1_WALL; p++) rc |= report_plot(r, (report_plot_t)p, false, f);
    fputs("</div>\n<h2>Environment</h2>\n", f);
    html_env(r, f);
    fputs("</body>\n</html>\n", f);
    return rc || ferror(f) ? -1 : 0;
}
