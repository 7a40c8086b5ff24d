/* canvas.h: the drawing surface the charts are laid out on (private to runner/report/).
 *
 * plot.c lays a chart out once in pixel coordinates and draws it through this small op
 * table; one implementation writes SVG elements (canvas_svg.c), the other fills an RGB
 * pixel buffer and encodes it as PNG with zlib (canvas_raster.c, font5x7.c). Colours are
 * "#rrggbb" strings or "none". Text y is the baseline. The raster text is a fixed 5x7
 * pixel font (printable ASCII; other bytes draw as a box), so raster labels are plainer
 * than the SVG ones; there is no anti-aliasing.
 */
#ifndef RUNNER_REPORT_CANVAS_H
#define RUNNER_REPORT_CANVAS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { ANCHOR_START, ANCHOR_MIDDLE, ANCHOR_END } text_anchor_t;

typedef struct text_style {
    int size;               /* nominal pixel size (SVG font-size) */
    text_anchor_t anchor;
    bool bold;
    bool vertical;          /* rotated -90 degrees: reads bottom to top */
    const char *color;      /* NULL = black */
} text_style_t;

typedef struct canvas canvas_t;

/* One slot per drawing primitive; every slot is required. */
typedef struct canvas_ops {
    void (*begin)(canvas_t *c, int w, int h, const char *title);  /* white background */
    void (*end)(canvas_t *c);
    void (*rect)(canvas_t *c, double x, double y, double w, double h, const char *fill, const char *stroke);
    void (*line)(canvas_t *c, double x0, double y0, double x1, double y1, const char *color, double width);
    void (*polyline)(canvas_t *c, const double *xy, int n, const char *color, double width);
    void (*circle)(canvas_t *c, double cx, double cy, double r, const char *fill);
    void (*text)(canvas_t *c, double x, double y, const char *s, const text_style_t *st);
} canvas_ops_t;

struct canvas {
    const canvas_ops_t *ops;
    FILE *f;                /* SVG: where elements go */
    int w, h;               /* raster: size in pixels */
    uint8_t *rgb;           /* raster: w * h * 3 bytes, NULL until begin (or if out of memory) */
};

/* An SVG canvas writing to f. */
void canvas_svg_init(canvas_t *c, FILE *f);
/* A raster canvas; its pixels exist between begin and canvas_raster_free. */
void canvas_raster_init(canvas_t *c);
/* Encodes the raster as an 8-bit RGB PNG to f. Returns 0, or -1 (no pixels, zlib or
 * write error). */
int canvas_raster_write_png(const canvas_t *c, FILE *f);
void canvas_raster_free(canvas_t *c);

/* The 5x7 glyph of byte ch: 7 rows, top first, bit 4 = leftmost pixel. Bytes outside
 * printable ASCII get a box. */
const uint8_t *font5x7_glyph(unsigned char ch);
/* Rows the glyph of ch is drawn below its box (2 for letters with a descender, else 0). */
int font5x7_descent(unsigned char ch);

#endif
