/* report_html.c: the self-contained report.html (report.h): the comparison table, the
 * training-curve and throughput charts as inline SVG, and each run's environment in a
 * <details> section. Styles are inline; there are no scripts and no external resources,
 * so the page reads the same offline. The numbers come from report.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/report/plot.h"
#include "runner/report/report_impl.h"

static const char *const page_css =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}"
    "table{border-collapse:collapse;font-size:13px}"
    "th,td{border:1px solid #ccc;padding:4px 8px;vertical-align:top}"
    "th{background:#f2f2f2;text-align:left}td.name,td.status{white-space:nowrap}td.num{text-align:right;font-variant-numeric:tabular-nums}"
    "tr.failed td{background:#fde2e2}tr.partial td{background:#fff4d6}"
    ".swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}"
    ".charts{display:flex;flex-wrap:wrap;gap:16px}.charts svg{border:1px solid #ddd}"
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
            bool num = c == RC_WORLD || c == RC_BATCH || (c >= RC_IMAGES && c <= RC_LOSS);
            fputs(num ? "<td class=\"num\">" : c == RC_NAME ? "<td class=\"name\">"
                  : c == RC_STATUS ? "<td class=\"status\">" : "<td>", f);
            if (c == RC_NAME) fprintf(f, "<span class=\"swatch\" style=\"background:%s\"></span>", plot_color(i));
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
    fputs("<p class=\"muted\">images/s: median over steps.csv rows after the first 10% (warm-up). "
          "s/epoch: median epoch time. speed-up: images/s relative to the first row. comm exposed: "
          "communication time not hidden behind compute, as a share of step time.</p>\n", f);
}

/* One line chart of every run: y against epoch or against cumulative wall time. */
static int html_curve(const report_t *r, FILE *f, bool wall, bool loss, bool png) {
    plot_series_t *s = calloc((size_t)r->n, sizeof *s);
    if (!s) return -1;
    for (int i = 0; i < r->n; i++) {
        const report_row_t *row = &r->rows[i];
        s[i].label = row->name;
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

static int html_throughput(const report_t *r, FILE *f, bool png) {
    const char **labels = calloc((size_t)r->n, sizeof *labels);
    double *v = calloc((size_t)r->n, sizeof *v);
    int rc = -1;
    if (labels && v) {
        for (int i = 0; i < r->n; i++) {
            labels[i] = r->rows[i].name;
            v[i] = r->rows[i].images_per_second;
        }
        plot_opts_t o = {0};
        o.title = report_plot_titles[RP_THROUGHPUT];
        o.xlabel = "images per second";
        o.width = 760;
        rc = png ? plot_bar_png(f, &o, labels, v, r->n) : plot_bar_svg(f, &o, labels, v, r->n);
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
    fprintf(f, "</h1>\n<p>%d run%s, %d completed.</p>\n<h2>Comparison</h2>\n", r->n, r->n == 1 ? "" : "s",
            completed);
    html_table(r, f);
    fputs("<h2>Training curves</h2>\n<div class=\"charts\">\n", f);
    int rc = 0;
    for (int p = RP_LOSS_EPOCH; p <= RP_TOP1_WALL; p++) rc |= report_plot(r, (report_plot_t)p, false, f);
    fputs("</div>\n<h2>Throughput</h2>\n<div class=\"charts\">\n", f);
    rc |= report_plot(r, RP_THROUGHPUT, false, f);
    fputs("</div>\n<h2>Environment</h2>\n", f);
    html_env(r, f);
    fputs("</body>\n</html>\n", f);
    return rc || ferror(f) ? -1 : 0;
}
