/* augment.cu: the GPU twin of data/augment.c (crop with zero padding, horizontal flip,
 * bilinear rotation, normalisation), data/autoaugment.c (RandAugment / TrivialAugmentWide)
 * and data/erasing.c for a whole batch in one kernel: one block per sample, thread 0 draws
 * the sample's parameters, every thread then writes pixels (with auto-augment: the
 * geometric stage into the sample's scratch image, each op from one scratch image into the
 * other with the block's shared statistics, then the normalised output); and mixup_k, the
 * twin of data/mixup.c's mixing and targets.
 * The draw order and the arithmetic are documented in augment.h; every floating-point
 * step uses explicit round-to-nearest intrinsics (__fmul_rn, __fadd_rn, ...) so nvcc
 * cannot fuse them into FMAs and the results equal the CPU's.
 * Not here: uploading the dataset or the indices (the caller does, once / per step).
 */
#include "model/cuda/augment.h"

#include <string.h>

#include "model/cuda/cuda_impl.cuh"
#include "util/augops.h"

typedef struct aug_params {
    int top, left;
    int flip;
    float cs, sn;       /* cos, sin of the angle (float, from double) */
    int rotate;
} aug_params_t;

/* The kernel's copy of the descriptor (passed by value). */
typedef struct aug_k {
    int c, h, w, oh, ow, pad;
    int train, random_crop, crop_size, flip;
    double rotation;
    float mean[4], std[4];
    uint64_t seed;
    int64_t epoch;
    int auto_kind, aa_num_ops, aa_magnitude;
    const aa_entry_t *aa_table;
    uint8_t *aa_scratch;
    double erase_prob;
    int erase_mode, erase_count;
} aug_k_t;

/* The draws of data/augment.c's augment_draw / augment_eval_params for one sample. */
__device__ static aug_params_t draw_params(const aug_k_t &k, int64_t index) {
    aug_params_t p = {0, 0, 0, 1.0f, 0.0f, 0};
    if (!k.train) {
        if (k.random_crop) {
            p.top = k.pad + (int)llround((double)(k.h - k.crop_size) / 2.0);
            p.left = k.pad + (int)llround((double)(k.w - k.crop_size) / 2.0);
        }
        return p;
    }
    rng_t r = rng_make(k.seed, RNG_STREAM_AUGMENT, (uint64_t)k.epoch, (uint64_t)index);
    if (k.random_crop) {
        int ph = k.h + 2 * k.pad, pw = k.w + 2 * k.pad;
        p.top = ph >= k.crop_size ? (int)rng_below(&r, (uint32_t)(ph - k.crop_size + 1)) : 0;
        p.left = pw >= k.crop_size ? (int)rng_below(&r, (uint32_t)(pw - k.crop_size + 1)) : 0;
    }
    if (k.flip) p.flip = rng_uniform(&r) < 0.5f;
    if (k.rotation != 0.0) {
        double u = rng_uniform_f64(&r);
        double angle = __dadd_rn(-k.rotation, __dmul_rn(__dmul_rn(2.0, k.rotation), u));
        if (angle != 0.0) {
            double rad = __ddiv_rn(__dmul_rn(angle, 3.14159265358979323846), 180.0);
            p.cs = (float)cos(rad);
            p.sn = (float)sin(rad);
            p.rotate = 1;
        }
    }
    return p;
}

/* Channel ch of the cropped + flipped image at (y, x), 0 in the padding. */
__device__ __forceinline__ float cropped(const aug_k_t &k, const aug_params_t &p, const uint8_t *img,
                                         int y, int x, int ch) {
    int sy = p.top + y - k.pad;
    int sx = p.left + (p.flip ? k.ow - 1 - x : x) - k.pad;
    if (sy < 0 || sy >= k.h || sx < 0 || sx >= k.w) return 0.0f;
    return (float)img[((int64_t)sy * k.w + sx) * k.c + ch];
}

/* The geometric stage of output pixel (y, x): the c channel values 0..255 as floats. */
__device__ static void geo_pixel(const aug_k_t &k, const aug_params_t &p, const uint8_t *img, bool valid,
                                 float cx, float cy, int y, int x, float *v) {
    for (int ch = 0; ch < 4; ch++) v[ch] = 0.0f;
    if (valid && !p.rotate) {
        for (int ch = 0; ch < k.c; ch++) v[ch] = cropped(k, p, img, y, x, ch);
    } else if (valid) {
        float dy = __fsub_rn((float)y, cy), dx = __fsub_rn((float)x, cx);
        float sx = __fadd_rn(__fsub_rn(__fmul_rn(p.cs, dx), __fmul_rn(p.sn, dy)), cx);
        float sy = __fadd_rn(__fadd_rn(__fmul_rn(p.sn, dx), __fmul_rn(p.cs, dy)), cy);
        float fx0 = floorf(sx), fy0 = floorf(sy);
        int x0 = (int)fx0, y0 = (int)fy0;
        float ax = __fsub_rn(sx, fx0), ay = __fsub_rn(sy, fy0);
        float bx = __fsub_rn(1.0f, ax), by = __fsub_rn(1.0f, ay);
        float wt[4] = {__fmul_rn(bx, by), __fmul_rn(ax, by), __fmul_rn(bx, ay), __fmul_rn(ax, ay)};
        int xs[4] = {x0, x0 + 1, x0, x0 + 1}, ys[4] = {y0, y0, y0 + 1, y0 + 1};
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cover = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (xs[j] < 0 || xs[j] >= k.ow || ys[j] < 0 || ys[j] >= k.oh) continue;
            cover = __fadd_rn(cover, wt[j]);
            for (int ch = 0; ch < k.c; ch++)
                acc[ch] = __fadd_rn(acc[ch], __fmul_rn(wt[j], cropped(k, p, img, ys[j], xs[j], ch)));
        }
        for (int ch = 0; ch < k.c; ch++) {
            float r = rintf(__fmul_rn(acc[ch], cover));
            v[ch] = r < 0.0f ? 0.0f : (r > 255.0f ? 255.0f : r);
        }
    }
}

/* Per-sample draws, shared by the block. */
typedef struct sample_sh {
    aug_params_t p;
    int64_t idx;
    int n_ops, n_boxes;
    int32_t ops[AA_MAX_OPS];
    erase_box_t boxes[ERASE_MAX_COUNT];
} sample_sh_t;

/* The block's scratch for an op's per-image statistics. */
typedef struct aa_shared {
    unsigned int hist[4][256];
    unsigned char lut[4][256];
    int mn[4], mx[4];
    unsigned long long sum;
} aa_shared_t;

/* One auto-augment op of a sample, cur -> nxt (h x w x c); every thread of the block calls
 * it and the caller synchronises afterwards. data/autoaugment.c autoaug_apply_entry is the
 * CPU twin. */
__device__ static void aa_op(const aa_entry_t &e, int c, int h, int w, const uint8_t *cur, uint8_t *nxt,
                             aa_shared_t &sh) {
    int px = h * w, n = px * c, t = threadIdx.x, nt = blockDim.x;
    switch (e.op) {
    case AA_SHEAR_X:
    case AA_SHEAR_Y:
    case AA_TRANSLATE_X:
    case AA_TRANSLATE_Y:
    case AA_ROTATE:
        for (int i = t; i < px; i += nt) {
            int sx, sy, in = aa_affine_src(e.f, i % w, i / w, w, h, &sx, &sy);
            for (int ch = 0; ch < c; ch++) nxt[i * c + ch] = in ? cur[(sy * w + sx) * c + ch] : 0;
        }
        return;
    case AA_BRIGHTNESS:
        for (int i = t; i < n; i += nt) nxt[i] = aa_blend(e.f[0], e.f[1], (float)cur[i], 0.0f);
        return;
    case AA_COLOR:
        for (int i = t; i < px; i += nt) {
            const uint8_t *q = cur + i * c;
            float g = c == 3 ? (float)aa_gray(q[0], q[1], q[2]) : 0.0f;
            for (int ch = 0; ch < c; ch++) nxt[i * c + ch] = c == 3 ? aa_blend(e.f[0], e.f[1], (float)q[ch], g) : q[ch];
        }
        return;
    case AA_CONTRAST: {
        if (t == 0) sh.sum = 0;
        __syncthreads();
        unsigned long long part = 0;
        for (int i = t; i < px; i += nt) part += c == 3 ? aa_gray(cur[3 * i], cur[3 * i + 1], cur[3 * i + 2]) : cur[i * c];
        atomicAdd(&sh.sum, part);
        __syncthreads();
        float mean = AUG_DIV((float)sh.sum, (float)px);
        for (int i = t; i < n; i += nt) nxt[i] = aa_blend(e.f[0], e.f[1], (float)cur[i], mean);
        return;
    }
    case AA_SHARPNESS:
        for (int i = t; i < n; i += nt) {
            int pix = i / c, y = pix / w, x = pix % w;
            if (h <= 2 || w <= 2) {
                nxt[i] = cur[i];
                continue;
            }
            int blurred = cur[i];
            if (y > 0 && y < h - 1 && x > 0 && x < w - 1) {
                int s = 4 * cur[i];
                for (int dy = -1; dy <= 1; dy++)
                    for (int dx = -1; dx <= 1; dx++) s += cur[i + (dy * w + dx) * c];
                blurred = aa_blur_round(s);
            }
            nxt[i] = aa_blend(e.f[0], e.f[1], (float)cur[i], (float)blurred);
        }
        return;
    case AA_POSTERIZE:
        for (int i = t; i < n; i += nt) nxt[i] = (uint8_t)(cur[i] & e.ival);
        return;
    case AA_SOLARIZE:
        for (int i = t; i < n; i += nt) nxt[i] = (float)cur[i] >= e.f[0] ? (uint8_t)(255 - cur[i]) : cur[i];
        return;
    case AA_AUTOCONTRAST:
        if (t < c) sh.mn[t] = 255, sh.mx[t] = 0;
        __syncthreads();
        for (int i = t; i < n; i += nt) {
            atomicMin(&sh.mn[i % c], (int)cur[i]);
            atomicMax(&sh.mx[i % c], (int)cur[i]);
        }
        __syncthreads();
        for (int i = t; i < n; i += nt) nxt[i] = aa_autocontrast(cur[i], sh.mn[i % c], sh.mx[i % c]);
        return;
    case AA_EQUALIZE:
        for (int i = t; i < 4 * 256; i += nt) sh.hist[i / 256][i % 256] = 0;
        __syncthreads();
        for (int i = t; i < n; i += nt) atomicAdd(&sh.hist[i % c][cur[i]], 1u);
        __syncthreads();
        if (t < c) {
            /* torchvision _scale_channel: step from all but the highest present value */
            const unsigned int *hist = sh.hist[t];
            int last = 255;
            while (last > 0 && !hist[last]) last--;
            long long step = ((long long)px - hist[last]) / 255, cum = 0;
            for (int v = 0; v < 256; v++) {
                long long q = v;
                if (step) {
                    q = v == 0 ? 0 : (cum + step / 2) / step;
                    if (v) q = q > 255 ? 255 : q;
                }
                if (v < 255) cum += hist[v];
                sh.lut[t][v] = (unsigned char)q;
            }
        }
        __syncthreads();
        for (int i = t; i < n; i += nt) nxt[i] = sh.lut[i % c][cur[i]];
        return;
    default:
        for (int i = t; i < n; i += nt) nxt[i] = cur[i];
        return;
    }
}

template <typename T>
__device__ static void write_out(const aug_k_t &k, const sample_sh_t &s, T *o, int px, const float *v) {
    int y = px / k.ow, x = px % k.ow;
    T *dst = o + (int64_t)px * k.c;
    for (int ch = 0; ch < k.c; ch++) {
        float val = __fdiv_rn(__fsub_rn(__fdiv_rn(v[ch], 255.0f), k.mean[ch]), k.std[ch]);
        if (s.n_boxes) {
            int hit;
            float ev = erase_value(k.seed, k.epoch, s.idx, k.erase_mode, s.boxes, s.n_boxes, k.c, y, x, ch, &hit);
            if (hit) val = ev;
        }
        dst[ch] = from_f32<T>(val);
    }
}

template <typename T>
__global__ void augment_k(aug_k_t k, const int64_t *epoch_dev, const uint8_t *images, int64_t n_images,
                          const int32_t *labels, const int64_t *indices, T *out, int32_t *out_labels) {
    __shared__ sample_sh_t s;
    __shared__ aa_shared_t sh;
    int b = blockIdx.x;
    if (epoch_dev) k.epoch = *epoch_dev;   /* a recorded step reads each step's epoch */
    if (threadIdx.x == 0) {
        int64_t idx = indices[b];
        bool ok = idx >= 0 && idx < n_images;
        s.idx = idx;
        s.p = draw_params(k, idx);
        s.n_ops = k.train && ok ? aa_draw(k.seed, k.epoch, idx, k.auto_kind, k.aa_num_ops, k.aa_magnitude, s.ops) : 0;
        s.n_boxes = k.train && ok ? erase_draw(k.seed, k.epoch, idx, k.erase_prob, k.erase_count, k.oh, k.ow, s.boxes)
                                  : 0;
        if (out_labels) out_labels[b] = (ok && labels) ? labels[idx] : -1;
    }
    __syncthreads();
    const aug_params_t p = s.p;
    bool valid = s.idx >= 0 && s.idx < n_images;
    const uint8_t *img = images + (valid ? s.idx : 0) * (int64_t)k.h * k.w * k.c;
    T *o = out + (int64_t)b * k.oh * k.ow * k.c;
    float cx = __fmul_rn((float)(k.ow - 1), 0.5f), cy = __fmul_rn((float)(k.oh - 1), 0.5f);
    int npx = k.oh * k.ow;
    float v[4];
    if (s.n_ops == 0) {
        for (int px = threadIdx.x; px < npx; px += blockDim.x) {
            geo_pixel(k, p, img, valid, cx, cy, px / k.ow, px % k.ow, v);
            write_out(k, s, o, px, v);
        }
        return;
    }
    int64_t elems = (int64_t)npx * k.c;
    uint8_t *cur = k.aa_scratch + (int64_t)b * 2 * elems, *nxt = cur + elems;
    for (int px = threadIdx.x; px < npx; px += blockDim.x) {
        geo_pixel(k, p, img, valid, cx, cy, px / k.ow, px % k.ow, v);
        for (int ch = 0; ch < k.c; ch++) cur[(int64_t)px * k.c + ch] = (uint8_t)v[ch];
    }
    __syncthreads();
    for (int i = 0; i < s.n_ops; i++) {
        aa_op(k.aa_table[s.ops[i]], k.c, k.oh, k.ow, cur, nxt, sh);
        __syncthreads();
        uint8_t *tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    for (int px = threadIdx.x; px < npx; px += blockDim.x) {
        for (int ch = 0; ch < k.c; ch++) v[ch] = (float)cur[(int64_t)px * k.c + ch];
        write_out(k, s, o, px, v);
    }
}

/* Sample i of the batch: its mixed values and its row of soft targets (data/mixup.c). */
template <typename T>
__global__ void mixup_k(const mix_sample_t *samples, int64_t per, int w, int c, const float *x, T *out,
                        const int32_t *labels, int classes, float on, float off, float *targets) {
    int i = blockIdx.x;
    mix_sample_t s = samples[i];
    const float *a = x + (int64_t)i * per, *b = x + (int64_t)s.partner * per;
    T *o = out + (int64_t)i * per;
    for (int64_t e = threadIdx.x; e < per; e += blockDim.x) {
        int pix = (int)(e / c);
        o[e] = from_f32<T>(mix_value(&s, pix / w, pix % w, a[e], b[e]));
    }
    int li = labels[i], lj = labels[s.partner];
    for (int j = threadIdx.x; j < classes; j += blockDim.x)
        targets[(int64_t)i * classes + j] = mix_target(&s, li, lj, j, on, off);
}

void cuda_augment_out_shape(const cuda_augment_desc_t *d, int *oh, int *ow) {
    *oh = d->random_crop ? d->crop_size : d->h;
    *ow = d->random_crop ? d->crop_size : d->w;
}

int cuda_augment_batch(backend_t *be, const cuda_augment_desc_t *d, const uint8_t *images,
                       int64_t n_images, const int32_t *labels, const int64_t *indices,
                       int batch, dtype_t dt, void *out, int32_t *out_labels) {
    cuda_be_t *cb = cb_of(be);
    if (batch <= 0) return 0;
    if (d->c < 1 || d->c > 4 || d->h < 1 || d->w < 1 || (d->random_crop && d->crop_size < 1))
        return cb_fail(cb, "augment: bad image shape c%d h%d w%d crop %d", d->c, d->h, d->w, d->crop_size);
    CB_ENTER(cb);
    aug_k_t k;
    memset(&k, 0, sizeof k);
    k.c = d->c;
    k.h = d->h;
    k.w = d->w;
    cuda_augment_out_shape(d, &k.oh, &k.ow);
    k.pad = d->random_crop ? d->crop_padding : 0;
    k.train = d->train;
    k.random_crop = d->random_crop;
    k.crop_size = d->crop_size;
    k.flip = d->horizontal_flip;
    k.rotation = d->rotation;
    for (int i = 0; i < 4; i++) {
        k.mean[i] = d->mean[i];
        k.std[i] = i < d->c ? d->std[i] : 1.0f;
    }
    k.seed = d->seed;
    k.epoch = d->epoch;
    if (d->train && d->auto_kind) {
        if (!d->aa_table || !d->aa_scratch || (d->c != 1 && d->c != 3))
            return cb_fail(cb, "augment: auto-augment needs its table and scratch and 1 or 3 channels (c%d)", d->c);
        k.auto_kind = d->auto_kind;
        k.aa_num_ops = d->aa_num_ops;
        k.aa_magnitude = d->aa_magnitude;
        k.aa_table = (const aa_entry_t *)d->aa_table;
        k.aa_scratch = d->aa_scratch;
    }
    if (d->train) {
        k.erase_prob = d->erase_prob;
        k.erase_mode = d->erase_mode;
        k.erase_count = d->erase_count;
    }
    DISPATCH_DT(cb, dt, T, augment_k<T><<<batch, 256, 0, cb->stream>>>(k, d->epoch_dev, images, n_images, labels,
                                                                       indices, (T *)out, out_labels));
    KERNEL_CHECK(cb, "augment_k");
    return 0;
}

int cuda_mixup_batch(backend_t *be, const void *samples, int n, int h, int w, int c, const float *x,
                     dtype_t dt, void *out, const int32_t *labels, int classes, float on, float off,
                     float *targets) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    if (h < 1 || w < 1 || c < 1 || classes < 1)
        return cb_fail(cb, "mixup: bad shape n%d h%d w%d c%d classes %d", n, h, w, c, classes);
    CB_ENTER(cb);
    int64_t per = (int64_t)h * w * c;
    DISPATCH_DT(cb, dt, T, mixup_k<T><<<n, 256, 0, cb->stream>>>((const mix_sample_t *)samples, per, w, c, x,
                                                                 (T *)out, labels, classes, on, off, targets));
    KERNEL_CHECK(cb, "mixup_k");
    return 0;
}
