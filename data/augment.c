/* augment.c: random crop, horizontal flip, rotation and normalisation of uint8 HWC images.
 *
 * Rotation follows torchvision's tensor path (F.rotate on a uint8 tensor, bilinear,
 * fill 0): the output pixel (x, y) samples the source at
 *   sx = cos(a) dx - sin(a) dy + (W-1)/2,  sy = sin(a) dx + cos(a) dy + (H-1)/2,
 * with dx = x - (W-1)/2, dy = y - (H-1)/2 and a the angle (counter-clockwise on screen);
 * bilinear with out-of-image neighbours counting as 0 (grid_sample, zeros padding), then,
 * like torchvision's fill mask, multiplied by the in-image weight, and rounded half to even.
 * Not here: how samples are grouped into batches (loader.c).
 */
#include "data/augment.h"

#include <math.h>
#include <string.h>

#include "util/rng.h"

void augment_out_shape(const augment_opts_t *o, int h, int w, int *oh, int *ow) {
    if (o->random_crop) {
        *oh = o->crop_size;
        *ow = o->crop_size;
    } else {
        *oh = h;
        *ow = w;
    }
}

augment_params_t augment_draw(const augment_opts_t *o, int h, int w, uint64_t seed,
                              int64_t epoch, int64_t index) {
    augment_params_t p = {0, 0, false, 0.0};
    rng_t r = rng_make(seed, RNG_STREAM_AUGMENT, (uint64_t)epoch, (uint64_t)index);
    if (o->random_crop) {
        int ph = h + 2 * o->crop_padding, pw = w + 2 * o->crop_padding;
        p.top = ph >= o->crop_size ? (int)rng_below(&r, (uint32_t)(ph - o->crop_size + 1)) : 0;
        p.left = pw >= o->crop_size ? (int)rng_below(&r, (uint32_t)(pw - o->crop_size + 1)) : 0;
    }
    if (o->horizontal_flip) p.flip = rng_uniform(&r) < 0.5f;
    if (o->rotation != 0.0) p.angle = -o->rotation + 2.0 * o->rotation * rng_uniform_f64(&r);
    return p;
}

augment_params_t augment_eval_params(const augment_opts_t *o, int h, int w) {
    augment_params_t p = {0, 0, false, 0.0};
    if (o->random_crop) {
        /* centre crop in padded coordinates (torchvision CenterCrop rounds the offset) */
        p.top = o->crop_padding + (int)lround((h - o->crop_size) / 2.0);
        p.left = o->crop_padding + (int)lround((w - o->crop_size) / 2.0);
    }
    return p;
}

/* Crop (zero outside the image) and optional flip: src h x w -> dst oh x ow. */
static void crop_flip(const augment_opts_t *o, const augment_params_t *p, const uint8_t *src,
                      int c, int h, int w, int oh, int ow, uint8_t *dst) {
    int pad = o->random_crop ? o->crop_padding : 0;
    for (int y = 0; y < oh; y++) {
        int sy = p->top + y - pad;
        uint8_t *row = dst + (size_t)y * ow * c;
        if (sy < 0 || sy >= h) {
            memset(row, 0, (size_t)ow * c);
            continue;
        }
        const uint8_t *srow = src + (size_t)sy * w * c;
        for (int x = 0; x < ow; x++) {
            int sx = p->left + (p->flip ? ow - 1 - x : x) - pad;
            if (sx < 0 || sx >= w) memset(row + (size_t)x * c, 0, (size_t)c);
            else memcpy(row + (size_t)x * c, srow + (size_t)sx * c, (size_t)c);
        }
    }
}

/* floor for |v| < 2^31 without a libm call (the x86-64 baseline has no SSE4.1 round). */
static inline int floor_int(float v) {
    int i = (int)v;
    return (v < (float)i) ? i - 1 : i;
}

/* Round half to even for 0 <= v < 2^23, in the default rounding mode (no libm call). */
static inline float round_even(float v) { return (v + 8388608.0f) - 8388608.0f; }

/* Rotates src (h x w x c) by angle degrees into dst (see the file comment). */
static void rotate(const uint8_t *src, int c, int h, int w, double angle, uint8_t *dst) {
    double rad = angle * 3.14159265358979323846 / 180.0;
    float cs = (float)cos(rad), sn = (float)sin(rad);
    float cx = (w - 1) * 0.5f, cy = (h - 1) * 0.5f;
    size_t row = (size_t)w * c;
    for (int y = 0; y < h; y++) {
        float dy = (float)y - cy;
        for (int x = 0; x < w; x++) {
            float dx = (float)x - cx;
            float sx = cs * dx - sn * dy + cx, sy = sn * dx + cs * dy + cy;
            int x0 = floor_int(sx), y0 = floor_int(sy);
            float ax = sx - (float)x0, ay = sy - (float)y0;
            float w00 = (1 - ax) * (1 - ay), w01 = ax * (1 - ay), w10 = (1 - ax) * ay, w11 = ax * ay;
            uint8_t *d = dst + ((size_t)y * w + x) * c;
            if (x0 >= 0 && x0 + 1 < w && y0 >= 0 && y0 + 1 < h) {
                /* all four neighbours inside: the common case */
                float cover = w00 + w01 + w10 + w11;
                const uint8_t *s = src + ((size_t)y0 * w + x0) * c;
                for (int ch = 0; ch < c; ch++) {
                    float acc = 0;
                    acc += w00 * s[ch];
                    acc += w01 * s[c + ch];
                    acc += w10 * s[row + ch];
                    acc += w11 * s[row + c + ch];
                    float v = round_even(acc * cover);
                    d[ch] = (uint8_t)(v > 255 ? 255 : v);
                }
                continue;
            }
            if (x0 < -1 || x0 >= w || y0 < -1 || y0 >= h) {
                for (int ch = 0; ch < c; ch++) d[ch] = 0;
                continue;
            }
            float wt[4] = {w00, w01, w10, w11};
            int xs[4] = {x0, x0 + 1, x0, x0 + 1}, ys[4] = {y0, y0, y0 + 1, y0 + 1};
            float acc[DATA_MAX_CHANNELS] = {0}, cover = 0;
            for (int k = 0; k < 4; k++) {
                if (xs[k] < 0 || xs[k] >= w || ys[k] < 0 || ys[k] >= h) continue;
                cover += wt[k];
                const uint8_t *s = src + ((size_t)ys[k] * w + xs[k]) * c;
                for (int ch = 0; ch < c; ch++) acc[ch] += wt[k] * s[ch];
            }
            for (int ch = 0; ch < c; ch++) {
                float v = round_even(acc[ch] * cover);
                d[ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
}

void augment_apply(const augment_opts_t *o, const augment_params_t *p, const uint8_t *src,
                   int c, int h, int w, uint8_t *dst, uint8_t *scratch) {
    int oh, ow;
    augment_out_shape(o, h, w, &oh, &ow);
    if (p->angle == 0.0) {
        crop_flip(o, p, src, c, h, w, oh, ow, dst);
        return;
    }
    crop_flip(o, p, src, c, h, w, oh, ow, scratch);
    rotate(scratch, c, oh, ow, p->angle, dst);
}

void augment_rotate(const uint8_t *src, int c, int h, int w, double angle, uint8_t *dst) {
    rotate(src, c, h, w, angle, dst);
}

void augment_normalize(const uint8_t *in, int64_t n, int c, const float *mean,
                       const float *std, float *out) {
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < c; k++)
            out[i * c + k] = ((float)in[i * c + k] / 255.0f - mean[k]) / std[k];
}
