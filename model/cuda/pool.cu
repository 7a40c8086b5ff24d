/* pool.cu: max pooling on the GPU (PyTorch max_pool2d semantics, see backend.h), NHWC.
 *
 * Forward: one thread per output element; consecutive threads take consecutive channels,
 * so a warp reads contiguous memory. The window is scanned in torch's order (rows, then
 * columns, padding skipped) keeping the first maximum, a NaN taking over
 * (`v > max || isnan(v)`), and the chosen input element is copied: half data is exact
 * selection, and the result equals the CPU backend's bit for bit.
 * Backward: one thread per INPUT element gathers, rather than scattering with atomics:
 * it visits the (at most ceil(kernel / stride)^2) windows that contain it in output order,
 * recomputes each window's argmax from x, and adds that window's dy when the argmax is
 * itself, in fp32 from 0, then rounds once. That is the CPU backend's order of additions,
 * so fp32 results match it bit for bit, and nothing depends on thread timing
 * (deterministic without an index buffer; the price is re-reading each window, cheap next
 * to the convolutions around it).
 * Not here: average pooling (elementwise.cu), ceil_mode, dilation.
 */
#include "model/cuda/pool.cuh"

#include <math.h>

#include "model/cuda/cuda_impl.cuh"

/* The first valid input row/column of window o and one past its last. */
__device__ __forceinline__ void pool_span(int o, int stride, int pad, int kernel, int size, int *lo,
                                          int *hi) {
    int a = o * stride - pad, b = a + kernel;
    *lo = a < 0 ? 0 : a;
    *hi = b > size ? size : b;
}

/* The argmax (h * w + col) of window (oh, ow) of channel ch in sample plane xs. */
template <typename T>
__device__ __forceinline__ int window_argmax(const T *__restrict__ xs, pool_shape_t s, int oh, int ow,
                                             int ch) {
    int h0, h1, w0, w1;
    pool_span(oh, s.stride, s.pad, s.kernel, s.h, &h0, &h1);
    pool_span(ow, s.stride, s.pad, s.kernel, s.w, &w0, &w1);
    float m = -INFINITY;
    int best = h0 * s.w + w0;
    for (int ih = h0; ih < h1; ih++)
        for (int iw = w0; iw < w1; iw++) {
            int pos = ih * s.w + iw;
            float v = to_f32(xs[(int64_t)pos * s.c + ch]);
            if (v > m || isnan(v)) {
                m = v;
                best = pos;
            }
        }
    return best;
}

template <typename T>
__global__ void maxpool_fwd_k(pool_shape_t s, const T *__restrict__ x, T *__restrict__ y) {
    pdl_enter();
    int64_t total = (int64_t)s.n * s.p * s.q * s.c, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t plane = (int64_t)s.h * s.w * s.c;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int ch = (int)(i % s.c);
        int64_t r = i / s.c;
        int ow = (int)(r % s.q);
        r /= s.q;
        int oh = (int)(r % s.p);
        int64_t b = r / s.p;
        const T *xs = x + b * plane;
        y[i] = xs[(int64_t)window_argmax(xs, s, oh, ow, ch) * s.c + ch];
    }
}

template <typename T>
__global__ void maxpool_bwd_k(pool_shape_t s, const T *__restrict__ x, const T *__restrict__ dy,
                              T *__restrict__ dx) {
    pdl_enter();
    int64_t total = (int64_t)s.n * s.h * s.w * s.c, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t plane = (int64_t)s.h * s.w * s.c, oplane = (int64_t)s.p * s.q * s.c;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int ch = (int)(i % s.c);
        int64_t r = i / s.c;
        int iw = (int)(r % s.w);
        r /= s.w;
        int ih = (int)(r % s.h);
        int64_t b = r / s.h;
        /* windows oh with oh*stride - pad <= ih < oh*stride - pad + kernel */
        int oh0 = ih + s.pad - s.kernel + 1, ow0 = iw + s.pad - s.kernel + 1;
        oh0 = oh0 <= 0 ? 0 : (oh0 + s.stride - 1) / s.stride;
        ow0 = ow0 <= 0 ? 0 : (ow0 + s.stride - 1) / s.stride;
        int oh1 = (ih + s.pad) / s.stride, ow1 = (iw + s.pad) / s.stride;
        if (oh1 > s.p - 1) oh1 = s.p - 1;
        if (ow1 > s.q - 1) ow1 = s.q - 1;
        const T *xs = x + b * plane;
        int me = ih * s.w + iw;
        float sum = 0.0f;
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++)
                if (window_argmax(xs, s, oh, ow, ch) == me)
                    sum = __fadd_rn(sum, to_f32(dy[b * oplane + ((int64_t)oh * s.q + ow) * s.c + ch]));
        dx[i] = from_f32<T>(sum);
    }
}

/* Checks the geometry the kernels rely on; returns -1 with the error set otherwise. */
static int check_shape(cuda_be_t *cb, const pool_shape_t *s, const char *what) {
    if (s->n < 1 || s->h < 1 || s->w < 1 || s->c < 1 || s->kernel < 1 || s->stride < 1 || s->pad < 0 ||
        2 * s->pad > s->kernel || s->p != (s->h + 2 * s->pad - s->kernel) / s->stride + 1 ||
        s->q != (s->w + 2 * s->pad - s->kernel) / s->stride + 1 || s->p < 1 || s->q < 1)
        return cb_fail(cb, "%s: bad geometry n%d h%d w%d c%d kernel %d stride %d pad %d -> %dx%d", what, s->n,
                       s->h, s->w, s->c, s->kernel, s->stride, s->pad, s->p, s->q);
    return 0;
}

int cu_maxpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    cuda_be_t *cb = cb_of(be);
    if (check_shape(cb, s, "maxpool_fwd")) return -1;
    CB_ENTER(cb);
    int64_t total = (int64_t)s->n * s->p * s->q * s->c;
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (maxpool_fwd_k<T>), cb_blocks(cb, total, 256), 256, 0,
                               *s, (const T *)x, (T *)y));
    KERNEL_CHECK(cb, "maxpool_fwd_k");
    return 0;
}

int cu_maxpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, const void *dy,
                   void *dx) {
    cuda_be_t *cb = cb_of(be);
    if (check_shape(cb, s, "maxpool_bwd")) return -1;
    CB_ENTER(cb);
    int64_t total = (int64_t)s->n * s->h * s->w * s->c;
    DISPATCH_DT(cb, dt, T, cb_launch(cb, (maxpool_bwd_k<T>), cb_blocks(cb, total, 256), 256, 0,
                               *s, (const T *)x, (const T *)dy, (T *)dx));
    KERNEL_CHECK(cb, "maxpool_bwd_k");
    return 0;
}
