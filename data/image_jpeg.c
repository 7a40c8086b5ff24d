/* image_jpeg.c: JPEG decoding with libjpeg-turbo's libjpeg API (image.h).
 *
 * The libjpeg API rather than TurboJPEG because a training crop needs three things
 * TurboJPEG 2.1 lacks: DCT-domain scaling by any M/8 (not only the powers of two PIL's
 * draft mode uses), decoding only the crop's columns (jpeg_crop_scanline: no IDCT or
 * colour conversion outside them) and skipping the rows above the crop
 * (jpeg_skip_scanlines); rows below it are never decoded. At scale 8/8 the pixels are
 * those of a full decode with libjpeg's defaults, which is what PIL decodes (tested).
 *
 * Truncation: libjpeg inserts a fake end marker and only warns when the data ends early;
 * that warning is an error here (PIL: "image file is truncated"). Because rows below a
 * crop are not decoded, the end marker (FF D9) is also looked for after the first scan's
 * header: entropy-coded data cannot contain FF D9, so its absence means the file was cut,
 * whatever part of the image a crop needs (deterministic for every crop).
 */
#include "data/image.h"

#include <string.h>

#ifdef RUNNER_HAVE_JPEG
#include <setjmp.h>
#include <stdio.h>

#include <jerror.h>
#include <jpeglib.h>

typedef struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX + 64];
    int max_scans;
} jerr_t;

static void on_error(j_common_ptr c) {
    jerr_t *j = (jerr_t *)c->err;
    char m[JMSG_LENGTH_MAX];
    (*c->err->format_message)(c, m);
    snprintf(j->msg, sizeof j->msg, "corrupt JPEG: %s", m);
    longjmp(j->jb, 1);
}

/* Warnings are ignored, as PIL ignores them, except running out of data. */
static void on_message(j_common_ptr c, int level) {
    jerr_t *j = (jerr_t *)c->err;
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
        snprintf(j->msg, sizeof j->msg, "truncated JPEG: the data ends inside the image");
        longjmp(j->jb, 1);
    }
}

static void on_output(j_common_ptr c) { (void)c; }

/* Bounds the work a progressive file can ask for (thousands of scans). */
static void on_progress(j_common_ptr c) {
    j_decompress_ptr d = (j_decompress_ptr)c;
    jerr_t *j = (jerr_t *)c->err;
    if (d->input_scan_number > j->max_scans) {
        snprintf(j->msg, sizeof j->msg, "the JPEG has more than %d scans (image limit "
                 "max_scans)", j->max_scans);
        longjmp(j->jb, 1);
    }
}

/* 1 if FF D9 occurs in b[from, len). */
static int has_eoi(const uint8_t *b, size_t from, size_t len) {
    for (size_t i = len; i >= from + 2; i--)
        if (b[i - 2] == 0xFF && b[i - 1] == 0xD9) return 1;
    return 0;
}

static int floor_scaled(int v, int m) { return (int)(((int64_t)v * m) / 8); }
static int ceil_scaled(int v, int m) { return (int)(((int64_t)v * m + 7) / 8); }

int img_decode_jpeg(const uint8_t *bytes, size_t len, const img_limits_t *lim,
                    const img_request_t *req, img_buf_t *buf, img_region_t *out, err_t *e) {
    const img_limits_t L = lim ? *lim : img_default_limits();
    memset(out, 0, sizeof *out);
    int c = req->channels == 1 ? 1 : 3;
    int m = req->scale_num >= 1 && req->scale_num <= 8 ? req->scale_num : 8;
    if (len > (size_t)0x7fffffff)
        return err_set(e, ERR_INPUT, "the JPEG file is larger than 2 GiB");
    struct jpeg_decompress_struct ci;
    struct jpeg_progress_mgr pm;
    jerr_t je;
    memset(&je, 0, sizeof je);
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = on_error;
    je.pub.emit_message = on_message;
    je.pub.output_message = on_output;
    je.max_scans = L.max_scans;
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&ci);
        return err_set(e, ERR_INPUT, "%s", je.msg);
    }
    jpeg_create_decompress(&ci);
    pm.progress_monitor = on_progress;
    ci.progress = &pm;
    jpeg_mem_src(&ci, bytes, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    int w = (int)ci.image_width, h = (int)ci.image_height, nc = ci.num_components;
    int rc = img_check_size_(w, h, &L, e);
    if (!rc && !has_eoi(bytes, len - ci.src->bytes_in_buffer, len))
        rc = err_set(e, ERR_INPUT, "truncated JPEG: the file (%zu bytes) ends without its end "
                     "marker", len);
    if (!rc && nc != 1 && nc != 3 && nc != 4)
        rc = err_set(e, ERR_INPUT, "a JPEG with %d colour components (1, 3 or 4 are decoded)",
                     nc);
    if (rc) {
        jpeg_destroy_decompress(&ci);
        return -1;
    }
    ci.out_color_space = nc == 1 ? JCS_GRAYSCALE : nc == 3 ? JCS_RGB : JCS_CMYK;
    ci.scale_num = (unsigned)m;
    ci.scale_denom = 8;
    jpeg_start_decompress(&ci);
    int fw = (int)ci.output_width, fh = (int)ci.output_height;
    int x0 = 0, y0 = 0, x1 = fw, y1 = fh;
    if (req->x1 > 0) {
        x0 = floor_scaled(req->x0, m);
        y0 = floor_scaled(req->y0, m);
        x1 = ceil_scaled(req->x1, m);
        y1 = ceil_scaled(req->y1, m);
        /* a pixel of margin: the chroma upsampler treats the decoded region's edge as the
         * image's edge, so the needed pixels must not lie on it */
        x0 = x0 > 0 ? x0 - 1 : 0;
        x1 = x1 + 1 < fw ? x1 + 1 : fw;
        y1 = y1 + 1 < fh ? y1 + 1 : fh;
        if (x0 >= x1) x0 = x1 > 0 ? x1 - 1 : 0;
        if (y0 >= y1) y0 = y1 > 0 ? y1 - 1 : 0;
    }
    JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
    if ((int)cw < fw) jpeg_crop_scanline(&ci, &xoff, &cw);
    if (y0 > 0) y0 = (int)jpeg_skip_scanlines(&ci, (JDIMENSION)y0);
    int rows = y1 - y0, cols = (int)cw;
    int native = nc == 4 ? 4 : nc; /* L, RGB or CMYK bytes per pixel */
    bool direct = native == c;
    if (img_buf_reserve_(buf, 0, (size_t)rows * cols * c, e) ||
        (!direct && img_buf_reserve_(buf, 1, (size_t)cols * native * 16, e))) {
        jpeg_destroy_decompress(&ci);
        return -1;
    }
    while ((int)ci.output_scanline < y1) {
        int r = (int)ci.output_scanline - y0, want = y1 - (int)ci.output_scanline;
        if (want > 16) want = 16;
        JSAMPROW ptrs[16];
        for (int k = 0; k < want; k++)
            ptrs[k] = direct ? buf->px + (size_t)(r + k) * cols * c
                             : buf->tmp + (size_t)k * cols * native;
        int got = (int)jpeg_read_scanlines(&ci, ptrs, (JDIMENSION)want);
        if (got <= 0) {
            jpeg_destroy_decompress(&ci);
            return err_set(e, ERR_INPUT, "truncated JPEG: no data for row %d", r + y0);
        }
        for (int k = 0; !direct && k < got; k++) {
            uint8_t *dst = buf->px + (size_t)(r + k) * cols * c;
            if (native == 1) img_l_to_(ptrs[k], cols, c, dst);
            else if (native == 3) img_rgb_to_(ptrs[k], cols, c, dst);
            else img_cmyk_inverted_to_(ptrs[k], cols, c, dst);
        }
    }
    jpeg_abort_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    *out = (img_region_t){buf->px, (int)xoff, y0, cols, rows, c, fw, fh, m};
    return 0;
}

bool img_have_jpeg(void) { return true; }

#else /* !RUNNER_HAVE_JPEG */

int img_decode_jpeg(const uint8_t *bytes, size_t len, const img_limits_t *lim,
                    const img_request_t *req, img_buf_t *buf, img_region_t *out, err_t *e) {
    (void)bytes; (void)len; (void)lim; (void)req; (void)buf;
    memset(out, 0, sizeof *out);
    return err_set(e, ERR_INPUT, "this runner was built without JPEG support (install "
                   "libjpeg62-turbo-dev and rebuild)");
}

bool img_have_jpeg(void) { return false; }

#endif
