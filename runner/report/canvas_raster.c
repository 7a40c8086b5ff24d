/* canvas_raster.c: the pixel implementation of canvas.h and its PNG encoder (8-bit RGB,
 * one zlib-compressed IDAT, filter type 0 on every row, CRCs from zlib's crc32). Lines
 * are drawn by stamping discs along the segment, text with the 5x7 font (font5x7.c) at
 * 1x, or 2x for sizes of 14 and up. There is no anti-aliasing or clipping beyond the
 * image edges. If the pixel buffer cannot be allocated every op does nothing and
 * writing the PNG fails. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "runner/report/canvas.h"

/* Parses "#rrggbb" into rgb; returns -1 for "none", NULL or anything else. */
static int parse_color(const char *s, uint8_t rgb[3]) {
    if (!s || s[0] != '#' || strlen(s) != 7) return -1;
    for (int i = 0; i < 3; i++) {
        unsigned v = 0;
        for (int k = 1; k <= 2; k++) {
            char ch = s[1 + 2 * i + k - 1];
            v <<= 4;
            if (ch >= '0' && ch <= '9') v |= (unsigned)(ch - '0');
            else if (ch >= 'a' && ch <= 'f') v |= (unsigned)(ch - 'a' + 10);
            else if (ch >= 'A' && ch <= 'F') v |= (unsigned)(ch - 'A' + 10);
            else return -1;
        }
        rgb[i] = (uint8_t)v;
    }
    return 0;
}

static void put(canvas_t *c, long x, long y, const uint8_t rgb[3]) {
    if (!c->rgb || x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    memcpy(c->rgb + ((size_t)y * (size_t)c->w + (size_t)x) * 3, rgb, 3);
}

/* Fills the pixels within radius r of (x, y); r below one pixel sets the nearest one. */
static void stamp(canvas_t *c, double x, double y, double r, const uint8_t rgb[3]) {
    long cx = lround(x), cy = lround(y);
    if (r <= 0.5) { put(c, cx, cy, rgb); return; }
    long k = (long)ceil(r);
    for (long dy = -k; dy <= k; dy++)
        for (long dx = -k; dx <= k; dx++)
            if ((double)(dx * dx + dy * dy) <= r * r + 0.25) put(c, cx + dx, cy + dy, rgb);
}

static void raster_begin(canvas_t *c, int w, int h, const char *title) {
    (void)title;
    free(c->rgb);
    c->w = w;
    c->h = h;
    c->rgb = malloc((size_t)w * (size_t)h * 3);
    if (c->rgb) memset(c->rgb, 0xFF, (size_t)w * (size_t)h * 3);
}

static void raster_end(canvas_t *c) { (void)c; }

static void raster_line(canvas_t *c, double x0, double y0, double x1, double y1, const char *color, double width) {
    uint8_t rgb[3];
    if (parse_color(color, rgb)) return;
    double len = hypot(x1 - x0, y1 - y0);
    int steps = (int)ceil(len * 2) + 1;
    for (int i = 0; i <= steps; i++) {
        double t = (double)i / steps;
        stamp(c, x0 + t * (x1 - x0), y0 + t * (y1 - y0), width / 2, rgb);
    }
}

static void raster_rect(canvas_t *c, double x, double y, double w, double h, const char *fill, const char *stroke) {
    uint8_t rgb[3];
    if (parse_color(fill, rgb) == 0)
        for (long py = lround(y); py < lround(y + h); py++)
            for (long px = lround(x); px < lround(x + w); px++) put(c, px, py, rgb);
    if (parse_color(stroke, rgb) == 0) {
        raster_line(c, x, y, x + w, y, stroke, 1);
        raster_line(c, x + w, y, x + w, y + h, stroke, 1);
        raster_line(c, x + w, y + h, x, y + h, stroke, 1);
        raster_line(c, x, y + h, x, y, stroke, 1);
    }
}

static void raster_polyline(canvas_t *c, const double *xy, int n, const char *color, double width) {
    for (int i = 0; i + 1 < n; i++) raster_line(c, xy[2 * i], xy[2 * i + 1], xy[2 * i + 2], xy[2 * i + 3], color, width);
    if (n == 1) raster_line(c, xy[0], xy[1], xy[0], xy[1], color, width);
}

static void raster_circle(canvas_t *c, double cx, double cy, double r, const char *fill) {
    uint8_t rgb[3];
    if (parse_color(fill, rgb) == 0) stamp(c, cx, cy, r, rgb);
}

static void raster_text(canvas_t *c, double x, double y, const char *s, const text_style_t *st) {
    uint8_t rgb[3] = {0x22, 0x22, 0x22};
    if (st->color) parse_color(st->color, rgb);
    long scale = st->size >= 14 ? 2 : 1, n = (long)strlen(s);
    long width = n * 6 * scale - scale;
    long start = st->anchor == ANCHOR_START ? 0 : st->anchor == ANCHOR_MIDDLE ? -width / 2 : -width;
    long ox = lround(x), oy = lround(y);
    for (long i = 0; i < n; i++) {
        const uint8_t *g = font5x7_glyph((unsigned char)s[i]);
        long drop = font5x7_descent((unsigned char)s[i]) * scale;
        for (long row = 0; row < 7; row++)
            for (long col = 0; col < 5; col++) {
                if (!(g[row] & (0x10 >> col))) continue;
                for (long sy = 0; sy < scale; sy++)
                    for (long sx = 0; sx < scale + (st->bold ? 1 : 0); sx++) {
                        /* offsets along the text and up from the baseline */
                        long along = start + i * 6 * scale + col * scale + sx;
                        long down = -7 * scale + row * scale + sy + drop;
                        if (st->vertical) put(c, ox + down, oy - along, rgb);
                        else put(c, ox + along, oy + down, rgb);
                    }
            }
    }
}

static const canvas_ops_t raster_ops = {raster_begin, raster_end, raster_rect, raster_line,
                                        raster_polyline, raster_circle, raster_text};

void canvas_raster_init(canvas_t *c) {
    memset(c, 0, sizeof *c);
    c->ops = &raster_ops;
}

void canvas_raster_free(canvas_t *c) {
    free(c->rgb);
    c->rgb = NULL;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* Writes one PNG chunk: length, type, data, CRC-32 of type and data. */
static int png_chunk(FILE *f, const char *type, const uint8_t *data, uint32_t len) {
    uint8_t head[8], tail[4];
    put_be32(head, len);
    memcpy(head + 4, type, 4);
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, (const Bytef *)type, 4);
    if (len) crc = crc32(crc, data, len);
    put_be32(tail, (uint32_t)crc);
    if (fwrite(head, 1, 8, f) != 8) return -1;
    if (len && fwrite(data, 1, len, f) != len) return -1;
    return fwrite(tail, 1, 4, f) == 4 ? 0 : -1;
}

int canvas_raster_write_png(const canvas_t *c, FILE *f) {
    if (!c->rgb) return -1;
    size_t stride = (size_t)c->w * 3 + 1, raw_len = stride * (size_t)c->h;
    uint8_t *raw = malloc(raw_len);
    uLongf z_len = compressBound((uLong)raw_len);
    uint8_t *z = malloc(z_len);
    int rc = -1;
    if (raw && z) {
        for (int y = 0; y < c->h; y++) {
            raw[(size_t)y * stride] = 0;  /* filter: none */
            memcpy(raw + (size_t)y * stride + 1, c->rgb + (size_t)y * (size_t)c->w * 3, (size_t)c->w * 3);
        }
        if (compress2(z, &z_len, raw, (uLong)raw_len, 9) == Z_OK) {
            static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
            uint8_t ihdr[13];
            put_be32(ihdr, (uint32_t)c->w);
            put_be32(ihdr + 4, (uint32_t)c->h);
            ihdr[8] = 8;   /* bit depth */
            ihdr[9] = 2;   /* colour type: RGB */
            ihdr[10] = ihdr[11] = ihdr[12] = 0;  /* deflate, adaptive filtering, no interlace */
            rc = fwrite(signature, 1, 8, f) == 8 && png_chunk(f, "IHDR", ihdr, 13) == 0 &&
                 png_chunk(f, "IDAT", z, (uint32_t)z_len) == 0 && png_chunk(f, "IEND", NULL, 0) == 0 ? 0 : -1;
        }
    }
    free(raw);
    free(z);
    return rc;
}
