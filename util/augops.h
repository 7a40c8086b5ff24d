/* augops.h: what the CPU loader (data/autoaugment.c, data/erasing.c, data/mixup.c) and the
 * GPU augmentation kernel (model/cuda/augment.cu) must compute identically: the per-sample
 * draws of RandAugment / TrivialAugmentWide and random erasing, the resolved op table the
 * host builds once, the mixup parameters of one sample, and the per-pixel formulas. Every
 * function is host and device inline (AUG_HD); floating-point steps go through AUG_ADD /
 * AUG_MUL / AUG_FMA so nvcc cannot fuse them differently from the host (C11 on the host
 * does not contract), which makes the two paths bit-identical.
 *
 * Draw keys (util/rng.h), per training sample with dataset index `index`:
 *   (seed, RNG_STREAM_AUGMENT, epoch, index) blocks 0..: crop, flip, rotation (augment.h)
 *   the same key from block AUG_BLOCK_AUTOAUG: the auto-augment ops (aa_draw)
 *   the same key from block AUG_BLOCK_ERASE:  random erasing's boxes (erase_draw)
 *   (seed, RNG_STREAM_ERASE, epoch, index): erasing's normal values (erase_normal)
 * Fixed block offsets keep each group's draws the same whatever the groups before it
 * consumed (rng_below may reject and draw again).
 *
 * Not here: the table builder (torchvision's magnitudes, data/autoaugment.c), the loops
 * over pixels and the per-image statistics (data/autoaugment.c etc. on the host, augment.cu on the GPU).
 */
#ifndef RUNNER_UTIL_AUGOPS_H
#define RUNNER_UTIL_AUGOPS_H

#include <math.h>
#include <stdint.h>

#include "util/rng.h"

#ifdef __CUDACC__
#define AUG_HD __host__ __device__ __forceinline__
#else
#define AUG_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define AUG_ADD(a, b) __fadd_rn((a), (b))
#define AUG_SUB(a, b) __fsub_rn((a), (b))
#define AUG_MUL(a, b) __fmul_rn((a), (b))
#define AUG_DIV(a, b) __fdiv_rn((a), (b))
#define AUG_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#define AUG_DADD(a, b) __dadd_rn((a), (b))
#define AUG_DMUL(a, b) __dmul_rn((a), (b))
#else
#define AUG_ADD(a, b) ((a) + (b))
#define AUG_SUB(a, b) ((a) - (b))
#define AUG_MUL(a, b) ((a) * (b))
#define AUG_DIV(a, b) ((a) / (b))
#define AUG_FMA(a, b, c) fmaf((a), (b), (c))
#define AUG_DADD(a, b) ((a) + (b))
#define AUG_DMUL(a, b) ((a) * (b))
#endif

/* torchvision's op set, in the order of RandAugment._augmentation_space (the order the op
 * index is drawn from). TrivialAugmentWide has the same names in the same order. */
enum {
    AA_IDENTITY = 0, AA_SHEAR_X, AA_SHEAR_Y, AA_TRANSLATE_X, AA_TRANSLATE_Y, AA_ROTATE,
    AA_BRIGHTNESS, AA_COLOR, AA_CONTRAST, AA_SHARPNESS, AA_POSTERIZE, AA_SOLARIZE,
    AA_AUTOCONTRAST, AA_EQUALIZE, AA_NUM_OPS
};
enum { AA_BINS = 31, AA_MAX_OPS = 16, AA_TABLE_SIZE = AA_NUM_OPS * AA_BINS * 2, ERASE_MAX_COUNT = 8 };
typedef enum { AUTOAUG_NONE = 0, AUTOAUG_RAND = 1, AUTOAUG_TRIVIAL = 2 } autoaug_kind_t;
typedef enum { ERASE_CONST = 0, ERASE_RAND = 1, ERASE_PIXEL = 2 } erase_mode_t;

#define AUG_BLOCK_AUTOAUG 65536u
#define AUG_BLOCK_ERASE 131072u

/* One resolved (op, magnitude bin, sign): everything an op needs, as the floats torch
 * would hold, computed once on the host (data/autoaugment.c autoaug_build_table).
 *   affine ops (shear, translate, rotate): f = the grid matrix R (torchvision's
 *     rescaled_theta, row-major [3][2]: r00 r01 r10 r11 r20 r21)
 *   brightness, color, contrast, sharpness: f[0] = (float)ratio, f[1] = (float)(1 - ratio)
 *   solarize: f[0] = threshold; posterize: ival = the bit mask (0xff << (8 - bits)) & 0xff */
typedef struct aa_entry {
    int32_t op;
    int32_t ival;
    float f[6];
} aa_entry_t;

/* Table index of (op, bin, negated). */
AUG_HD int aa_index(int op, int bin, int neg) { return (op * AA_BINS + bin) * 2 + neg; }

/* torchvision: ops with a magnitude table (magnitudes.ndim > 0) and signed ops. */
AUG_HD int aa_has_bins(int op) {
    return op != AA_IDENTITY && op != AA_AUTOCONTRAST && op != AA_EQUALIZE;
}
AUG_HD int aa_signed(int op) { return op >= AA_SHEAR_X && op <= AA_SHARPNESS; }

/* The ops of one sample as table indices (out[AA_MAX_OPS]); returns how many. Draw order,
 * per op (torchvision's): op = rng_below(14); TrivialAugment only and only for ops with a
 * table: bin = rng_below(31) (RandAugment: bin = magnitude); signed ops only: negated =
 * rng_below(2) == 1. */
AUG_HD int aa_draw(uint64_t seed, int64_t epoch, int64_t index, int kind, int num_ops, int magnitude,
                   int32_t *out) {
    if (kind == AUTOAUG_NONE) return 0;
    rng_t r = rng_make(seed, RNG_STREAM_AUGMENT, (uint64_t)epoch, (uint64_t)index);
    rng_seek(&r, AUG_BLOCK_AUTOAUG);
    int n = kind == AUTOAUG_RAND ? num_ops : 1;
    if (n > AA_MAX_OPS) n = AA_MAX_OPS;
    for (int i = 0; i < n; i++) {
        int op = (int)rng_below(&r, AA_NUM_OPS), bin = 0, neg = 0;
        if (aa_has_bins(op)) bin = kind == AUTOAUG_RAND ? magnitude : (int)rng_below(&r, AA_BINS);
        if (aa_signed(op)) neg = rng_below(&r, 2) == 1;
        out[i] = aa_index(op, bin, neg);
    }
    return n;
}

/* ---- per-pixel formulas (uint8 tensors in torchvision's tensor functional ops) ---- */

/* Nearest-neighbour source of output pixel (x, y) under grid matrix R for an h x w image
 * (torchvision _gen_affine_grid + grid_sample(nearest, zeros, align_corners=False)): the
 * base grid point (x - w/2 + 0.5, y - h/2 + 0.5, 1) times R as the CPU GEMM computes it
 * (first product rounded, the second fused, then + r2), unnormalised as
 * (g + 1) * (size / 2) - 0.5 and rounded half to even. Returns 0 when it falls outside
 * (torch's zero padding). */
AUG_HD int aa_affine_src(const float *R, int x, int y, int w, int h, int *sx, int *sy) {
    float bx = (float)x + (0.5f - 0.5f * (float)w), by = (float)y + (0.5f - 0.5f * (float)h);
    float gx = AUG_ADD(AUG_FMA(by, R[2], AUG_MUL(bx, R[0])), R[4]);
    float gy = AUG_ADD(AUG_FMA(by, R[3], AUG_MUL(bx, R[1])), R[5]);
    float ix = AUG_SUB(AUG_MUL(AUG_ADD(gx, 1.0f), 0.5f * (float)w), 0.5f);
    float iy = AUG_SUB(AUG_MUL(AUG_ADD(gy, 1.0f), 0.5f * (float)h), 0.5f);
    float rx = rintf(ix), ry = rintf(iy);
    if (!(rx >= 0.0f && rx <= (float)(w - 1) && ry >= 0.0f && ry <= (float)(h - 1))) return 0;
    *sx = (int)rx;
    *sy = (int)ry;
    return 1;
}

/* torchvision _blend on uint8: (ratio * a + (1 - ratio) * b).clamp(0, 255).to(uint8),
 * the conversion truncating. */
AUG_HD uint8_t aa_blend(float ratio, float one_minus, float a, float b) {
    float v = AUG_ADD(AUG_MUL(ratio, a), AUG_MUL(one_minus, b));
    v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
    return (uint8_t)v;
}

/* rgb_to_grayscale on uint8: (0.2989 r + 0.587 g + 0.114 b).to(uint8). */
AUG_HD uint8_t aa_gray(uint8_t r, uint8_t g, uint8_t b) {
    float v = AUG_ADD(AUG_ADD(AUG_MUL((float)0.2989, (float)r), AUG_MUL((float)0.587, (float)g)),
                      AUG_MUL((float)0.114, (float)b));
    return (uint8_t)v;
}

/* The blurred pixel of adjust_sharpness: conv2d with [[1,1,1],[1,5,1],[1,1,1]] / 13 and
 * torch.round. s = sum of the 8 neighbours + 5 * centre; s / 13 is never a half, and torch's
 * float error (< 2e-4) is far below the 1/26 distance to one, so the integer rounding is
 * exactly torch's. */
AUG_HD uint8_t aa_blur_round(int s) { return (uint8_t)((2 * s + 13) / 26); }

/* autocontrast on uint8 for one channel with minimum mn and maximum mx:
 * ((x - mn) * (255 / (mx - mn))).clamp(0, 255).to(uint8); mx == mn leaves x. */
AUG_HD uint8_t aa_autocontrast(uint8_t x, int mn, int mx) {
    if (mx == mn) return x;
    float scale = AUG_DIV(255.0f, (float)(mx - mn));
    float v = AUG_MUL(AUG_SUB((float)x, (float)mn), scale);
    v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
    return (uint8_t)v;
}

/* ---- random erasing (timm RandomErasing on the normalised tensor) ---- */

typedef struct erase_box {
    int top, left, h, w;
} erase_box_t;

/* The box of one attempt from its two uniform draws (timm _erase): target area
 * (0.02 + (1/3 - 0.02) u1) * area / count, aspect exp(log(0.3) + (log(1/0.3) - log(0.3)) u2),
 * h = round(sqrt(area * aspect)), w = round(sqrt(area / aspect)) (half to even, as Python's
 * round). Returns 1 when it fits (w < img_w and h < img_h). */
AUG_HD int erase_box_size(double u1, double u2, int img_h, int img_w, int count, int *bh, int *bw) {
    const double min_area = 0.02, max_area = 1.0 / 3.0;
    const double log_lo = -1.2039728043259361;   /* log(0.3) */
    const double log_hi = 1.2039728043259361;    /* log(1 / 0.3) */
    double target = AUG_DADD(min_area, AUG_DMUL(max_area - min_area, u1)) * (double)(img_h * img_w) / (double)count;
    double aspect = exp(AUG_DADD(log_lo, AUG_DMUL(log_hi - log_lo, u2)));
    *bh = (int)rint(sqrt(target * aspect));
    *bw = (int)rint(sqrt(target / aspect));
    return *bw < img_w && *bh < img_h;
}

/* The erasing of one sample: returns the number of boxes (0: not erased) written to
 * boxes[ERASE_MAX_COUNT]. Draws, from (seed, AUGMENT, epoch, index) at block
 * AUG_BLOCK_ERASE: erase when u <= prob (u = rng_uniform_f64); count = 1 + rng_below(max_count)
 * when max_count > 1; per box up to 10 attempts of (u1, u2) = two rng_uniform_f64, and for
 * the attempt that fits top = rng_below(img_h - h + 1), left = rng_below(img_w - w + 1). */
AUG_HD int erase_draw(uint64_t seed, int64_t epoch, int64_t index, double prob, int max_count, int img_h,
                      int img_w, erase_box_t *boxes) {
    if (!(prob > 0.0)) return 0;
    rng_t r = rng_make(seed, RNG_STREAM_AUGMENT, (uint64_t)epoch, (uint64_t)index);
    rng_seek(&r, AUG_BLOCK_ERASE);
    if (rng_uniform_f64(&r) > prob) return 0;
    if (max_count > ERASE_MAX_COUNT) max_count = ERASE_MAX_COUNT;
    int count = max_count > 1 ? 1 + (int)rng_below(&r, (uint32_t)max_count) : 1, n = 0;
    for (int b = 0; b < count; b++) {
        for (int attempt = 0; attempt < 10; attempt++) {
            double u1 = rng_uniform_f64(&r), u2 = rng_uniform_f64(&r);
            int bh, bw;
            if (!erase_box_size(u1, u2, img_h, img_w, count, &bh, &bw)) continue;
            erase_box_t *x = &boxes[n++];
            x->h = bh;
            x->w = bw;
            x->top = (int)rng_below(&r, (uint32_t)(img_h - bh + 1));
            x->left = (int)rng_below(&r, (uint32_t)(img_w - bw + 1));
            break;
        }
    }
    return n;
}

/* Normal value k of box `box` of a sample (Box-Muller in double on Philox block
 * box * 2^25 + k / 2 of (seed, RNG_STREAM_ERASE, epoch, index): u1 in (0, 1] and u2 in
 * [0, 1) of 53 bits each; even k: r cos(2 pi u2), odd k: r sin(2 pi u2)). The value index k
 * counts (y, x, channel) of the box in HWC order for mode pixel, the channel for rand. */
AUG_HD float erase_normal(uint64_t seed, int64_t epoch, int64_t index, int box, int64_t k) {
    rng_t r = rng_make(seed, RNG_STREAM_ERASE, (uint64_t)epoch, (uint64_t)index);
    rng_seek(&r, ((uint32_t)box << 25) + (uint32_t)(k >> 1));
    uint32_t a = rng_u32(&r), b = rng_u32(&r), c = rng_u32(&r), d = rng_u32(&r);
    double u1 = ((double)(a >> 5) * 67108864.0 + (double)(b >> 6) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = ((double)(c >> 5) * 67108864.0 + (double)(d >> 6)) * (1.0 / 9007199254740992.0);
    double rad = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
    return (float)(rad * ((k & 1) ? sin(t) : cos(t)));
}

/* The erased value of element (y, x, ch) (box coordinates inside the image) of a sample,
 * or 0 with *hit = 0 when no box covers it; a later box wins over an earlier one. */
AUG_HD float erase_value(uint64_t seed, int64_t epoch, int64_t index, int mode, const erase_box_t *boxes,
                         int n, int c, int y, int x, int ch, int *hit) {
    *hit = 0;
    float v = 0.0f;
    for (int b = 0; b < n; b++) {
        const erase_box_t *q = &boxes[b];
        if (y < q->top || y >= q->top + q->h || x < q->left || x >= q->left + q->w) continue;
        *hit = 1;
        if (mode == ERASE_CONST) v = 0.0f;
        else if (mode == ERASE_RAND) v = erase_normal(seed, epoch, index, b, ch);
        else v = erase_normal(seed, epoch, index, b,
                              ((int64_t)(y - q->top) * q->w + (x - q->left)) * c + ch);
    }
    return v;
}

/* ---- mixup / cutmix of one sample (data/mixup.h draws them, on the host) ---- */

/* Sample i of a micro-batch of n becomes, with partner j = n - 1 - i (timm's flip):
 *   mix:  x_i = w_self * x_i + w_other * x_j (each product rounded, then the sum)
 *   cut:  x_i = x_j inside rows [yl, yh) and columns [xl, xh), x_i elsewhere
 *   target_i = y(label_i) * w_self + y(label_j) * w_other, with y = on at the label and off
 *   elsewhere (timm mixup_target); an unmixed sample has w_self 1, w_other 0. */
typedef struct mix_sample {
    float w_self, w_other;
    int32_t partner;
    int32_t kind;            /* 0 unmixed, 1 mixup, 2 cutmix */
    int32_t yl, yh, xl, xh;
} mix_sample_t;

/* target_i[j] (timm: y1 * lam + y2 * (1 - lam), each a float tensor op). */
AUG_HD float mix_target(const mix_sample_t *s, int label_self, int label_other, int j, float on, float off) {
    float y1 = j == label_self ? on : off, y2 = j == label_other ? on : off;
    return AUG_ADD(AUG_MUL(y1, s->w_self), AUG_MUL(y2, s->w_other));
}

/* Mixed value of element (y, x) of sample i from its own value a and its partner's b. */
AUG_HD float mix_value(const mix_sample_t *s, int y, int x, float a, float b) {
    if (s->kind == 1) return AUG_ADD(AUG_MUL(a, s->w_self), AUG_MUL(b, s->w_other));
    if (s->kind == 2 && y >= s->yl && y < s->yh && x >= s->xl && x < s->xh) return b;
    return a;
}

#endif
