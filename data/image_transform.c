/* image_transform.c: torchvision's RandomResizedCrop / Resize + CenterCrop / flip fused
 * with decoding, resampling as Pillow does (see image_transform.h for the contract).
 *
 * One axis of the resampling is described by axis_t: the source pixels the filter may use
 * ([lo, hi): the crop, as if the image had been cropped first), the box [in0, in1) mapped
 * onto out_total output pixels, and which out_total pixels are computed (out_off ..
 * out_off + size - 1; outside 0..out_total-1 they are the centre crop's zero padding).
 * Coefficients are Pillow's precompute_coeffs + normalize_coeffs_8bpc; the horizontal
 * pass writes 8-bit rows (clipped, as Pillow's intermediate image), the vertical pass
 * accumulates whole rows in int32 (vectorises), then clips.
 */
#include "data/image_transform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

typedef struct axis {
    int lo, hi;
    float in0, in1;
    int out_total, out_off;
} axis_t;

void img_work_free(img_work_t *w) {
    if (!w) return;
    img_buf_free(&w->dec);
    free(w->tmp);
    free(w->xb);
    free(w->yb);
    free(w->xk);
    free(w->yk);
    memset(w, 0, sizeof *w);
}

/* Python's round(): half to even (the default floating-point rounding mode). */
static int round_even(double v) { return (int)nearbyint(v); }

void img_rrc_params(const double scale[2], const double ratio[2], int width, int height,
                    rng_t *r, int *top, int *left, int *h, int *w) {
    double area = (double)width * height;
    double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    for (int t = 0; t < 10; t++) {
        double target = area * (scale[0] + (scale[1] - scale[0]) * rng_uniform_f64(r));
        double ar = exp(lr0 + (lr1 - lr0) * rng_uniform_f64(r));
        int cw = round_even(sqrt(target * ar)), ch = round_even(sqrt(target / ar));
        if (cw > 0 && cw <= width && ch > 0 && ch <= height) {
            *top = (int)rng_below(r, (uint32_t)(height - ch + 1));
            *left = (int)rng_below(r, (uint32_t)(width - cw + 1));
            *h = ch;
            *w = cw;
            return;
        }
    }
    /* fallback: the centre crop, clamped to the ratio range */
    double in_ratio = (double)width / height;
    double rmin = ratio[0] < ratio[1] ? ratio[0] : ratio[1];
    double rmax = ratio[0] < ratio[1] ? ratio[1] : ratio[0];
    int cw = width, ch = height;
    if (in_ratio < rmin) ch = round_even(cw / rmin);
    else if (in_ratio > rmax) cw = round_even(ch * rmax);
    *top = (height - ch) / 2;
    *left = (width - cw) / 2;
    *h = ch;
    *w = cw;
}

void img_resize_dims(int resize, int width, int height, int *rw, int *rh) {
    int s = width <= height ? width : height, l = width <= height ? height : width;
    int ns = resize, nl = (int)((double)resize * l / s);
    if (s == resize) nl = l;
    *rw = width <= height ? ns : nl;
    *rh = width <= height ? nl : ns;
}

/* Taps per output pixel for this axis (Pillow: ceil(support) * 2 + 1). */
static int ksize_of(const axis_t *a) {
    double scale = (double)(a->in1 - a->in0) / a->out_total;
    double fs = scale < 1.0 ? 1.0 : scale;
    return (int)ceil(fs) * 2 + 1;
}

/* Pillow's bilinear coefficients for outputs out_off .. out_off + n - 1: b[2i] = first
 * source pixel (absolute), b[2i + 1] = tap count, weights at k[i * ks]. Every output gets
 * the same count (the most any output needs, at most ks) with its window moved inside the
 * crop and the extra taps weighted 0, which changes no sum; outputs outside the resized
 * image (centre-crop padding) get all-zero weights. (A crop narrower than that count keeps
 * the exact counts.) */
static void coeffs(const axis_t *a, int n, int ks, int *b, int32_t *k, double *scratch) {
    int in_size = a->hi - a->lo, taps = 0;
    float in0 = a->in0 - (float)a->lo, in1 = a->in1 - (float)a->lo;
    double scale = (double)(in1 - in0) / a->out_total;
    double fs = scale < 1.0 ? 1.0 : scale, support = fs, ss = 1.0 / fs;
    double pre[64];
    for (int pass = 0; pass < 2; pass++) {
        bool fixed = pass == 1 && in_size >= taps;
        for (int i = 0; i < n; i++) {
            int xx = a->out_off + i;
            int32_t *kk = k + (size_t)i * ks;
            if (xx < 0 || xx >= a->out_total) {
                if (pass) {
                    memset(kk, 0, (size_t)ks * sizeof *kk);
                    b[2 * i] = a->lo;
                    b[2 * i + 1] = fixed ? taps : 0;
                }
                continue;
            }
            double center = in0 + (xx + 0.5) * scale, ww = 0.0;
            int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
            if (xmin < 0) xmin = 0;
            if (xmax > in_size) xmax = in_size;
            xmax -= xmin;
            if (!pass) {
                if (xmax > taps) taps = xmax;
                continue;
            }
            memset(kk, 0, (size_t)ks * sizeof *kk);
            double *w = ks <= 64 ? pre : scratch;
            for (int x = 0; x < xmax; x++) {
                double t = (x + xmin - center + 0.5) * ss;
                if (t < 0.0) t = -t;
                w[x] = t < 1.0 ? 1.0 - t : 0.0;
                ww += w[x];
            }
            int shift = fixed && xmin + taps > in_size ? xmin + taps - in_size : 0;
            for (int x = 0; x < xmax; x++) {
                double v = ww != 0.0 ? w[x] / ww : w[x];
                kk[x + shift] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
                                      : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
            }
            b[2 * i] = a->lo + xmin - shift;
            b[2 * i + 1] = fixed ? taps : xmax;
        }
    }
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

#if defined(__x86_64__)
#include <immintrin.h>
/* RGB outputs, one 4-lane vector per pixel (the 4th lane reads the next byte and is
 * dropped: the decode buffers have slack after their last pixel). Exact: the same int32
 * products and sums as the scalar loop. */
__attribute__((target("sse4.1")))
static void hpass3_sse41(const uint8_t *src, int sx0, const int *b, const int32_t *k, int ks,
                         int n, bool flip, uint8_t *dst) {
    const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
    for (int x = 0; x < n; x++) {
        const uint8_t *s = src + (size_t)(b[2 * x] - sx0) * 3;
        const int32_t *kk = k + (size_t)x * ks;
        __m128i acc = half;
        for (int t = 0; t < b[2 * x + 1]; t++) {
            int32_t v;
            memcpy(&v, s + 3 * t, 4);
            __m128i p = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(v));
            acc = _mm_add_epi32(acc, _mm_mullo_epi32(p, _mm_set1_epi32(kk[t])));
        }
        acc = _mm_srai_epi32(acc, PRECISION_BITS);
        __m128i p16 = _mm_packs_epi32(acc, acc);
        uint32_t o = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(p16, p16));
        uint8_t *d = dst + (size_t)(flip ? n - 1 - x : x) * 3;
        d[0] = (uint8_t)o;
        d[1] = (uint8_t)(o >> 8);
        d[2] = (uint8_t)(o >> 16);
    }
}
#endif

/* One row: n output pixels from src, whose first pixel is absolute column sx0. */
static void hpass(const uint8_t *src, int sx0, int c, const int *b, const int32_t *k, int ks,
                  int n, bool flip, uint8_t *dst) {
#if defined(__x86_64__)
    if (c == 3 && __builtin_cpu_supports("sse4.1")) {
        hpass3_sse41(src, sx0, b, k, ks, n, flip, dst);
        return;
    }
#endif
    for (int x = 0; x < n; x++) {
        const uint8_t *s = src + (size_t)(b[2 * x] - sx0) * c;
        const int32_t *kk = k + (size_t)x * ks;
        int cnt = b[2 * x + 1];
        uint8_t *d = dst + (size_t)(flip ? n - 1 - x : x) * c;
        for (int ch = 0; ch < c; ch++) {
            int32_t a = 1 << (PRECISION_BITS - 1);
            for (int t = 0; t < cnt; t++) a += s[c * t + ch] * kk[t];
            d[ch] = clip8(a);
        }
    }
}

/* The vertical pass of one output row: acc = sum over taps of rows[t] * k[t]; AVX2 where
 * the CPU has it (32-bit multiplies), SSE2 otherwise. */
__attribute__((target_clones("avx2", "default")))
static void vrow(const uint8_t *base, size_t stride, const int32_t *k, int cnt, size_t row,
                 int32_t *acc, uint8_t *d) {
    for (size_t i = 0; i < row; i++) acc[i] = 1 << (PRECISION_BITS - 1);
    for (int t = 0; t < cnt; t++) {
        const uint8_t *s = base + (size_t)t * stride;
        int32_t kt = k[t];
        for (size_t i = 0; i < row; i++) acc[i] += s[i] * kt;
    }
    for (size_t i = 0; i < row; i++) d[i] = clip8(acc[i]);
}

/* Grows the per-thread arrays for n outputs with kx / ky taps and rows temp rows. */
static int work_reserve(img_work_t *w, int n, int kx, int ky, size_t tmp_bytes, err_t *e) {
    size_t need = (size_t)n * (size_t)(kx > ky ? kx : ky);
    if (need > w->kcap) {
        int32_t *xk = realloc(w->xk, need * sizeof *xk);
        if (xk) w->xk = xk;
        int32_t *yk = xk ? realloc(w->yk, need * sizeof *yk) : NULL;
        if (yk) w->yk = yk;
        if (!xk || !yk) return err_set(e, ERR_RUNTIME, "out of memory (resampling)");
        w->kcap = need;
    }
    if ((size_t)n > w->bcap) {
        int *xb = realloc(w->xb, (size_t)n * 2 * sizeof *xb);
        if (xb) w->xb = xb;
        int *yb = xb ? realloc(w->yb, (size_t)n * 2 * sizeof *yb) : NULL;
        if (yb) w->yb = yb;
        if (!xb || !yb) return err_set(e, ERR_RUNTIME, "out of memory (resampling)");
        w->bcap = (size_t)n;
    }
    if (tmp_bytes > w->tmp_cap) {
        uint8_t *t = realloc(w->tmp, tmp_bytes);
        if (!t) return err_set(e, ERR_RUNTIME, "out of memory (%zu bytes, resampling)", tmp_bytes);
        w->tmp = t;
        w->tmp_cap = tmp_bytes;
    }
    return 0;
}

/* The rows [*y0, *y1) (absolute) the vertical taps read. */
static void rows_needed(const int *b, int n, int *y0, int *y1) {
    *y0 = 1 << 30;
    *y1 = -1;
    for (int i = 0; i < n; i++) {
        if (!b[2 * i + 1]) continue;
        if (b[2 * i] < *y0) *y0 = b[2 * i];
        if (b[2 * i] + b[2 * i + 1] > *y1) *y1 = b[2 * i] + b[2 * i + 1];
    }
    if (*y1 < 0) *y0 = *y1 = 0;
}

/* Both passes: src holds rows [sy0, ..) and columns [sx0, ..) (absolute) with stride
 * sstride bytes; out gets ox x oy pixels. The arrays in w are already filled. */
static int resample(const uint8_t *src, int sx0, int sy0, size_t sstride, int c,
                    const axis_t *ax, const axis_t *ay, int ox, int oy, bool flip,
                    uint8_t *out, img_work_t *w, err_t *e) {
    int kx = ksize_of(ax), ky = ksize_of(ay), r0, r1;
    rows_needed(w->yb, oy, &r0, &r1);
    size_t row = (size_t)ox * c, rows = (size_t)(r1 - r0);
    size_t acc_bytes = row * sizeof(int32_t);
    if (work_reserve(w, ox > oy ? ox : oy, kx, ky, rows * row + acc_bytes + 16, e)) return -1;
    int32_t *acc = (int32_t *)(void *)(w->tmp + ((rows * row + 15) & ~(size_t)15));
    for (int y = r0; y < r1; y++)
        hpass(src + (size_t)(y - sy0) * sstride, sx0, c, w->xb, w->xk, kx, ox, flip,
              w->tmp + (size_t)(y - r0) * row);
    for (int y = 0; y < oy; y++)
        vrow(w->tmp + (size_t)(w->yb[2 * y] - r0) * row, row, w->yk + (size_t)y * ky,
             w->yb[2 * y + 1], row, acc, out + (size_t)y * row);
    return 0;
}

/* Fills the coefficient arrays of both axes (sizes checked by work_reserve first). */
static int plan_axes(const axis_t *ax, const axis_t *ay, int ox, int oy, img_work_t *w,
                     err_t *e) {
    int kx = ksize_of(ax), ky = ksize_of(ay);
    int km = kx > ky ? kx : ky;
    double *scratch = NULL;
    if (km > 64 && !(scratch = malloc((size_t)km * sizeof *scratch)))
        return err_set(e, ERR_RUNTIME, "out of memory (resampling)");
    int rc = work_reserve(w, ox > oy ? ox : oy, kx, ky, 0, e);
    if (!rc) {
        coeffs(ax, ox, kx, w->xb, w->xk, scratch);
        coeffs(ay, oy, ky, w->yb, w->yk, scratch);
    }
    free(scratch);
    return rc;
}

int img_resize_box(const uint8_t *src, int sw, int sh, int c, int bx0, int by0, int bx1,
                   int by1, int ow, int oh, uint8_t *out, img_work_t *w, err_t *e) {
    if (bx0 < 0 || by0 < 0 || bx1 > sw || by1 > sh || bx0 >= bx1 || by0 >= by1 || ow < 1 || oh < 1)
        return err_set(e, ERR_INPUT, "img_resize_box: bad box");
    axis_t ax = {bx0, bx1, (float)bx0, (float)bx1, ow, 0}, ay = {by0, by1, (float)by0, (float)by1, oh, 0};
    if (plan_axes(&ax, &ay, ow, oh, w, e)) return -1;
    /* into the decoder's buffer, which has the slack the vector pass reads past the end */
    size_t bytes = (size_t)sw * sh * c;
    if (img_buf_reserve_(&w->dec, 0, bytes, e)) return -1;
    memcpy(w->dec.px, src, bytes);
    return resample(w->dec.px, 0, 0, (size_t)sw * c, c, &ax, &ay, ow, oh, false, out, w, e);
}

/* The centre crop's first output pixel in a resized side of n (negative: padding). */
static int centre_offset(int n, int size) {
    return size > n ? -((size - n) / 2) : round_even((n - size) / 2.0);
}

int img_transform(const img_tf_opts_t *o, const uint8_t *bytes, size_t len, bool train,
                  rng_t *r, uint8_t *out, img_work_t *w, img_tf_info_t *info, err_t *e) {
    img_info_t ii;
    if (img_probe(bytes, len, &o->limits, &ii, e)) return -1;
    int W = ii.width, H = ii.height, S = o->size;
    int top = 0, left = 0, ch = H, cw = W, otx, oty, offx, offy;
    if (train && o->rrc) {
        img_rrc_params(o->scale, o->ratio, W, H, r, &top, &left, &ch, &cw);
        otx = oty = S;
        offx = offy = 0;
    } else {
        img_resize_dims(o->resize, W, H, &otx, &oty);
        offx = centre_offset(otx, S);
        offy = centre_offset(oty, S);
    }
    bool flip = train && o->flip && rng_uniform(r) < 0.5f;
    /* the smallest power-of-two scale that keeps the output's pixels: libjpeg-turbo's
     * 1/2, 1/4, 1/8 IDCTs are SIMD, while its 3/8 .. 7/8 ones are plain C and slower than a
     * full-size decode (measured: 500x375 q90, 0.51 ms at 8/8, 0.91 at 7/8, 0.41 at 4/8) */
    int m = 8;
    if (o->dct_scaling && ii.format == IMG_JPEG)
        while (m > 1 && (int64_t)cw * (m / 2) >= 8 * (int64_t)otx &&
               (int64_t)ch * (m / 2) >= 8 * (int64_t)oty)
            m /= 2;
    /* both axes at the decode scale m/8 */
    int sw = (int)(((int64_t)W * m + 7) / 8), sh = (int)(((int64_t)H * m + 7) / 8);
    int lx = (int)((int64_t)left * m / 8), ly = (int)((int64_t)top * m / 8);
    int hx = (int)(((int64_t)(left + cw) * m + 7) / 8), hy = (int)(((int64_t)(top + ch) * m + 7) / 8);
    axis_t ax = {lx, hx < sw ? hx : sw, (float)((double)left * m / 8), (float)((double)(left + cw) * m / 8), otx, offx};
    axis_t ay = {ly, hy < sh ? hy : sh, (float)((double)top * m / 8), (float)((double)(top + ch) * m / 8), oty, offy};
    if (plan_axes(&ax, &ay, S, S, w, e)) return -1;
    int x0, x1, y0, y1;
    rows_needed(w->xb, S, &x0, &x1);
    rows_needed(w->yb, S, &y0, &y1);
    if (x1 <= x0 || y1 <= y0) /* every output pixel is padding: still decode (checks) */
        x0 = y0 = 0, x1 = y1 = 1;
    img_request_t req = {(int)((int64_t)x0 * 8 / m), (int)((int64_t)y0 * 8 / m),
                         (int)(((int64_t)x1 * 8 + m - 1) / m), (int)(((int64_t)y1 * 8 + m - 1) / m),
                         m, o->channels};
    img_region_t g;
    if (img_decode(bytes, len, &o->limits, &req, &w->dec, &g, e)) return -1;
    if (g.full_w != sw || g.full_h != sh || g.x0 > x0 || g.y0 > y0 || g.x0 + g.w < x1 ||
        g.y0 + g.h < y1)
        return err_set(e, ERR_RUNTIME, "internal: the decoder gave rows %d..%d, columns %d..%d "
                       "of %dx%d; %d..%d, %d..%d of %dx%d were needed", g.y0, g.y0 + g.h,
                       g.x0, g.x0 + g.w, g.full_w, g.full_h, y0, y1, x0, x1, sw, sh);
    if (resample(g.px, g.x0, g.y0, (size_t)g.w * g.c, g.c, &ax, &ay, S, S, flip, out, w, e))
        return -1;
    if (info) *info = (img_tf_info_t){W, H, top, left, ch, cw, flip, m};
    return 0;
}
