/* image.h: decoding JPEG and PNG files from memory into 8-bit pixels the way PIL's
 * Image.open(f).convert("RGB") (or convert("L")) gives them, optionally only a region and,
 * for JPEG, at a reduced scale in the DCT domain.
 *
 * Entry points take (bytes, len), so a fuzzer can call them directly; they never read
 * files. Every size is checked against img_limits_t before anything is allocated, and an
 * error names the bound that was exceeded. A decoder returns 0, or -1 with ERR_INPUT and a
 * message without the file name (the caller prefixes it).
 *
 * What matches PIL (Pillow 9.4 on libjpeg-turbo 2.1, checked by tests/data/test_image.c):
 *   JPEG  libjpeg's defaults (islow IDCT, fancy upsampling), as PIL decodes without draft;
 *         1 component = L, 3 = RGB, 4 = CMYK stored inverted (Adobe), converted to RGB by
 *         PIL's cmyk2rgb. A file that ends before its EOI marker is an error, like PIL's
 *         "image file is truncated"; corrupt-data warnings are ignored, as PIL does.
 *   PNG   1-bit gray = 0/255, 2/4-bit gray scaled by bit replication, 16-bit gray is PIL's
 *         mode I and clips to 255, 16-bit colour keeps the high byte, palette is looked up,
 *         alpha and tRNS are dropped (convert("RGB") does not composite), gamma/ICC ignored.
 *   L     from colour: PIL's L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16.
 * EXIF orientation is ignored, as torchvision's ImageFolder does.
 *
 * Built without libjpeg or libpng (RUNNER_HAVE_JPEG / RUNNER_HAVE_PNG unset), the
 * decoders fail with "built without JPEG support" (ERR_INPUT).
 */
#ifndef RUNNER_DATA_IMAGE_H
#define RUNNER_DATA_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { IMG_UNKNOWN = 0, IMG_JPEG, IMG_PNG, IMG_OTHER } img_format_t;

/* Bounds checked before allocating. PIL refuses images above 2 x 89478485 pixels
 * (DecompressionBombError); the same bound is the default here. */
typedef struct img_limits {
    int64_t max_pixels;        /* width x height; default 178956970 */
    int max_side;              /* either dimension; default 65535 (JPEG's own maximum) */
    int max_scans;             /* progressive JPEG scans; default 1000 */
} img_limits_t;

img_limits_t img_default_limits(void);

/* What the header says. */
typedef struct img_info {
    img_format_t format;
    int width, height;
    int components;            /* as stored: 1 (L), 2 (LA), 3 (RGB), 4 (CMYK/RGBA) */
    bool supported;            /* JPEG or PNG, and this build can decode it */
    const char *format_name;   /* "JPEG", "PNG", "GIF", "BMP", "TIFF", "WebP", "PNM",
                                  "unknown" */
} img_info_t;

/* Identifies the format from the first bytes (content, not the file name, as PIL does) and
 * reads the dimensions from the header. A file that is not an image (or not one the build
 * decodes) gives -1 with a message saying what it looks like; dimensions above the limits
 * give -1 naming the limit. */
int img_probe(const uint8_t *bytes, size_t len, const img_limits_t *lim, img_info_t *info,
              err_t *e);

/* The format from the first bytes alone (16 are enough; PNG dimensions from the first 33
 * when given) without reading the rest of the header: what indexing a folder checks. A
 * file that is not a JPEG or PNG (or one this build cannot decode, or a PNG over the
 * limits) gives -1 with the reason. */
int img_sniff(const uint8_t *bytes, size_t len, const img_limits_t *lim, img_info_t *info,
              err_t *e);

/* What part of the image to decode. The rectangle is in full-resolution pixels; the
 * decoder may return a larger one (JPEG crops at block boundaries; PNG decodes whole
 * rows). scale_num in 1..8 asks JPEG for a DCT-domain reduction to scale_num/8 (PNG and
 * 8 decode at full size). */
typedef struct img_request {
    int x0, y0, x1, y1;        /* [x0, x1) x [y0, y1); x1 = 0 means the whole image */
    int scale_num;             /* 1..8 (0 = 8) */
    int channels;              /* 3: convert("RGB"), 1: convert("L") */
} img_request_t;

/* A decoded region: rows [y0, y0 + h) and columns [x0, x0 + w) of the image at the scale
 * it was decoded at (full_w x full_h = ceil(width * scale_num / 8) etc.). */
typedef struct img_region {
    uint8_t *px;               /* h x w x c, HWC */
    int x0, y0, w, h, c;
    int full_w, full_h;
    int scale_num;
} img_region_t;

/* Reusable decoder memory (one per thread); zero-initialise, free with img_buf_free. */
typedef struct img_buf {
    uint8_t *px;
    size_t cap;
    uint8_t *tmp;              /* raw rows (PNG, CMYK) */
    size_t tmp_cap;
} img_buf_t;

void img_buf_free(img_buf_t *b);

/* Decodes bytes (any supported format) as req asks into out (pixels in buf). */
int img_decode(const uint8_t *bytes, size_t len, const img_limits_t *lim,
               const img_request_t *req, img_buf_t *buf, img_region_t *out, err_t *e);

/* The format-specific decoders behind img_decode (fuzzing entry points). */
int img_decode_jpeg(const uint8_t *bytes, size_t len, const img_limits_t *lim,
                    const img_request_t *req, img_buf_t *buf, img_region_t *out, err_t *e);
int img_decode_png(const uint8_t *bytes, size_t len, const img_limits_t *lim,
                   const img_request_t *req, img_buf_t *buf, img_region_t *out, err_t *e);

/* Whether this build decodes JPEG / PNG. */
bool img_have_jpeg(void);
bool img_have_png(void);

/* ---- shared by the decoders (image.c) ---- */

/* Makes buf->px (which = 0) or buf->tmp (which = 1) hold n bytes, plus 16 of slack that
 * vector code may read (never write) past the last pixel. */
int img_buf_reserve_(img_buf_t *b, int which, size_t n, err_t *e);

/* Checks w x h against the limits; -1 with a message naming the bound. */
int img_check_size_(int64_t w, int64_t h, const img_limits_t *lim, err_t *e);

/* PIL's conversions of one row of n pixels to RGB (c = 3) or L (c = 1). */
void img_l_to_(const uint8_t *in, int n, int c, uint8_t *out);
void img_rgb_to_(const uint8_t *in, int n, int c, uint8_t *out);
void img_cmyk_inverted_to_(const uint8_t *in, int n, int c, uint8_t *out);

#ifdef __cplusplus
}
#endif
#endif
