/* plot.c: the line and bar charts declared in plot.h. The layout (margins, nice ticks,
 * a legend that wraps below the axes) is computed here once and drawn through a canvas
 * (canvas.h): SVG elements or PNG pixels. It has no zoom, tooltips or log scales. */
#include "runner/report/plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/report/canvas.h"

enum { MARGIN_L = 70, MARGIN_R = 20, MARGIN_T = 34, MARGIN_B = 46, LEGEND_ROW = 18 };

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

const char *plot_color(int i) {
    int n = (int)(sizeof palette / sizeof palette[0]);
    return palette[((i % n) + n) % n];
}

void plot_escape(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* Axis range and tick step covering [lo, hi] with about `target` nice steps. */
typedef struct axis { double lo, hi, step; int decimals; } axis_t;

static axis_t nice_axis(double lo, double hi, int target) {
    axis_t a;
    if (!isfinite(lo) || !isfinite(hi)) { lo = 0; hi = 1; }
    if (hi - lo < 1e-12 * (fabs(lo) + fabs(hi)) || hi == lo) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1.0;
        lo -= pad;
        hi += pad;
    }
    double rough = (hi - lo) / target;
    double mag = pow(10.0, floor(log10(rough)));
    double norm = rough / mag;
    double nice = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
    a.step = nice * mag;
    a.lo = floor(lo / a.step + 1e-9) * a.step;
    a.hi = ceil(hi / a.step - 1e-9) * a.step;
    if (a.hi <= a.lo) a.hi = a.lo + a.step;
    a.decimals = a.step < 1 ? (int)ceil(-log10(a.step) - 1e-9) : 0;
    if (a.decimals > 8) a.decimals = 8;
    return a;
}

/* Approximate width in pixels of text at 12px sans-serif (for legend wrapping). */
static int text_px(const char *s) { return (int)(strlen(s) * 7) + 4; }

/* Lays the legend out in rows of width w; draws it when c is set. Returns the rows. */
static int legend(canvas_t *c, const plot_series_t *s, int ns, int x0, int y0, int w) {
    int rows = ns ? 1 : 0, x = x0;
    const text_style_t st = {.size = 12};
    for (int i = 0; i < ns; i++) {
        bool any = false;
        for (int k = 0; k < s[i].n; k++)
            if (isfinite(s[i].x[k]) && isfinite(s[i].y[k])) any = true;
        char label[300];
        snprintf(label, sizeof label, "%.250s%s", s[i].label ? s[i].label : "", any ? "" : " (no data)");
        int item = 22 + text_px(label) + 14;
        if (x + item > x0 + w && x > x0) {
            rows++;
            x = x0;
        }
        if (c) {
            int y = y0 + (rows - 1) * LEGEND_ROW;
            c->ops->line(c, x, y - 4, x + 16, y - 4, plot_color(s[i].color), 3);
            c->ops->text(c, x + 21, y, label, &st);
        }
        x += item;
    }
    return rows;
}

/* Draws the frame: title, grid, tick labels, the plot box and the axis labels. */
static void frame(canvas_t *c, const plot_opts_t *o, int W, int pw, int ph, axis_t ax, axis_t ay) {
    const text_style_t title = {.size = 14, .anchor = ANCHOR_MIDDLE, .bold = true};
    const text_style_t tick_y = {.size = 11, .anchor = ANCHOR_END}, tick_x = {.size = 11, .anchor = ANCHOR_MIDDLE};
    const text_style_t label_x = {.size = 12, .anchor = ANCHOR_MIDDLE};
    const text_style_t label_y = {.size = 12, .anchor = ANCHOR_MIDDLE, .vertical = true};
    char num[64];
    if (o->title) c->ops->text(c, W / 2, 20, o->title, &title);
    for (int i = 0; i * ay.step <= ay.hi - ay.lo + ay.step * 1e-6; i++) {
        double v = ay.lo + i * ay.step;
        double y = MARGIN_T + ph - (v - ay.lo) / (ay.hi - ay.lo) * ph;
        c->ops->line(c, MARGIN_L, y, MARGIN_L + pw, y, "#e0e0e0", 1);
        snprintf(num, sizeof num, "%.*f", ay.decimals, v);
        c->ops->text(c, MARGIN_L - 6, y + 4, num, &tick_y);
    }
    for (int i = 0; i * ax.step <= ax.hi - ax.lo + ax.step * 1e-6; i++) {
        double v = ax.lo + i * ax.step;
        double x = MARGIN_L + (v - ax.lo) / (ax.hi - ax.lo) * pw;
        c->ops->line(c, x, MARGIN_T, x, MARGIN_T + ph, "#e0e0e0", 1);
        snprintf(num, sizeof num, "%.*f", ax.decimals, v);
        c->ops->text(c, x, MARGIN_T + ph + 15, num, &tick_x);
    }
    c->ops->rect(c, MARGIN_L, MARGIN_T, pw, ph, "none", "#888888");
    if (o->xlabel) c->ops->text(c, MARGIN_L + pw / 2, MARGIN_T + ph + 34, o->xlabel, &label_x);
    if (o->ylabel) c->ops->text(c, 16, MARGIN_T + ph / 2, o->ylabel, &label_y);
}

/* Lays out and draws a line chart on c. Returns 0, or -1 when out of memory. */
static int draw_lines(canvas_t *c, const plot_opts_t *o, const plot_series_t *s, int ns) {
    int W = o->width ? o->width : 560, H = o->height ? o->height : 340;
    double ys = o->y_scale ? o->y_scale : 1.0;
    int pw = W - MARGIN_L - MARGIN_R, ph = H - MARGIN_T - MARGIN_B;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    int most = 1;
    for (int i = 0; i < ns; i++) {
        if (s[i].n > most) most = s[i].n;
        for (int k = 0; k < s[i].n; k++) {
            double x = s[i].x[k], y = s[i].y[k] * ys;
            if (!isfinite(x) || !isfinite(y)) continue;
            xlo = fmin(xlo, x); xhi = fmax(xhi, x);
            ylo = fmin(ylo, y); yhi = fmax(yhi, y);
        }
    }
    if (o->x_from_zero && xlo > 0) xlo = 0;
    axis_t ax = nice_axis(xlo, xhi, 6), ay = nice_axis(ylo, yhi, 5);
    if (o->x_integer && ax.step < 1) {
        ax.step = 1;
        ax.decimals = 0;
        ax.lo = floor(ax.lo);
        ax.hi = ceil(ax.hi);
        if (ax.hi <= ax.lo) ax.hi = ax.lo + 1;
    }
    double *xy = malloc((size_t)most * 2 * sizeof *xy);
    if (!xy) return -1;
    int rows = legend(NULL, s, ns, MARGIN_L, 0, pw);
    c->ops->begin(c, W, H + rows * LEGEND_ROW, o->title);
    frame(c, o, W, pw, ph, ax, ay);
    for (int i = 0; i < ns; i++) {
        int m = 0;
        for (int k = 0; k < s[i].n; k++) {
            double x = s[i].x[k], y = s[i].y[k] * ys;
            if (!isfinite(x) || !isfinite(y)) continue;   /* skipped: the line joins its neighbours */
            xy[2 * m] = MARGIN_L + (x - ax.lo) / (ax.hi - ax.lo) * pw;
            xy[2 * m + 1] = MARGIN_T + ph - (y - ay.lo) / (ay.hi - ay.lo) * ph;
            m++;
        }
        if (m) c->ops->polyline(c, xy, m, plot_color(s[i].color), 2);
        for (int k = 0; k < m; k++) c->ops->circle(c, xy[2 * k], xy[2 * k + 1], 2.5, plot_color(s[i].color));
    }
    legend(c, s, ns, MARGIN_L, H + 4, pw);
    c->ops->end(c);
    free(xy);
    return 0;
}

/* Lays out and draws a horizontal bar chart on c. */
static void draw_bars(canvas_t *c, const plot_opts_t *o, const char *const *labels, const double *values, int n) {
    int W = o->width ? o->width : 560;
    int label_w = 40;
    for (int i = 0; i < n; i++) {
        int w = text_px(labels[i] ? labels[i] : "");
        if (w > label_w) label_w = w;
    }
    if (label_w > W / 3) label_w = W / 3;
    int bar_h = 20, gap = 8, top = 34, left = label_w + 10, right = 90;
    int H = top + n * (bar_h + gap) + 34;
    double vmax = 0;
    for (int i = 0; i < n; i++) {
        if (isfinite(values[i]) && values[i] > vmax) vmax = values[i];
        if (o->hi && isfinite(o->hi[i]) && o->hi[i] > vmax) vmax = o->hi[i];
    }
    axis_t ax = nice_axis(0, vmax > 0 ? vmax : 1, 5);
    int pw = W - left - right;
    const text_style_t title = {.size = 14, .anchor = ANCHOR_MIDDLE, .bold = true};
    const text_style_t tick = {.size = 11, .anchor = ANCHOR_MIDDLE}, value = {.size = 11};
    const text_style_t none = {.size = 11, .color = "#888888"}, name = {.size = 12, .anchor = ANCHOR_END};
    const text_style_t label_x = {.size = 12, .anchor = ANCHOR_MIDDLE};
    char num[64];
    c->ops->begin(c, W, H, o->title);
    if (o->title) c->ops->text(c, W / 2, 20, o->title, &title);
    int axis_y = top + n * (bar_h + gap);
    for (int i = 0; i * ax.step <= ax.hi + ax.step * 1e-6; i++) {
        double v = i * ax.step, x = left + v / ax.hi * pw;
        c->ops->line(c, x, top - 4, x, axis_y, "#e0e0e0", 1);
        snprintf(num, sizeof num, "%.*f", ax.decimals, v);
        c->ops->text(c, x, axis_y + 14, num, &tick);
    }
    for (int i = 0; i < n; i++) {
        int y = top + i * (bar_h + gap);
        c->ops->text(c, left - 6, y + 14, labels[i] ? labels[i] : "", &name);
        if (isfinite(values[i]) && values[i] > 0) {
            double w = values[i] / ax.hi * pw, end = w;
            c->ops->rect(c, left, y, w, bar_h, plot_color(i), "none");
            if (o->lo && o->hi && isfinite(o->lo[i]) && isfinite(o->hi[i]) && o->hi[i] > o->lo[i]) {
                double a = left + o->lo[i] / ax.hi * pw, b = left + o->hi[i] / ax.hi * pw, mid = y + bar_h / 2.0;
                c->ops->line(c, a, mid, b, mid, "#222222", 2);
                c->ops->line(c, a, y + 4, a, y + bar_h - 4, "#222222", 2);
                c->ops->line(c, b, y + 4, b, y + bar_h - 4, "#222222", 2);
                if (b - left > end) end = b - left;
            }
            snprintf(num, sizeof num, "%.1f", values[i]);
            c->ops->text(c, left + end + 4, y + 14, num, &value);
        } else {
            c->ops->text(c, left + 4, y + 14, "n/a", &none);
        }
    }
    if (o->xlabel) c->ops->text(c, left + pw / 2, axis_y + 30, o->xlabel, &label_x);
    c->ops->end(c);
}

int plot_line_svg(FILE *f, const plot_opts_t *o, const plot_series_t *s, int ns) {
    canvas_t c;
    canvas_svg_init(&c, f);
    if (draw_lines(&c, o, s, ns)) return -1;
    return ferror(f) ? -1 : 0;
}

int plot_bar_svg(FILE *f, const plot_opts_t *o, const char *const *labels, const double *values, int n) {
    canvas_t c;
    canvas_svg_init(&c, f);
    draw_bars(&c, o, labels, values, n);
    return ferror(f) ? -1 : 0;
}

int plot_line_png(FILE *f, const plot_opts_t *o, const plot_series_t *s, int ns) {
    canvas_t c;
    canvas_raster_init(&c);
    int rc = draw_lines(&c, o, s, ns);
    if (rc == 0) rc = canvas_raster_write_png(&c, f);
    canvas_raster_free(&c);
    return rc || ferror(f) ? -1 : 0;
}

int plot_bar_png(FILE *f, const plot_opts_t *o, const char *const *labels, const double *values, int n) {
    canvas_t c;
    canvas_raster_init(&c);
    draw_bars(&c, o, labels, values, n);
    int rc = canvas_raster_write_png(&c, f);
    canvas_raster_free(&c);
    return rc || ferror(f) ? -1 : 0;
}
