/* elementwise.cu: relu, add, global average pooling, dtype casts, AMP unscale + finite
 * check, scaling and half-gradient accumulation on the GPU.
 *
 * The flat ops are grid-stride kernels that move 16 bytes per thread and access when all
 * their pointers are 16-byte aligned (the usual case: backend_alloc returns 256-byte
 * aligned memory), with a scalar path otherwise. Arithmetic is fp32; half outputs are
 * rounded to nearest even. relu keeps NaN (as torch does), so AMP overflow still shows up
 * in the gradients. Outputs may alias inputs element for element (the net sums gradients
 * in place with add), so those kernels take no __restrict__. Not here: reductions across
 * rows (norm.cu, loss.cu).
 */
#include "model/cuda/elementwise.cuh"

#include "model/cuda/cuda_impl.cuh"

/* The number of T in 16 bytes. */
template <typename T> constexpr int vec_n() { return (int)(16 / sizeof(T)); }

template <typename T, int N>
__global__ void relu_fwd_k(int64_t n, const T *x, T *y) {
    pdl_enter();
    int64_t nv = n / N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        pack_t<T, N> a = reinterpret_cast<const pack_t<T, N> *>(x)[i];
#pragma unroll
        for (int k = 0; k < N; k++)
            if (to_f32(a.v[k]) <= 0.0f) a.v[k] = from_f32<T>(0.0f);
        reinterpret_cast<pack_t<T, N> *>(y)[i] = a;
    }
    if (blockIdx.x == 0)
        for (int64_t i = nv * N + threadIdx.x; i < n; i += blockDim.x)
            y[i] = to_f32(x[i]) <= 0.0f ? from_f32<T>(0.0f) : x[i];
}

template <typename T, int N>
__global__ void relu_bwd_k(int64_t n, const T *y, const T *dy,
                           T *dx) {
    pdl_enter();
    int64_t nv = n / N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        pack_t<T, N> a = reinterpret_cast<const pack_t<T, N> *>(y)[i];
        pack_t<T, N> g = reinterpret_cast<const pack_t<T, N> *>(dy)[i];
#pragma unroll
        for (int k = 0; k < N; k++)
            if (!(to_f32(a.v[k]) > 0.0f)) g.v[k] = from_f32<T>(0.0f);
        reinterpret_cast<pack_t<T, N> *>(dx)[i] = g;
    }
    if (blockIdx.x == 0)
        for (int64_t i = nv * N + threadIdx.x; i < n; i += blockDim.x)
            dx[i] = to_f32(y[i]) > 0.0f ? dy[i] : from_f32<T>(0.0f);
}

template <typename T, int N>
__global__ void add_k(int64_t n, const T *a, const T *b,
                      T *y) {
    pdl_enter();
    int64_t nv = n / N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        pack_t<T, N> u = reinterpret_cast<const pack_t<T, N> *>(a)[i];
        pack_t<T, N> v = reinterpret_cast<const pack_t<T, N> *>(b)[i];
#pragma unroll
        for (int k = 0; k < N; k++) u.v[k] = from_f32<T>(to_f32(u.v[k]) + to_f32(v.v[k]));
        reinterpret_cast<pack_t<T, N> *>(y)[i] = u;
    }
    if (blockIdx.x == 0)
        for (int64_t i = nv * N + threadIdx.x; i < n; i += blockDim.x)
            y[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

/* One thread per (sample, channel): sums hw pixels in double in pixel order and divides,
 * as the CPU backend does (so both give the same bits). Consecutive threads take
 * consecutive channels, so the loads of a warp are contiguous. */
template <typename T>
__global__ void avgpool_fwd_k(int n, int hw, int c, const T *__restrict__ x, T *__restrict__ y) {
    pdl_enter();
    int64_t total = (int64_t)n * c, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t b = i / c, ch = i % c;
        const T *p = x + b * (int64_t)hw * c + ch;
        double s = 0.0;
        for (int j = 0; j < hw; j++) s += (double)to_f32(p[(int64_t)j * c]);
        y[i] = from_f32<T>((float)(s / (double)hw));
    }
}

template <typename T>
__global__ void avgpool_bwd_k(int n, int hw, int c, const T *__restrict__ dy, T *__restrict__ dx) {
    pdl_enter();
    int64_t total = (int64_t)n * hw * c, stride = (int64_t)gridDim.x * blockDim.x;
    float fhw = (float)hw;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t ch = i % c, b = i / ((int64_t)hw * c);
        dx[i] = from_f32<T>(__fdiv_rn(to_f32(dy[b * c + ch]), fhw));   /* dy / hw, as the CPU */
    }
}

template <typename S, typename D>
__global__ void cast_k(int64_t n, const S *__restrict__ src, D *__restrict__ dst) {
    pdl_enter();
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = from_f32<D>(to_f32(src[i]));
}

/* g *= 1/scale; any non-finite input sets ctl->found_inf (every writer writes 1, so the
 * race is benign; one write per block at most). */
template <int N>
__global__ void unscale_k(int64_t n, float *__restrict__ g, step_ctl_t *ctl) {
    pdl_enter();
    /* inv_scale in fp32 as GradScaler computes it (scale.double().reciprocal().float());
     * the check looks at the value before scaling, as torch's does */
    float inv = (float)(1.0 / (double)ctl->loss_scale);
    int64_t nv = n / N, stride = (int64_t)gridDim.x * blockDim.x;
    bool bad = false;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        pack_t<float, N> a = reinterpret_cast<pack_t<float, N> *>(g)[i];
#pragma unroll
        for (int k = 0; k < N; k++) {
            bad |= !isfinite(a.v[k]);
            a.v[k] *= inv;
        }
        reinterpret_cast<pack_t<float, N> *>(g)[i] = a;
    }
    if (blockIdx.x == 0)
        for (int64_t i = nv * N + threadIdx.x; i < n; i += blockDim.x) {
            float v = g[i];
            bad |= !isfinite(v);
            g[i] = v * inv;
        }
    if (__syncthreads_or(bad) && threadIdx.x == 0) ctl->found_inf = 1;
}

template <int N>
__global__ void scale_k(int64_t n, float *__restrict__ x, float alpha) {
    pdl_enter();
    int64_t nv = n / N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        pack_t<float, N> a = reinterpret_cast<pack_t<float, N> *>(x)[i];
#pragma unroll
        for (int k = 0; k < N; k++) a.v[k] *= alpha;
        reinterpret_cast<pack_t<float, N> *>(x)[i] = a;
    }
    if (blockIdx.x == 0)
        for (int64_t i = nv * N + threadIdx.x; i < n; i += blockDim.x) x[i] *= alpha;
}

template <typename T>
__global__ void accumulate_k(int64_t n, const T *__restrict__ src, float *__restrict__ dw) {
    pdl_enter();
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dw[i] += to_f32(src[i]);
}

/* Launches kernel K<T, vec_n<T>()> when all pointers are 16-byte aligned, else K<T, 1>. */
#define LAUNCH_VEC(cb, K, T, aligned, n, ...) do { \
    constexpr int VN_ = vec_n<T>(); \
    if (aligned) cb_launch((cb), (K<T, VN_>), cb_blocks(cb, (n) / VN_ + 1, 256), 256, 0, n, __VA_ARGS__); \
    else cb_launch((cb), (K<T, 1>), cb_blocks(cb, n, 256), 256, 0, n, __VA_ARGS__); \
    KERNEL_CHECK(cb, #K); } while (0)

int cu_relu_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    bool al = cb_aligned(x, 16) && cb_aligned(y, 16);
    DISPATCH_DT(cb, dt, T, LAUNCH_VEC(cb, relu_fwd_k, T, al, n, (const T *)x, (T *)y));
    return 0;
}

int cu_relu_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    bool al = cb_aligned(y, 16) && cb_aligned(dy, 16) && cb_aligned(dx, 16);
    DISPATCH_DT(cb, dt, T, LAUNCH_VEC(cb, relu_bwd_k, T, al, n, (const T *)y, (const T *)dy,
                                      (T *)dx));
    return 0;
}

int cu_add(backend_t *be, int64_t n, dtype_t dt, const void *a, const void *b, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    bool al = cb_aligned(a, 16) && cb_aligned(b, 16) && cb_aligned(y, 16);
    DISPATCH_DT(cb, dt, T, LAUNCH_VEC(cb, add_k, T, al, n, (const T *)a, (const T *)b, (T *)y));
    return 0;
}

int cu_avgpool_fwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *x, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0 || c <= 0 || hw <= 0) return 0;
    CB_ENTER(cb);
    int64_t total = (int64_t)n * c;
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (avgpool_fwd_k<T>), cb_blocks(cb, total, 256), 256, 0,
                               n, hw, c, (const T *)x, (T *)y));
    KERNEL_CHECK(cb, "avgpool_fwd_k");
    return 0;
}

int cu_avgpool_bwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *dy, void *dx) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0 || c <= 0 || hw <= 0) return 0;
    CB_ENTER(cb);
    int64_t total = (int64_t)n * hw * c;
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (avgpool_bwd_k<T>), cb_blocks(cb, total, 256), 256, 0,
                               n, hw, c, (const T *)dy, (T *)dx));
    KERNEL_CHECK(cb, "avgpool_bwd_k");
    return 0;
}

int cu_cast(backend_t *be, int64_t n, const void *src, dtype_t src_dt, void *dst, dtype_t dst_dt) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    if (src_dt == dst_dt) {
        CUDA_CHECK(cb, cudaMemcpyAsync(dst, src, (size_t)n * dt_size(src_dt),
                                       cudaMemcpyDeviceToDevice, cb->stream));
        return 0;
    }
    unsigned blocks = cb_blocks(cb, n, 256);
    DISPATCH_DT(cb, src_dt, S, DISPATCH_DT(cb, dst_dt, D,
        cb_launch(cb, (cast_k<S, D>), blocks, 256, 0, n, (const S *)src, (D *)dst)));
    KERNEL_CHECK(cb, "cast_k");
    return 0;
}

int cu_unscale_check_finite(backend_t *be, int64_t n, float *g, step_ctl_t *ctl) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    if (cb_aligned(g, 16))
        cb_launch(cb, (unscale_k<4>), cb_blocks(cb, n / 4 + 1, 256), 256, 0, n, g, ctl);
    else
        cb_launch(cb, (unscale_k<1>), cb_blocks(cb, n, 256), 256, 0, n, g, ctl);
    KERNEL_CHECK(cb, "unscale_k");
    return 0;
}

int cu_scale(backend_t *be, int64_t n, float *x, float alpha) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    if (cb_aligned(x, 16))
        cb_launch(cb, (scale_k<4>), cb_blocks(cb, n / 4 + 1, 256), 256, 0, n, x, alpha);
    else
        cb_launch(cb, (scale_k<1>), cb_blocks(cb, n, 256), 256, 0, n, x, alpha);
    KERNEL_CHECK(cb, "scale_k");
    return 0;
}

int cu_accumulate(backend_t *be, int64_t n, dtype_t src_dt, const void *src, float *dw) {
    cuda_be_t *cb = cb_of(be);
    if (n <= 0) return 0;
    CB_ENTER(cb);
    DISPATCH_DT(cb, src_dt, T, cb_launch(cb, (accumulate_k<T>), cb_blocks(cb, n, 256), 256, 0,
                                   n, (const T *)src, dw));
    KERNEL_CHECK(cb, "accumulate_k");
    return 0;
}
