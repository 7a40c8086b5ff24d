/* plot.h: small charts for the report (line charts and a bar chart), as SVG or PNG.
 *
 * The SVG is written inline (no XML prolog) so it can be embedded in an HTML page; it
 * uses no scripts, fonts or stylesheets from outside the document. The PNG has the same
 * layout drawn with a plain 5x7 pixel font (see canvas.h). Axis ticks are "nice"
 * numbers (1, 2, 5 x 10^k). NaN points are skipped and the line joins the points on
 * either side (a run evaluated every other epoch still draws one line).
 */
#ifndef RUNNER_REPORT_PLOT_H
#define RUNNER_REPORT_PLOT_H

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct plot_series {
    const char *label;    /* legend text */
    const double *x, *y;  /* n points; NaN in either skips the point */
    int n;
    int color;            /* palette index (plot_color): the repeats of one member share it */
} plot_series_t;

typedef struct plot_opts {
    const char *title;    /* above the chart */
    const char *xlabel, *ylabel;
    int width, height;    /* pixels; 0 = 560 x 340 */
    double y_scale;       /* values are multiplied by this for display (100 for %); 0 = 1 */
    bool x_integer;       /* x ticks at whole numbers only (epochs) */
    bool x_from_zero;     /* the x axis starts at 0 (wall time) */
    const double *lo, *hi;  /* bar chart: a whisker from lo[i] to hi[i] over bar i (the
                               range over seeds); NULL, or NaN in either: none */
} plot_opts_t;

/* The colour the n-th series (or bar) gets, "#rrggbb"; the same in every chart. */
const char *plot_color(int i);

/* Writes an <svg> line chart of ns series to f. Series with no finite point appear in
 * the legend as "(no data)". Returns 0, or -1 if f reports a write error. */
int plot_line_svg(FILE *f, const plot_opts_t *o, const plot_series_t *s, int ns);

/* Writes an <svg> horizontal bar chart: one bar per label with its value printed at
 * the end of the bar (NaN: "n/a", no bar), and o->lo..o->hi whiskers where given.
 * Returns 0, or -1 on a write error. */
int plot_bar_svg(FILE *f, const plot_opts_t *o, const char *const *labels,
                 const double *values, int n);

/* The same two charts as 8-bit RGB PNG images. Return 0, or -1 when out of memory or f
 * reports a write error. */
int plot_line_png(FILE *f, const plot_opts_t *o, const plot_series_t *s, int ns);
int plot_bar_png(FILE *f, const plot_opts_t *o, const char *const *labels,
                 const double *values, int n);

/* Writes s with &, <, >, " escaped for HTML/SVG text and attributes. */
void plot_escape(FILE *f, const char *s);

#ifdef __cplusplus
}
#endif
#endif
