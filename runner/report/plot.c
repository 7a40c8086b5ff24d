/* plot.c: the SVG line and bar charts declared in plot.h. Layout is fixed-size and
 * computed here (margins, nice ticks, a legend that wraps below the axes); it has no
 * zoom, tooltips or log scales. */
#include "runner/report/plot.h"

#include <math.h>
#include <string.h>

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

/* Lays the legend out in rows of width w; writes it when f is set. Returns the rows. */
static int legend(FILE *f, const plot_series_t *s, int ns, int x0, int y0, int w) {
    int rows = ns ? 1 : 0, x = x0;
    for (int i = 0; i < ns; i++) {
        bool any = false;
        for (int k = 0; k < s[i].n; k++)
            if (isfinite(s[i].x[k]) && isfinite(s[i].y[k])) any = true;
        const char *label = s[i].label ? s[i].label : "";
        int item = 22 + text_px(label) + (any ? 0 : text_px(" (no data)")) + 14;
        if (x + item > x0 + w && x > x0) {
            rows++;
            x = x0;
        }
        if (f) {
            int y = y0 + (rows - 1) * LEGEND_ROW;
            fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>",
                    x, y - 4, x + 16, y - 4, plot_color(i));
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\">", x + 21, y);
            plot_escape(f, label);
            if (!any) fputs(" (no data)", f);
            fputs("</text>\n", f);
        }
        x += item;
    }
    return rows;
}

/* Writes the frame: background, title, grid, tick labels and axis labels. */
static void frame(FILE *f, const plot_opts_t *o, int W, int pw, int ph, axis_t ax, axis_t ay) {
    fprintf(f, "<rect width=\"%d\" height=\"100%%\" fill=\"#ffffff\"/>\n", W);
    if (o->title) {
        fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\" text-anchor=\"middle\">",
                W / 2);
        plot_escape(f, o->title);
        fputs("</text>\n", f);
    }
    for (int i = 0; i * ay.step <= ay.hi - ay.lo + ay.step * 1e-6; i++) {
        double v = ay.lo + i * ay.step;
        double y = MARGIN_T + ph - (v - ay.lo) / (ay.hi - ay.lo) * ph;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>", MARGIN_L, y,
                MARGIN_L + pw, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.*f</text>\n",
                MARGIN_L - 6, y + 4, ay.decimals, v);
    }
    for (int i = 0; i * ax.step <= ax.hi - ax.lo + ax.step * 1e-6; i++) {
        double v = ax.lo + i * ax.step;
        double x = MARGIN_L + (v - ax.lo) / (ax.hi - ax.lo) * pw;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e0e0e0\"/>", x, MARGIN_T, x,
                MARGIN_T + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%.*f</text>\n", x,
                MARGIN_T + ph + 15, ax.decimals, v);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888888\"/>\n",
            MARGIN_L, MARGIN_T, pw, ph);
    if (o->xlabel) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">", MARGIN_L + pw / 2,
                MARGIN_T + ph + 34);
        plot_escape(f, o->xlabel);
        fputs("</text>\n", f);
    }
    if (o->ylabel) {
        fprintf(f, "<text x=\"16\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" "
                "transform=\"rotate(-90 16 %d)\">", MARGIN_T + ph / 2, MARGIN_T + ph / 2);
        plot_escape(f, o->ylabel);
        fputs("</text>\n", f);
    }
}

int plot_line_svg(FILE *f, const plot_opts_t *o, const plot_series_t *s, int ns) {
    int W = o->width ? o->width : 560, H = o->height ? o->height : 340;
    double ys = o->y_scale ? o->y_scale : 1.0;
    int pw = W - MARGIN_L - MARGIN_R, ph = H - MARGIN_T - MARGIN_B;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (int k = 0; k < s[i].n; k++) {
            double x = s[i].x[k], y = s[i].y[k] * ys;
            if (!isfinite(x) || !isfinite(y)) continue;
            xlo = fmin(xlo, x); xhi = fmax(xhi, x);
            ylo = fmin(ylo, y); yhi = fmax(yhi, y);
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
    int rows = legend(NULL, s, ns, MARGIN_L, 0, pw);
    int total_h = H + rows * LEGEND_ROW;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" role=\"img\">\n", W, total_h, W, total_h);
    if (o->title) {
        fputs("<title>", f);
        plot_escape(f, o->title);
        fputs("</title>\n", f);
    }
    frame(f, o, W, pw, ph, ax, ay);
    for (int i = 0; i < ns; i++) {
        const char *col = plot_color(i);
        bool open = false;
        for (int k = 0; k < s[i].n; k++) {
            double x = s[i].x[k], y = s[i].y[k] * ys;
            if (!isfinite(x) || !isfinite(y)) continue;
            double px = MARGIN_L + (x - ax.lo) / (ax.hi - ax.lo) * pw;
            double py = MARGIN_T + ph - (y - ay.lo) / (ay.hi - ay.lo) * ph;
            if (!open) fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
            fprintf(f, "%s%.1f,%.1f", open ? " " : "", px, py);
            open = true;
        }
        if (open) fputs("\"/>\n", f);
        for (int k = 0; k < s[i].n; k++) {
            double x = s[i].x[k], y = s[i].y[k] * ys;
            if (!isfinite(x) || !isfinite(y)) continue;
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>",
                    MARGIN_L + (x - ax.lo) / (ax.hi - ax.lo) * pw,
                    MARGIN_T + ph - (y - ay.lo) / (ay.hi - ay.lo) * ph, col);
        }
        fputc('\n', f);
    }
    legend(f, s, ns, MARGIN_L, H + 4, pw);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

int plot_bar_svg(FILE *f, const plot_opts_t *o, const char *const *labels, const double *values,
                 int n) {
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
    for (int i = 0; i < n; i++)
        if (isfinite(values[i]) && values[i] > vmax) vmax = values[i];
    axis_t ax = nice_axis(0, vmax > 0 ? vmax : 1, 5);
    int pw = W - left - right;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" role=\"img\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, H);
    if (o->title) {
        fputs("<title>", f);
        plot_escape(f, o->title);
        fprintf(f, "</title>\n<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\" "
                "text-anchor=\"middle\">", W / 2);
        plot_escape(f, o->title);
        fputs("</text>\n", f);
    }
    int axis_y = top + n * (bar_h + gap);
    for (int i = 0; i * ax.step <= ax.hi + ax.step * 1e-6; i++) {
        double v = i * ax.step, x = left + v / ax.hi * pw;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e0e0e0\"/>", x, top - 4, x, axis_y);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%.*f</text>\n", x,
                axis_y + 14, ax.decimals, v);
    }
    for (int i = 0; i < n; i++) {
        int y = top + i * (bar_h + gap);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"end\">", left - 6, y + 14);
        plot_escape(f, labels[i] ? labels[i] : "");
        fputs("</text>", f);
        if (isfinite(values[i]) && values[i] > 0) {
            double w = values[i] / ax.hi * pw;
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>", left, y, w,
                    bar_h, plot_color(i));
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\">%.1f</text>\n", left + w + 4, y + 14,
                    values[i]);
        } else {
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#888888\">n/a</text>\n", left + 4,
                    y + 14);
        }
    }
    if (o->xlabel) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">", left + pw / 2, axis_y + 30);
        plot_escape(f, o->xlabel);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}
