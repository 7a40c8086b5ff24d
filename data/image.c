/* image.c: format detection and header parsing (img_probe), the size limits, the decoder
 * dispatch, and PIL's pixel conversions shared by the JPEG and PNG decoders (image.h).
 * The decoders themselves are image_jpeg.c and image_png.c.
 */
#include "data/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

img_limits_t img_default_limits(void) {
    img_limits_t l = {178956970, 65535, 1000};
    return l;
}

void img_buf_free(img_buf_t *b) {
    if (!b) return;
    free(b->px);
    free(b->tmp);
    memset(b, 0, sizeof *b);
}

int img_buf_reserve_(img_buf_t *b, int which, size_t n, err_t *e) {
    n += 16; /* slack: vector code may read a few bytes past the last pixel */
    uint8_t **p = which ? &b->tmp : &b->px;
    size_t *cap = which ? &b->tmp_cap : &b->cap;
    if (n <= *cap) return 0;
    size_t c = *cap ? *cap : 65536;
    while (c < n) c *= 2;
    uint8_t *q = realloc(*p, c);
    if (!q) return err_set(e, ERR_RUNTIME, "out of memory (%zu bytes for decoded pixels)", c);
    *p = q;
    *cap = c;
    return 0;
}

int img_check_size_(int64_t w, int64_t h, const img_limits_t *lim, err_t *e) {
    img_limits_t d = img_default_limits();
    if (!lim) lim = &d;
    if (w < 1 || h < 1) return err_set(e, ERR_INPUT, "the header gives a %lldx%lld image",
                                       (long long)w, (long long)h);
    if (w > lim->max_side || h > lim->max_side)
        return err_set(e, ERR_INPUT, "the image is %lldx%lld, more than the maximum side of %d "
                       "pixels (image limit max_side)", (long long)w, (long long)h,
                       lim->max_side);
    if (w * h > lim->max_pixels)
        return err_set(e, ERR_INPUT, "the image is %lldx%lld = %lld pixels, more than the "
                       "maximum of %lld (image limit max_pixels, PIL's decompression-bomb "
                       "bound)", (long long)w, (long long)h, (long long)(w * h),
                       (long long)lim->max_pixels);
    return 0;
}

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t be32(const uint8_t *p) { return be16(p) << 16 | be16(p + 2); }

/* The SOF segment's height, width and components; -1 when the markers end first. */
static int jpeg_header(const uint8_t *b, size_t len, img_info_t *info, err_t *e) {
    size_t i = 2;
    while (i + 4 <= len) {
        if (b[i] != 0xFF) return err_set(e, ERR_INPUT, "corrupt JPEG: no marker at byte %zu", i);
        uint8_t m = b[i + 1];
        if (m == 0xFF) { i++; continue; }              /* fill byte */
        if (m == 0xD8 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) { i += 2; continue; }
        if (m == 0xD9 || m == 0xDA)
            return err_set(e, ERR_INPUT, "corrupt JPEG: no frame header (SOF) before the %s",
                           m == 0xDA ? "scan" : "end marker");
        size_t seg = be16(b + i + 2);
        bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
        if (sof) {
            if (i + 10 > len) break;
            info->height = (int)be16(b + i + 5);
            info->width = (int)be16(b + i + 7);
            info->components = b[i + 9];
            return 0;
        }
        if (seg < 2) return err_set(e, ERR_INPUT, "corrupt JPEG: marker segment of length %zu "
                                    "at byte %zu", seg, i);
        i += 2 + seg;
    }
    return err_set(e, ERR_INPUT, "truncated JPEG: the file (%zu bytes) ends before the frame "
                   "header", len);
}

static int png_header(const uint8_t *b, size_t len, img_info_t *info, err_t *e) {
    if (len < 33 || memcmp(b + 12, "IHDR", 4) || be32(b + 8) != 13)
        return err_set(e, ERR_INPUT, "%s PNG: no IHDR chunk after the signature",
                       len < 33 ? "truncated" : "corrupt");
    uint32_t w = be32(b + 16), h = be32(b + 20);
    int ct = b[25];
    static const int comps[7] = {1, 0, 3, 1, 2, 0, 4};
    if (ct > 6 || !comps[ct] || w > 0x7fffffffu || h > 0x7fffffffu)
        return err_set(e, ERR_INPUT, "corrupt PNG: colour type %d, %ux%u in the header", ct, w,
                       h);
    info->width = (int)w;
    info->height = (int)h;
    info->components = comps[ct];
    return 0;
}

/* What the first bytes look like, for the message about a file that is not an image. */
static void describe_start(const uint8_t *b, size_t len, char *out, size_t cap) {
    size_t n = len < 12 ? len : 12, text = 0;
    for (size_t i = 0; i < n; i++)
        text += (b[i] >= 0x20 && b[i] < 0x7f) || b[i] == '\n' || b[i] == '\r' || b[i] == '\t';
    if (len == 0) {
        snprintf(out, cap, "the file is empty");
        return;
    }
    if (text == n) {
        char t[16];
        for (size_t i = 0; i < n; i++) t[i] = (char)(b[i] < 0x20 ? ' ' : b[i]);
        while (n > 0 && t[n - 1] == ' ') n--;
        t[n] = 0;
        snprintf(out, cap, "it starts with the text \"%s\"", t);
        return;
    }
    int k = snprintf(out, cap, "it starts with bytes");
    for (size_t i = 0; i < n && i < 8 && k > 0 && (size_t)k < cap; i++)
        k += snprintf(out + k, cap - (size_t)k, " %02x", b[i]);
}

/* The format from the magic bytes; -1 (message) for anything but JPEG and PNG. */
static int identify(const uint8_t *b, size_t len, img_info_t *info, err_t *e) {
    memset(info, 0, sizeof *info);
    info->format_name = "unknown";
    if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) {
        info->format = IMG_JPEG;
        info->format_name = "JPEG";
        info->supported = img_have_jpeg();
    } else if (len >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) {
        info->format = IMG_PNG;
        info->format_name = "PNG";
        info->supported = img_have_png();
    } else {
        info->format = IMG_OTHER;
        if (len >= 6 && (!memcmp(b, "GIF87a", 6) || !memcmp(b, "GIF89a", 6)))
            info->format_name = "GIF";
        else if (len >= 2 && b[0] == 'B' && b[1] == 'M') info->format_name = "BMP";
        else if (len >= 4 && (!memcmp(b, "II*\0", 4) || !memcmp(b, "MM\0*", 4)))
            info->format_name = "TIFF";
        else if (len >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4))
            info->format_name = "WebP";
        else if (len >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7') info->format_name = "PNM";
        else info->format = IMG_UNKNOWN;
        if (info->format == IMG_UNKNOWN) {
            char what[96];
            describe_start(b, len, what, sizeof what);
            return err_set(e, ERR_INPUT, "not an image (%s): expected a JPEG or PNG file",
                           what);
        }
        return err_set(e, ERR_INPUT, "a %s image: only JPEG and PNG are decoded; convert it "
                       "to PNG or JPEG", info->format_name);
    }
    if (!info->supported)
        return err_set(e, ERR_INPUT, "this runner was built without %s support (install "
                       "%s and rebuild)", info->format_name,
                       info->format == IMG_JPEG ? "libjpeg62-turbo-dev" : "libpng-dev");
    return 0;
}

int img_sniff(const uint8_t *b, size_t len, const img_limits_t *lim, img_info_t *info,
              err_t *e) {
    if (identify(b, len, info, e)) return -1;
    if (info->format == IMG_PNG && len >= 33)
        return png_header(b, len, info, e) || img_check_size_(info->width, info->height, lim, e)
                   ? -1 : 0;
    return 0;
}

int img_probe(const uint8_t *b, size_t len, const img_limits_t *lim, img_info_t *info,
              err_t *e) {
    if (identify(b, len, info, e)) return -1;
    if (info->format == IMG_JPEG ? jpeg_header(b, len, info, e) : png_header(b, len, info, e))
        return -1;
    return img_check_size_(info->width, info->height, lim, e);
}

int img_decode(const uint8_t *bytes, size_t len, const img_limits_t *lim,
               const img_request_t *req, img_buf_t *buf, img_region_t *out, err_t *e) {
    img_info_t info;
    if (img_probe(bytes, len, lim, &info, e)) return -1;
    return info.format == IMG_JPEG ? img_decode_jpeg(bytes, len, lim, req, buf, out, e)
                                   : img_decode_png(bytes, len, lim, req, buf, out, e);
}

/* ---- PIL's conversions (Pillow's Convert.c, checked against PIL in the tests) ---- */

static inline uint8_t l24(const uint8_t *rgb) {
    return (uint8_t)((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

void img_l_to_(const uint8_t *in, int n, int c, uint8_t *out) {
    if (c == 1) {
        memmove(out, in, (size_t)n);
        return;
    }
    for (int i = n - 1; i >= 0; i--) /* backwards: in and out may be the same row */
        out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = in[i];
}

void img_rgb_to_(const uint8_t *in, int n, int c, uint8_t *out) {
    if (c == 3) {
        memmove(out, in, (size_t)n * 3);
        return;
    }
    for (int i = 0; i < n; i++) out[i] = l24(in + 3 * i);
}

void img_cmyk_inverted_to_(const uint8_t *in, int n, int c, uint8_t *out) {
    for (int i = 0; i < n; i++) {
        /* PIL reads Adobe CMYK as "CMYK;I" (inverted), then cmyk2rgb */
        int nk = 255 - (255 - in[4 * i + 3]);
        uint8_t rgb[3];
        for (int k = 0; k < 3; k++) {
            int t = (255 - in[4 * i + k]) * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            rgb[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
        if (c == 3) memcpy(out + 3 * i, rgb, 3);
        else out[i] = l24(rgb);
    }
}
