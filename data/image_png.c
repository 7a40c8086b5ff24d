/* image_png.c: PNG decoding with libpng (image.h).
 *
 * libpng only unpacks rows (interlace handling, nothing else): the conversion to 8-bit RGB
 * or L is done here, following PIL's modes exactly (PngImagePlugin's table and Convert.c):
 *   gray 1 bit -> "1" (0/255); 2, 4 bit -> "L" by bit replication; 8 -> "L";
 *   16 -> "I", which convert() clips to 0..255 (not scaled: PIL's behaviour);
 *   gray+alpha, RGB, RGBA at 16 bits -> the high byte; alpha dropped;
 *   palette 1/2/4/8 bit -> looked up in PLTE (indices past its end give black);
 *   tRNS, gAMA, iCCP, sRGB: ignored, as convert("RGB") ignores them.
 * Every row is decoded even when a crop needs fewer, so a truncated file fails whatever the
 * crop (deterministic); only the needed rows are kept.
 */
#include "data/image.h"

#include <string.h>

#ifdef RUNNER_HAVE_PNG
#include <png.h>
#include <setjmp.h>
#include <stdio.h>

typedef struct png_src {
    const uint8_t *b;
    size_t len, at;
    char msg[256];
} png_src_t;

static void on_read(png_structp p, png_bytep out, png_size_t n) {
    png_src_t *s = png_get_io_ptr(p);
    if (n > s->len - s->at) png_error(p, "truncated PNG: the data ends inside the image");
    memcpy(out, s->b + s->at, n);
    s->at += n;
}

static void on_error(png_structp p, png_const_charp msg) {
    png_src_t *s = png_get_error_ptr(p);
    if (!strncmp(msg, "truncated", 9)) snprintf(s->msg, sizeof s->msg, "%s", msg);
    else snprintf(s->msg, sizeof s->msg, "corrupt PNG: %s", msg);
    png_longjmp(p, 1);
}

static void on_warning(png_structp p, png_const_charp msg) { (void)p; (void)msg; }

/* Converts one raw row (as libpng unpacks it) to out (n pixels of c channels). */
static void convert_row(const uint8_t *in, int n, int depth, int ct, const png_color *pal,
                        int npal, int c, uint8_t *out, uint8_t *scratch) {
    int bytes = depth / 8;
    switch (ct) {
    case PNG_COLOR_TYPE_GRAY:
        if (depth < 8) {
            int per = 8 / depth, mask = (1 << depth) - 1;
            int mul = depth == 1 ? 255 : depth == 2 ? 85 : 17;
            for (int i = 0; i < n; i++) {
                int v = (in[i / per] >> (8 - depth * (i % per + 1))) & mask;
                scratch[i] = (uint8_t)(v * mul);
            }
        } else if (depth == 8) {
            memcpy(scratch, in, (size_t)n);
        } else {
            for (int i = 0; i < n; i++) {
                int v = in[2 * i] << 8 | in[2 * i + 1];
                scratch[i] = (uint8_t)(v > 255 ? 255 : v);
            }
        }
        img_l_to_(scratch, n, c, out);
        return;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
        for (int i = 0; i < n; i++) scratch[i] = in[2 * bytes * i];
        img_l_to_(scratch, n, c, out);
        return;
    case PNG_COLOR_TYPE_PALETTE: {
        int per = 8 / depth, mask = (1 << depth) - 1;
        for (int i = 0; i < n; i++) {
            int v = depth == 8 ? in[i] : (in[i / per] >> (8 - depth * (i % per + 1))) & mask;
            png_color col = v < npal ? pal[v] : (png_color){0, 0, 0};
            scratch[3 * i] = col.red;
            scratch[3 * i + 1] = col.green;
            scratch[3 * i + 2] = col.blue;
        }
        img_rgb_to_(scratch, n, c, out);
        return;
    }
    default: { /* RGB, RGBA */
        int step = (ct == PNG_COLOR_TYPE_RGB ? 3 : 4) * bytes;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 3; k++) scratch[3 * i + k] = in[step * i + bytes * k];
        img_rgb_to_(scratch, n, c, out);
        return;
    }
    }
}

int img_decode_png(const uint8_t *bytes, size_t len, const img_limits_t *lim,
                   const img_request_t *req, img_buf_t *buf, img_region_t *out, err_t *e) {
    const img_limits_t L = lim ? *lim : img_default_limits();
    memset(out, 0, sizeof *out);
    int c = req->channels == 1 ? 1 : 3;
    png_src_t src = {bytes, len, 0, ""};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        return err_set(e, ERR_RUNTIME, "out of memory (libpng)");
    }
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        return err_set(e, ERR_INPUT, "%s", src.msg[0] ? src.msg : "corrupt PNG");
    }
    png_set_read_fn(p, &src, on_read);
    png_set_user_limits(p, (png_uint_32)L.max_side, (png_uint_32)L.max_side);
    png_read_info(p, info);
    png_uint_32 w32, h32;
    int depth, ct, il;
    png_get_IHDR(p, info, &w32, &h32, &depth, &ct, &il, NULL, NULL);
    int w = (int)w32, h = (int)h32;
    if (img_check_size_(w, h, &L, e)) {
        png_destroy_read_struct(&p, &info, NULL);
        return -1;
    }
    png_colorp pal = NULL;
    int npal = 0;
    if (ct == PNG_COLOR_TYPE_PALETTE && !png_get_PLTE(p, info, &pal, &npal)) npal = 0;
    int passes = png_set_interlace_handling(p);
    png_read_update_info(p, info);
    size_t rowbytes = png_get_rowbytes(p, info);
    int y0 = 0, y1 = h;
    if (req->x1 > 0) {
        y0 = req->y0 < 0 ? 0 : req->y0 > h - 1 ? h - 1 : req->y0;
        y1 = req->y1 > h ? h : req->y1 <= y0 ? y0 + 1 : req->y1;
    }
    /* interlaced: all raw rows at once (the passes revisit them); else one row */
    size_t raw = passes > 1 ? rowbytes * (size_t)h : rowbytes;
    size_t scratch = (size_t)w * 3;
    if (img_buf_reserve_(buf, 0, (size_t)(y1 - y0) * w * c, e) ||
        img_buf_reserve_(buf, 1, raw + scratch, e)) {
        png_destroy_read_struct(&p, &info, NULL);
        return -1;
    }
    uint8_t *sc = buf->tmp + raw;
    if (passes > 1) {
        for (int pass = 0; pass < passes; pass++)
            for (int y = 0; y < h; y++) png_read_row(p, buf->tmp + rowbytes * (size_t)y, NULL);
        for (int y = y0; y < y1; y++)
            convert_row(buf->tmp + rowbytes * (size_t)y, w, depth, ct, pal, npal, c,
                        buf->px + (size_t)(y - y0) * w * c, sc);
    } else {
        for (int y = 0; y < h; y++) {
            png_read_row(p, buf->tmp, NULL);
            if (y >= y0 && y < y1)
                convert_row(buf->tmp, w, depth, ct, pal, npal, c,
                            buf->px + (size_t)(y - y0) * w * c, sc);
        }
    }
    /* no png_read_end: PIL accepts a file whose chunks after the image data are missing */
    png_destroy_read_struct(&p, &info, NULL);
    *out = (img_region_t){buf->px, 0, y0, w, y1 - y0, c, w, h, 8};
    return 0;
}

bool img_have_png(void) { return true; }

#else /* !RUNNER_HAVE_PNG */

int img_decode_png(const uint8_t *bytes, size_t len, const img_limits_t *lim,
                   const img_request_t *req, img_buf_t *buf, img_region_t *out, err_t *e) {
    (void)bytes; (void)len; (void)lim; (void)req; (void)buf;
    memset(out, 0, sizeof *out);
    return err_set(e, ERR_INPUT, "this runner was built without PNG support (install "
                   "libpng-dev and rebuild)");
}

bool img_have_png(void) { return false; }

#endif
