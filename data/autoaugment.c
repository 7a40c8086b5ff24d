/* autoaugment.c: RandAugment / TrivialAugmentWide ops on uint8 HWC images, the torchvision
 * magnitude tables and the resolved op table (see autoaugment.h).
 *
 * Each op follows torchvision 0.14's tensor implementation on uint8 step by step, in the
 * same float32 operations (the per-pixel formulas are in util/augops.h, shared with the
 * GPU kernel); the affine matrices are computed in double as torchvision's Python does
 * (_get_inverse_affine_matrix) and cast to float32 as torch.tensor does. Statistics
 * (histograms, minima, the grey mean) are exact integers; the grey mean is divided in
 * float32 as torch.mean does (exactly torch's for images up to 65793 pixels, where torch's
 * float32 sum of integers is still exact).
 * Not here: the draws (util/augops.h aa_draw), the loader hook (loader.c).
 */
#include "data/autoaugment.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

float autoaug_linspace(double start, double end, int steps, int i) {
    float s = (float)start, e = (float)end;
    if (steps == 1) return s;
    float step = (e - s) / (float)(steps - 1);
    int half = steps / 2, nvec = steps / 16 * 16;
    if (i < nvec) {
        int blk = i / 8 * 8, k = i % 8;
        float base = blk < half ? fmaf(step, (float)blk, s) : fmaf(-step, (float)(steps - 1 - blk), e);
        return base + (float)k * step;
    }
    return i < half ? fmaf(step, (float)i, s) : fmaf(-step, (float)(steps - 1 - i), e);
}

float autoaug_magnitude(autoaug_kind_t kind, int op, int bin, int h, int w) {
    bool wide = kind == AUTOAUG_TRIVIAL;
    switch (op) {
    case AA_SHEAR_X:
    case AA_SHEAR_Y:
        return autoaug_linspace(0.0, wide ? 0.99 : 0.3, AA_BINS, bin);
    case AA_TRANSLATE_X:
        return autoaug_linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * w, AA_BINS, bin);
    case AA_TRANSLATE_Y:
        return autoaug_linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * h, AA_BINS, bin);
    case AA_ROTATE:
        return autoaug_linspace(0.0, wide ? 135.0 : 30.0, AA_BINS, bin);
    case AA_BRIGHTNESS:
    case AA_COLOR:
    case AA_CONTRAST:
    case AA_SHARPNESS:
        return autoaug_linspace(0.0, wide ? 0.99 : 0.9, AA_BINS, bin);
    case AA_POSTERIZE: {
        /* 8 - (arange(31) / ((31 - 1) / 4 or 6)).round().int(), in float32 */
        float q = (float)bin / (wide ? 5.0f : 7.5f);
        return (float)(8 - (int)rintf(q));
    }
    case AA_SOLARIZE:
        return autoaug_linspace(255.0, 0.0, AA_BINS, bin);
    default:
        return 0.0f;
    }
}

/* torchvision's _get_inverse_affine_matrix (inverted = True), in double as its Python does
 * (math.radians is x * (pi / 180)). */
static void inverse_affine(double cx, double cy, double angle, double tx, double ty, double shx,
                           double shy, double m[6]) {
    const double deg = 3.141592653589793 / 180.0;
    double rot = angle * deg, sx = shx * deg, sy = shy * deg;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d, m[1] = -b, m[2] = 0.0, m[3] = -c, m[4] = a, m[5] = 0.0;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

void autoaug_resolve(int op, double m, int h, int w, aa_entry_t *e) {
    memset(e, 0, sizeof *e);
    e->op = op;
    double mat[6], cx = 0.0, cy = 0.0, angle = 0.0, tx = 0.0, ty = 0.0, shx = 0.0, shy = 0.0;
    const double rad2deg = 180.0 / 3.141592653589793;
    switch (op) {
    case AA_SHEAR_X:
    case AA_SHEAR_Y:
        /* center=[0, 0] in pixel coordinates: relative to the image centre (-w/2, -h/2) */
        cx = -(double)w * 0.5, cy = -(double)h * 0.5;
        if (op == AA_SHEAR_X) shx = atan(m) * rad2deg;
        else shy = atan(m) * rad2deg;
        break;
    case AA_TRANSLATE_X:
        tx = (double)(int)m;
        break;
    case AA_TRANSLATE_Y:
        ty = (double)(int)m;
        break;
    case AA_ROTATE:
        angle = -m;   /* F.rotate passes -angle to the inverse matrix */
        break;
    case AA_BRIGHTNESS:
    case AA_COLOR:
    case AA_CONTRAST:
    case AA_SHARPNESS: {
        double ratio = 1.0 + m;
        e->f[0] = (float)ratio;
        e->f[1] = (float)(1.0 - ratio);
        return;
    }
    case AA_POSTERIZE: {
        int bits = (int)m;
        e->ival = (int32_t)((0xffu << (8 - bits)) & 0xffu);
        return;
    }
    case AA_SOLARIZE:
        e->f[0] = (float)m;
        return;
    default:
        return;
    }
    inverse_affine(cx, cy, angle, tx, ty, shx, shy, mat);
    float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    for (int k = 0; k < 3; k++) {
        e->f[2 * k] = (float)mat[k] / hw;
        e->f[2 * k + 1] = (float)mat[3 + k] / hh;
    }
}

void autoaug_build_table(autoaug_kind_t kind, int h, int w, aa_entry_t *table) {
    for (int op = 0; op < AA_NUM_OPS; op++)
        for (int bin = 0; bin < AA_BINS; bin++)
            for (int neg = 0; neg < 2; neg++) {
                double m = aa_has_bins(op) ? (double)autoaug_magnitude(kind, op, bin, h, w) : 0.0;
                if (neg && aa_signed(op)) m *= -1.0;
                autoaug_resolve(op, m, h, w, &table[aa_index(op, bin, neg)]);
            }
}

static void affine(const float *R, const uint8_t *src, uint8_t *dst, int c, int h, int w) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int sx, sy;
            uint8_t *d = dst + ((size_t)y * w + x) * c;
            if (aa_affine_src(R, x, y, w, h, &sx, &sy)) memcpy(d, src + ((size_t)sy * w + sx) * c, (size_t)c);
            else memset(d, 0, (size_t)c);
        }
}

/* Sum over pixels of the grey value (or of the only channel). */
static int64_t grey_sum(const uint8_t *img, int c, size_t px) {
    int64_t s = 0;
    for (size_t i = 0; i < px; i++) s += c == 3 ? aa_gray(img[3 * i], img[3 * i + 1], img[3 * i + 2]) : img[i * c];
    return s;
}

static void sharpness(const aa_entry_t *e, const uint8_t *src, uint8_t *dst, int c, int h, int w) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int ch = 0; ch < c; ch++) {
                size_t at = ((size_t)y * w + x) * c + ch;
                int blurred = src[at];
                if (y > 0 && y < h - 1 && x > 0 && x < w - 1) {
                    int s = 4 * src[at];
                    for (int dy = -1; dy <= 1; dy++)
                        for (int dx = -1; dx <= 1; dx++) s += src[at + ((ptrdiff_t)dy * w + dx) * c];
                    blurred = aa_blur_round(s);
                }
                dst[at] = aa_blend(e->f[0], e->f[1], (float)src[at], (float)blurred);
            }
}

/* torchvision _scale_channel: the equalisation lookup of one channel. */
static void equalize(uint8_t *img, int c, int ch, size_t px) {
    int64_t hist[256] = {0};
    for (size_t i = 0; i < px; i++) hist[img[i * c + ch]]++;
    int last = 255;
    while (last > 0 && !hist[last]) last--;
    int64_t step = ((int64_t)px - hist[last]) / 255;
    if (step == 0) return;
    uint8_t lut[256];
    int64_t cum = 0;
    lut[0] = 0;
    for (int v = 1; v < 256; v++) {
        cum += hist[v - 1];
        int64_t q = (cum + step / 2) / step;
        lut[v] = (uint8_t)(q > 255 ? 255 : q);
    }
    for (size_t i = 0; i < px; i++) img[i * c + ch] = lut[img[i * c + ch]];
}

void autoaug_apply_entry(const aa_entry_t *e, uint8_t *img, uint8_t *tmp, int c, int h, int w) {
    size_t px = (size_t)h * w, n = px * c;
    switch (e->op) {
    case AA_SHEAR_X:
    case AA_SHEAR_Y:
    case AA_TRANSLATE_X:
    case AA_TRANSLATE_Y:
    case AA_ROTATE:
        affine(e->f, img, tmp, c, h, w);
        memcpy(img, tmp, n);
        return;
    case AA_BRIGHTNESS:
        for (size_t i = 0; i < n; i++) img[i] = aa_blend(e->f[0], e->f[1], (float)img[i], 0.0f);
        return;
    case AA_COLOR:
        if (c != 3) return;   /* torchvision leaves 1-channel images alone */
        for (size_t i = 0; i < px; i++) {
            uint8_t *p = img + 3 * i;
            float g = (float)aa_gray(p[0], p[1], p[2]);
            for (int k = 0; k < 3; k++) p[k] = aa_blend(e->f[0], e->f[1], (float)p[k], g);
        }
        return;
    case AA_CONTRAST: {
        float mean = (float)grey_sum(img, c, px) / (float)px;
        for (size_t i = 0; i < n; i++) img[i] = aa_blend(e->f[0], e->f[1], (float)img[i], mean);
        return;
    }
    case AA_SHARPNESS:
        if (h <= 2 || w <= 2) return;
        sharpness(e, img, tmp, c, h, w);
        memcpy(img, tmp, n);
        return;
    case AA_POSTERIZE:
        for (size_t i = 0; i < n; i++) img[i] = (uint8_t)(img[i] & e->ival);
        return;
    case AA_SOLARIZE:
        for (size_t i = 0; i < n; i++)
            if ((float)img[i] >= e->f[0]) img[i] = (uint8_t)(255 - img[i]);
        return;
    case AA_AUTOCONTRAST:
        for (int ch = 0; ch < c; ch++) {
            int mn = 255, mx = 0;
            for (size_t i = 0; i < px; i++) {
                int v = img[i * c + ch];
                mn = v < mn ? v : mn;
                mx = v > mx ? v : mx;
            }
            for (size_t i = 0; i < px; i++) img[i * c + ch] = aa_autocontrast(img[i * c + ch], mn, mx);
        }
        return;
    case AA_EQUALIZE:
        for (int ch = 0; ch < c; ch++) equalize(img, c, ch, px);
        return;
    default:
        return;
    }
}

void autoaug_apply(const autoaug_opts_t *o, const aa_entry_t *table, uint64_t seed, int64_t epoch,
                   int64_t index, uint8_t *img, uint8_t *tmp, int c, int h, int w) {
    int32_t ops[AA_MAX_OPS];
    int n = aa_draw(seed, epoch, index, o->kind, o->num_ops, o->magnitude, ops);
    for (int i = 0; i < n; i++) autoaug_apply_entry(&table[ops[i]], img, tmp, c, h, w);
}
