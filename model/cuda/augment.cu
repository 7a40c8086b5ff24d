/* augment.cu: the GPU twin of data/augment.c (crop with zero padding, horizontal flip,
 * bilinear rotation, normalisation) for a whole batch in one kernel: one block per
 * sample, thread 0 draws the sample's parameters, every thread then writes pixels.
 * The draw order and the arithmetic are documented in augment.h; every floating-point
 * step uses explicit round-to-nearest intrinsics (__fmul_rn, __fadd_rn, ...) so nvcc
 * cannot fuse them into FMAs and the results equal the CPU's.
 * Not here: uploading the dataset or the indices (the caller does, once / per step).
 */
#include "model/cuda/augment.h"

#include <string.h>

#include "model/cuda/cuda_impl.cuh"
#include "util/rng.h"

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

template <typename T>
__global__ void augment_k(aug_k_t k, const uint8_t *images, int64_t n_images, const int32_t *labels,
                          const int64_t *indices, T *out, int32_t *out_labels) {
    __shared__ aug_params_t sp;
    __shared__ int64_t sidx;
    int b = blockIdx.x;
    if (threadIdx.x == 0) {
        int64_t idx = indices[b];
        sidx = idx;
        sp = draw_params(k, idx);
        if (out_labels) out_labels[b] = (idx >= 0 && idx < n_images && labels) ? labels[idx] : -1;
    }
    __syncthreads();
    const aug_params_t p = sp;
    int64_t idx = sidx;
    bool valid = idx >= 0 && idx < n_images;
    const uint8_t *img = images + (valid ? idx : 0) * (int64_t)k.h * k.w * k.c;
    T *o = out + (int64_t)b * k.oh * k.ow * k.c;
    float cx = __fmul_rn((float)(k.ow - 1), 0.5f), cy = __fmul_rn((float)(k.oh - 1), 0.5f);
    for (int px = threadIdx.x; px < k.oh * k.ow; px += blockDim.x) {
        int y = px / k.ow, x = px % k.ow;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
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
        T *dst = o + (int64_t)px * k.c;
        for (int ch = 0; ch < k.c; ch++)
            dst[ch] = from_f32<T>(__fdiv_rn(__fsub_rn(__fdiv_rn(v[ch], 255.0f), k.mean[ch]), k.std[ch]));
    }
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
    DISPATCH_DT(cb, dt, T, augment_k<T><<<batch, 256, 0, cb->stream>>>(k, images, n_images, labels,
                                                                       indices, (T *)out, out_labels));
    KERNEL_CHECK(cb, "augment_k");
    return 0;
}
