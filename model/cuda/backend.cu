/* backend.cu: the CUDA backend object: creation (device, stream, cuDNN and cuBLASLt
 * handles), memory (cudaMalloc with own accounting for peak_memory, growable scratch
 * buffers), transfers on the backend's one stream, the op table that wires in the op
 * families, and device queries (count, names, versions, pinned host memory).
 *
 * Every CUDA/cuDNN/cuBLASLt call is checked; a failure records
 * "<call> failed: <status> at file:line" in the backend's err_t and the op returns -1.
 * Nothing here exits. Not here: the ops themselves (conv.cu, norm.cu, loss.cu, optim.cu,
 * elementwise.cu, linear.cu, augment.cu).
 */
#include "model/cuda/cuda_backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if __has_include(<nccl.h>)
#include <nccl.h>
#define CB_HAVE_NCCL_H 1
#endif

#include "model/cuda/conv.cuh"
#include "model/cuda/conv_graph.cuh"
#include "model/cuda/cuda_impl.cuh"
#include "model/cuda/elementwise.cuh"
#include "model/cuda/fusion.cuh"
#include "model/cuda/graph.cuh"
#include "model/cuda/linear.cuh"
#include "model/cuda/layers.cuh"
#include "model/cuda/loss.cuh"
#include "model/cuda/norm.cuh"
#include "model/cuda/optim.cuh"
#include "model/cuda/pool.cuh"

/* ---- errors ---- */

int cb_fail_call(cuda_be_t *cb, const char *call, const char *status, const char *file, int line) {
    /* call is the stringified expression; keep its function name only */
    size_t n = strcspn(call, "(");
    const char *base = strrchr(file, '/');
    return err_set(&cb->base.err, ERR_RUNTIME, "%.*s failed: %s at %s:%d", (int)n, call,
                   status ? status : "unknown status", base ? base + 1 : file, line);
}

int cb_fail(cuda_be_t *cb, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(&cb->base.err, ERR_RUNTIME, "cuda backend: %s", msg);
}

/* ---- memory ---- */

void *cb_malloc(cuda_be_t *cb, size_t bytes, const char *what) {
    if (bytes == 0) bytes = 256;
    if (cb->n_allocs == cb->cap_allocs) {
        int cap = cb->cap_allocs ? cb->cap_allocs * 2 : 64;
        cb_alloc_t *na = (cb_alloc_t *)realloc(cb->allocs, (size_t)cap * sizeof *na);
        if (!na) {
            cb_fail(cb, "out of host memory for the allocation table");
            return NULL;
        }
        cb->allocs = na;
        cb->cap_allocs = cap;
    }
    void *p = NULL;
    cudaError_t st = cudaMalloc(&p, bytes);
    if (st != cudaSuccess) {
        cudaGetLastError();
        err_set(&cb->base.err, ERR_RUNTIME,
                "out of GPU memory: cudaMalloc of %zu bytes for %s failed (%s) with %zu bytes "
                "already allocated by this run on GPU %d; reduce train.batch_size or enable amp",
                bytes, what, cudaGetErrorString(st), cb->cur_bytes, cb->base.device);
        return NULL;
    }
    cb->allocs[cb->n_allocs].p = p;
    cb->allocs[cb->n_allocs].bytes = bytes;
    cb->n_allocs++;
    cb->cur_bytes += bytes;
    if (cb->cur_bytes > cb->peak_bytes) cb->peak_bytes = cb->cur_bytes;
    return p;
}

void cb_free(cuda_be_t *cb, void *p) {
    if (!p) return;
    for (int i = cb->n_allocs - 1; i >= 0; i--) {
        if (cb->allocs[i].p != p) continue;
        cb->cur_bytes -= cb->allocs[i].bytes;
        cb->allocs[i] = cb->allocs[--cb->n_allocs];
        break;
    }
    cudaFree(p);
}

int cb_grow(cuda_be_t *cb, cb_buf_t *buf, size_t bytes, const char *what) {
    if (buf->bytes >= bytes) return 0;
    size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);   /* 1 MiB steps */
    CUDA_CHECK(cb, cudaStreamSynchronize(cb->stream));   /* nothing may still use the old one */
    cb->mem_gen++;                                       /* recorded graphs that use it are stale */
    cb_free(cb, buf->p);
    buf->p = NULL;
    buf->bytes = 0;
    void *p = cb_malloc(cb, want, what);
    if (!p) return -1;
    buf->p = p;
    buf->bytes = want;
    return 0;
}

/* Tensors of at most CB_SMALL bytes come from (and go back to) a small cache: reusing a
 * block is safe without a sync because all work on it is ordered on the one stream. */
static void *op_alloc(backend_t *be, size_t bytes) {
    cuda_be_t *cb = cb_of(be);
    if (cudaSetDevice(be->device) != cudaSuccess) {
        cb_fail(cb, "cudaSetDevice(%d) failed", be->device);
        return NULL;
    }
    if (bytes <= CB_SMALL) {
        if (cb->n_small > 0) return cb->small[--cb->n_small];
        bytes = CB_SMALL;
    }
    return cb_malloc(cb, bytes, "a tensor");
}

static void op_release(backend_t *be, void *p) {
    cuda_be_t *cb = cb_of(be);
    if (!p) return;
    for (int i = cb->n_allocs - 1; i >= 0; i--) {
        if (cb->allocs[i].p != p) continue;
        if (cb->allocs[i].bytes == CB_SMALL && cb->n_small < (int)(sizeof cb->small / sizeof cb->small[0])) {
            cb->small[cb->n_small++] = p;
            return;
        }
        break;
    }
    cudaSetDevice(be->device);
    cudaStreamSynchronize(cb->stream);   /* queued work may still read p */
    cb->mem_gen++;                       /* and a recorded graph may use it */
    cb_free(cb, p);
}

/* Copies host memory to the device. Pageable sources are staged by the driver before
 * cudaMemcpyAsync returns; pinned ones are not, so for them we wait for the copy, which
 * keeps "the source may be reused on return" true for every caller. */
static int op_upload(backend_t *be, void *dst, const void *src, size_t bytes) {
    cuda_be_t *cb = cb_of(be);
    if (!bytes) return 0;
    CB_ENTER(cb);
    CUDA_CHECK(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb->stream));
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, src) == cudaSuccess && attr.type == cudaMemoryTypeHost)
        CUDA_CHECK(cb, cudaStreamSynchronize(cb->stream));
    cudaGetLastError();   /* cudaPointerGetAttributes may leave an error for plain pointers */
    return 0;
}

static int op_download(backend_t *be, void *dst, const void *src, size_t bytes) {
    cuda_be_t *cb = cb_of(be);
    if (!bytes) return 0;
    CB_ENTER(cb);
    CUDA_CHECK(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(cb, cudaStreamSynchronize(cb->stream));
    return 0;
}

static int op_copy(backend_t *be, void *dst, const void *src, size_t bytes) {
    cuda_be_t *cb = cb_of(be);
    if (!bytes || dst == src) return 0;
    CB_ENTER(cb);
    CUDA_CHECK(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->stream));
    return 0;
}

static int op_zero(backend_t *be, void *dst, size_t bytes) {
    cuda_be_t *cb = cb_of(be);
    if (!bytes) return 0;
    CB_ENTER(cb);
    CUDA_CHECK(cb, cudaMemsetAsync(dst, 0, bytes, cb->stream));
    return 0;
}

static int op_sync(backend_t *be) {
    cuda_be_t *cb = cb_of(be);
    CB_ENTER(cb);
    CUDA_CHECK(cb, cudaStreamSynchronize(cb->stream));
    return 0;
}

static size_t op_peak_memory(backend_t *be) { return cb_of(be)->peak_bytes; }

/* Frees everything the backend allocated (tensors the caller did not release too), the
 * handles and the stream. */
static void op_destroy(backend_t *be) {
    cuda_be_t *cb = cb_of(be);
    if (!cb) return;
    cudaSetDevice(be->device);
    if (cb->stream) cudaStreamSynchronize(cb->stream);
    cu_conv_free_plans(cb);
    cu_conv_graph_free(cb);
    cu_linear_free_plans(cb);
    free(cb->bn_tunes);
    for (int i = 0; i < cb->n_allocs; i++) cudaFree(cb->allocs[i].p);
    free(cb->allocs);
    if (cb->lt) cublasLtDestroy(cb->lt);
    if (cb->cudnn) cudnnDestroy(cb->cudnn);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb);
}

/* The op table, built once at load time and never written afterwards. */
static backend_ops_t make_ops(void) {
    backend_ops_t o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.destroy = op_destroy;
    o.alloc = op_alloc;
    o.release = op_release;
    o.upload = op_upload;
    o.download = op_download;
    o.copy = op_copy;
    o.zero = op_zero;
    o.sync = op_sync;
    o.peak_memory = op_peak_memory;
    o.conv2d_fwd = cu_conv2d_fwd;
    o.conv2d_bwd_data = cu_conv2d_bwd_data;
    o.conv2d_bwd_filter = cu_conv2d_bwd_filter;
    o.bn_stats = cu_bn_stats;
    o.bn_apply = cu_bn_apply;
    o.bn_update_running = cu_bn_update_running;
    o.bn_bwd_reduce = cu_bn_bwd_reduce;
    o.bn_bwd_apply = cu_bn_bwd_apply;
    o.relu_fwd = cu_relu_fwd;
    o.relu_bwd = cu_relu_bwd;
    o.add = cu_add;
    o.relu6_fwd = cu_relu6_fwd;
    o.relu6_bwd = cu_relu6_bwd;
    o.channel_bias_fwd = cu_channel_bias_fwd;
    o.channel_bias_bwd = cu_channel_bias_bwd;
    o.dropout_fwd = cu_dropout_fwd;
    o.dropout_bwd = cu_dropout_bwd;
    o.adaptive_avgpool_fwd = cu_adaptive_avgpool_fwd;
    o.adaptive_avgpool_bwd = cu_adaptive_avgpool_bwd;
    o.avgpool_fwd = cu_avgpool_fwd;
    o.avgpool_bwd = cu_avgpool_bwd;
    o.maxpool_fwd = cu_maxpool_fwd;
    o.maxpool_bwd = cu_maxpool_bwd;
    o.linear_fwd = cu_linear_fwd;
    o.linear_bwd = cu_linear_bwd;
    o.softmax_xent = cu_softmax_xent;
    o.softmax_xent_soft = cu_softmax_xent_soft;
    o.sgd_step = cu_sgd_step;
    o.adamw_step = cu_adamw_step;
    o.step_ctl_update = cu_step_ctl_update;
    o.clip_grad_norm = cu_clip_grad_norm;
    o.ema_update = cu_ema_update;
    o.ema_update_dev = cu_ema_update_dev;
    o.bn_combine = cu_bn_combine;
    o.cast = cu_cast;
    o.unscale_check_finite = cu_unscale_check_finite;
    o.scale = cu_scale;
    o.graph_capture_begin = cu_graph_capture_begin;
    o.graph_capture_end = cu_graph_capture_end;
    o.graph_launch = cu_graph_launch;
    o.graph_free = cu_graph_free;
    o.conv_engine = cu_conv_describe;
    return o;
}
static const backend_ops_t cuda_ops = make_ops();

const backend_ops_t *cu_shared_ops(void) { return &cuda_ops; }

/* ---- public ---- */

int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n < 0 ? 0 : n;
}

int cuda_device_name(int i, char *buf, size_t len) {
    if (!buf || !len) return -1;
    cudaDeviceProp prop;
    if (i < 0 || i >= cuda_device_count() || cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
        cudaGetLastError();
        snprintf(buf, len, "unknown");
        return -1;
    }
    snprintf(buf, len, "%s, %zu MiB, cc %d.%d", prop.name, (size_t)(prop.totalGlobalMem >> 20),
             prop.major, prop.minor);
    return 0;
}

size_t cuda_device_memory(int i) {
    cudaDeviceProp prop;
    if (i < 0 || i >= cuda_device_count() || cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return prop.totalGlobalMem;
}

void cuda_versions(char *buf, size_t len) {
    if (!buf || !len) return;
    int drv = 0, rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    cudaGetLastError();
    size_t dn = cudnnGetVersion(), lv = cublasLtGetVersion();
    char d[32];
    if (drv) snprintf(d, sizeof d, "%d.%d", drv / 1000, (drv % 1000) / 10);
    else snprintf(d, sizeof d, "none");
    int w = snprintf(buf, len, "driver %s, runtime %d.%d, cuDNN %zu.%zu.%zu, cuBLASLt %zu.%zu.%zu", d,
                     rt / 1000, (rt % 1000) / 10, dn / 10000, (dn % 10000) / 100, dn % 100,
                     lv / 10000, (lv % 10000) / 100, lv % 100);
#ifdef CB_HAVE_NCCL_H
    if (w > 0 && (size_t)w < len)
        snprintf(buf + w, len - (size_t)w, ", NCCL %d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
    (void)w;
#endif
}

void *cuda_host_alloc(size_t bytes, err_t *e) {
    void *p = NULL;
    cudaError_t st = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (st != cudaSuccess) {
        cudaGetLastError();
        err_set(e, ERR_RUNTIME, "cudaHostAlloc of %zu bytes of pinned memory failed: %s; lower "
                "data.workers or the batch size", bytes, cudaGetErrorString(st));
        return NULL;
    }
    return p;
}

void cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

void *cuda_backend_stream(backend_t *be) { return (void *)cb_of(be)->stream; }

int cuda_upload_async(backend_t *be, void *dst, const void *host_src, size_t bytes) {
    cuda_be_t *cb = cb_of(be);
    if (!bytes) return 0;
    CB_ENTER(cb);
    CUDA_CHECK(cb, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cb->stream));
    return 0;
}

int cuda_accumulate_half(backend_t *be, int64_t n, dtype_t src_dt, const void *src, float *dw) {
    return cu_accumulate(be, n, src_dt, src, dw);
}

void cuda_backend_clear_caches(backend_t *be) {
    cuda_be_t *cb = cb_of(be);
    cudaSetDevice(be->device);
    cudaStreamSynchronize(cb->stream);
    cu_conv_free_plans(cb);
    cu_conv_graph_free(cb);
    cu_linear_free_plans(cb);
    cb->mem_gen++;   /* a graph recorded before uses the workspace freed here: stale */
    cb_free(cb, cb->ws.p);
    cb->ws.p = NULL;
    cb->ws.bytes = 0;
}

/* Copies the backend's error into e, frees the partial backend, returns NULL. */
static backend_t *create_fail(cuda_be_t *cb, err_t *e) {
    if (e) *e = cb->base.err;
    op_destroy(&cb->base);
    return NULL;
}

#define CREATE_CHECK(x, call) do { if ((x)) { cb_fail_call(cb, call, status_str, __FILE__, __LINE__); \
    return create_fail(cb, e); } } while (0)

backend_t *cuda_backend_create(const backend_opts_t *o, err_t *e) {
    int count = 0;
    cudaError_t cnt_st = cudaGetDeviceCount(&count);
    cudaGetLastError();
    if (cnt_st != cudaSuccess) count = 0;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (count <= 0) {
        /* say why when the runtime gives a reason other than "no device" (old driver...) */
        bool why = cnt_st != cudaSuccess && cnt_st != cudaErrorNoDevice;
        err_set(e, ERR_INPUT, "device: cuda requested but no CUDA GPU is visible (nvidia-smi shows "
                "none / CUDA_VISIBLE_DEVICES=%s%s%s); use device: cpu or auto", vis ? vis : "(unset)",
                why ? "; cudaGetDeviceCount: " : "", why ? cudaGetErrorString(cnt_st) : "");
        return NULL;
    }
    if (o->device < 0 || o->device >= count) {
        err_set(e, ERR_INPUT, "device: cuda device %d requested but %d GPU%s visible "
                "(CUDA_VISIBLE_DEVICES=%s); use parallel.devices with ordinals below %d",
                o->device, count, count == 1 ? " is" : "s are", vis ? vis : "(unset)", count);
        return NULL;
    }
    cuda_be_t *cb = (cuda_be_t *)calloc(1, sizeof *cb);
    if (!cb) {
        err_set(e, ERR_RUNTIME, "out of host memory creating the cuda backend");
        return NULL;
    }
    cb->fusion = o->cuda_fusion & BACKEND_FUSE_EVERY;
    cb->ops = cuda_ops;
    cu_fusion_install(&cb->ops, cb->fusion);
    cb->base.ops = &cb->ops;
    cb->base.kind = BACKEND_CUDA;
    cb->base.device = o->device;
    cb->base.threads = o->threads;
    cb->deterministic = o->deterministic;
    cb->allow_tf32 = o->allow_tf32;
    const char *status_str = NULL;
    cudaError_t cst;
    if ((cst = cudaSetDevice(o->device)) != cudaSuccess) {
        status_str = cudaGetErrorString(cst);
        CREATE_CHECK(1, "cudaSetDevice");
    }
    if ((cst = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        status_str = cudaGetErrorString(cst);
        CREATE_CHECK(1, "cudaStreamCreateWithFlags");
    }
    if ((cst = cudaDeviceGetAttribute(&cb->sm_count, cudaDevAttrMultiProcessorCount, o->device)) != cudaSuccess) {
        status_str = cudaGetErrorString(cst);
        CREATE_CHECK(1, "cudaDeviceGetAttribute");
    }
    cudnnStatus_t dst;
    if ((dst = cudnnCreate(&cb->cudnn)) != CUDNN_STATUS_SUCCESS) {
        status_str = cudnnGetErrorString(dst);
        CREATE_CHECK(1, "cudnnCreate");
    }
    if ((dst = cudnnSetStream(cb->cudnn, cb->stream)) != CUDNN_STATUS_SUCCESS) {
        status_str = cudnnGetErrorString(dst);
        CREATE_CHECK(1, "cudnnSetStream");
    }
    cublasStatus_t bst;
    if ((bst = cublasLtCreate(&cb->lt)) != CUBLAS_STATUS_SUCCESS) {
        status_str = cublasLtGetStatusString(bst);
        CREATE_CHECK(1, "cublasLtCreate");
    }
    if (cb_grow(cb, &cb->ws, (size_t)32 << 20, "the shared workspace")) return create_fail(cb, e);
    /* bn_one_pass: the reductions' tickets, zeroed once (each last block resets its own) */
    if ((cb->fusion & BACKEND_FUSE_BN_ONE_PASS) && cu_bn_counters(cb)) return create_fail(cb, e);
    return &cb->base;
}
