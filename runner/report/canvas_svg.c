/* canvas_svg.c: the SVG implementation of canvas.h. Each op writes one SVG element to the
 * canvas's stream; begin writes the <svg> root (with the namespace, so the output is also
 * a valid standalone .svg file), a <title> and a white background. No styles, scripts or
 * external references. */
#include <string.h>

#include "runner/report/canvas.h"
#include "runner/report/plot.h"

static void svg_begin(canvas_t *c, int w, int h, const char *title) {
    fprintf(c->f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" role=\"img\">\n", w, h, w, h);
    if (title) {
        fputs("<title>", c->f);
        plot_escape(c->f, title);
        fputs("</title>\n", c->f);
    }
    fprintf(c->f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", w, h);
}

static void svg_end(canvas_t *c) { fputs("</svg>\n", c->f); }

static void svg_rect(canvas_t *c, double x, double y, double w, double h, const char *fill, const char *stroke) {
    fprintf(c->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"", x, y, w, h,
            fill ? fill : "none");
    if (stroke && strcmp(stroke, "none")) fprintf(c->f, " stroke=\"%s\"", stroke);
    fputs("/>\n", c->f);
}

static void svg_line(canvas_t *c, double x0, double y0, double x1, double y1, const char *color, double width) {
    fprintf(c->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"", x0, y0, x1, y1, color);
    if (width != 1) fprintf(c->f, " stroke-width=\"%g\"", width);
    fputs("/>\n", c->f);
}

static void svg_polyline(canvas_t *c, const double *xy, int n, const char *color, double width) {
    fprintf(c->f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" points=\"", color, width);
    for (int i = 0; i < n; i++) fprintf(c->f, "%s%.1f,%.1f", i ? " " : "", xy[2 * i], xy[2 * i + 1]);
    fputs("\"/>\n", c->f);
}

static void svg_circle(canvas_t *c, double cx, double cy, double r, const char *fill) {
    fprintf(c->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%g\" fill=\"%s\"/>", cx, cy, r, fill);
}

static void svg_text(canvas_t *c, double x, double y, const char *s, const text_style_t *st) {
    static const char *const anchors[] = {NULL, "middle", "end"};
    fprintf(c->f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\"", x, y, st->size);
    if (anchors[st->anchor]) fprintf(c->f, " text-anchor=\"%s\"", anchors[st->anchor]);
    if (st->bold) fputs(" font-weight=\"bold\"", c->f);
    if (st->color) fprintf(c->f, " fill=\"%s\"", st->color);
    if (st->vertical) fprintf(c->f, " transform=\"rotate(-90 %.1f %.1f)\"", x, y);
    fputc('>', c->f);
    plot_escape(c->f, s);
    fputs("</text>\n", c->f);
}

static const canvas_ops_t svg_ops = {svg_begin, svg_end, svg_rect, svg_line, svg_polyline, svg_circle, svg_text};

void canvas_svg_init(canvas_t *c, FILE *f) {
    memset(c, 0, sizeof *c);
    c->ops = &svg_ops;
    c->f = f;
}
