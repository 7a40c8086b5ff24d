/* cuda_impl.cuh: the private state of the CUDA backend and the helpers every op family
 * (.cu file) shares: the backend struct, the status-checking macros, growable device
 * buffers, dtype dispatch and element conversions.
 *
 * Not here: any op. Each op family lives in its own .cu/.cuh pair (conv, norm, loss,
 * optim, elementwise, linear, augment) and backend.cu wires them into backend_ops_t.
 */
#ifndef RUNNER_MODEL_CUDA_IMPL_CUH
#define RUNNER_MODEL_CUDA_IMPL_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>

#include "model/backend.h"
#include "util/err.h"

/* A device buffer that only grows (workspaces, partial sums). */
typedef struct cb_buf {
    void *p;
    size_t bytes;
} cb_buf_t;

/* One live cudaMalloc allocation, for release() and the memory accounting. */
typedef struct cb_alloc {
    void *p;
    size_t bytes;
} cb_alloc_t;

struct conv_plan;    /* conv.cu */
struct lt_plan;      /* linear.cu */
struct cg_plan;      /* conv_graph.cu */

enum { CB_SMALL = 256, CB_BN_COUNTERS = 1024, CB_PERSIST_KERNELS = 128 };

/* A bn_persist kernel's launch facts (norm_persist.cu): static shared memory, blocks an SM
 * without and with the last dynamic size asked (dyn). */
typedef struct cb_persist_kernel {
    const void *k;
    int nt, nb0, nb_dyn;
    size_t static_smem, dyn;
} cb_persist_kernel_t;

typedef struct cuda_be {
    backend_t base;              /* must be first: backend_t * casts to cuda_be_t * */
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasLtHandle_t lt;
    bool deterministic;
    bool allow_tf32;
    int sm_count;
    /* memory accounting of every cudaMalloc this backend made */
    cb_alloc_t *allocs;
    int n_allocs, cap_allocs;
    size_t cur_bytes, peak_bytes;
    /* released blocks of CB_SMALL bytes kept for reuse (comm_any allocates one per step) */
    void *small[16];
    int n_small;
    /* shared scratch; ops run one after another on the stream, so one of each suffices */
    cb_buf_t ws;                 /* cuDNN / cuBLASLt workspace */
    cb_buf_t scratch;            /* partial reductions (BN, loss) */
    cb_buf_t stage;              /* half conv weight gradients and fp32 GEMM outputs before their final write */
    /* graphs (graph.cu): every reallocation of memory a recording may use (cb_grow,
     * releasing a tensor) advances mem_gen; a graph recorded under an older one is stale */
    uint64_t mem_gen, capture_gen;
    bool capturing;
    /* caches */
    struct conv_plan *convs;
    int n_convs, cap_convs;
    struct lt_plan *lts;
    int n_lts, cap_lts;
    /* issue 25: fusion options (BACKEND_FUSE_*), the cuDNN graph API's plans
     * (conv_graph.cu), and this backend's own op table: the shared one plus the fused
     * slots its options turn on (fusion.cu), so that with none the net runs what it ran */
    unsigned fusion;
    bool last_fused;             /* the last fused op ran fused (not its unfused fallback) */
    /* the BN row kernels' geometry overrides (cuda_backend_bn_geometry; 0: the default) */
    int bn_rows_min, bn_blocks_per_sm, bn_v_max;
    int bn_persist_blocks, bn_persist_slots;   /* bn_persist: at most that many blocks, rows kept (-1: none) */
    bool bn_one_pass;            /* the reductions' one-pass form (needs bn_counters) */
    void *bn_counters;           /* CB_BN_COUNTERS tickets, zero between uses; cb_malloc'd once */
    struct bn_tune *bn_tunes;    /* bn_apply_tune: the row splits timed per apply kernel and shape */
    int n_bn_tunes, cap_bn_tunes;
    /* bn_persist (norm_persist.cu): the device's shared memory and cooperative launch,
     * queried at the first call, and per kernel what its launches need */
    bool persist_queried, persist_coop;
    bool pdl_hold;               /* a cooperative kernel was launched last: the next own kernel
                                    launches without pdl's attribute (cb_launch) */
    int persist_smem_sm, persist_smem_optin, persist_smem_reserved;
    cb_persist_kernel_t persist_kernels[CB_PERSIST_KERNELS];
    int n_persist_kernels;
    struct cg_plan *gplans;
    int n_gplans, cap_gplans;
    backend_ops_t ops;
} cuda_be_t;

static inline cuda_be_t *cb_of(backend_t *be) { return (cuda_be_t *)be; }

/* Records "<call name> failed: <status> at file:line" in the backend's err_t; returns -1. */
int cb_fail_call(cuda_be_t *cb, const char *call, const char *status, const char *file,
                 int line);
/* Records a free-form runtime error; returns -1. */
int cb_fail(cuda_be_t *cb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define CUDA_CHECK(cb, x) do { cudaError_t s_ = (x); if (s_ != cudaSuccess) \
    return cb_fail_call((cb), #x, cudaGetErrorString(s_), __FILE__, __LINE__); } while (0)
#define CUDNN_CHECK(cb, x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) \
    return cb_fail_call((cb), #x, cudnnGetErrorString(s_), __FILE__, __LINE__); } while (0)
#define CUBLAS_CHECK(cb, x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) \
    return cb_fail_call((cb), #x, cublasLtGetStatusString(s_), __FILE__, __LINE__); } while (0)
/* After every kernel launch. */
#define KERNEL_CHECK(cb, name) do { cudaError_t s_ = cudaGetLastError(); if (s_ != cudaSuccess) \
    return cb_fail_call((cb), name "<<<>>>", cudaGetErrorString(s_), __FILE__, __LINE__); } while (0)

/* Makes this backend's device current for the calling thread (DP drives several GPUs
 * from one process). */
#define CB_ENTER(cb) CUDA_CHECK(cb, cudaSetDevice((cb)->base.device))

/* cudaMalloc with accounting; NULL with the backend error set on failure. */
void *cb_malloc(cuda_be_t *cb, size_t bytes, const char *what);
void cb_free(cuda_be_t *cb, void *p);
/* Makes buf hold at least bytes (waits for the stream before freeing the old one).
 * Returns 0 or -1. */
int cb_grow(cuda_be_t *cb, cb_buf_t *buf, size_t bytes, const char *what);

/* Launch geometry: a grid-stride kernel over n items with 256 threads, at most a few
 * waves of the device. */
static inline unsigned cb_blocks(const cuda_be_t *cb, int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    int64_t cap = (int64_t)cb->sm_count * 8;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (unsigned)b;
}

/* ---- launching the backend's own kernels ----
 * cb_launch(cb, kernel, grid, block, smem, args...) is kernel<<<grid, block, smem,
 * cb->stream>>>(args...), or with the pdl fusion option (BACKEND_FUSE_PDL) the same
 * launch with programmatic stream serialization (cudaLaunchKernelEx): the kernel may be
 * scheduled before its predecessor on the stream has finished, so every kernel launched
 * through here starts with pdl_enter(), which waits for that predecessor's completion and
 * memory (a no-op for a kernel launched without the attribute) and then lets the next
 * kernel be scheduled. Nothing a kernel computes changes, only when its blocks may start.
 * Errors are left for KERNEL_CHECK (cudaGetLastError). */
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

template <typename... KArgs, typename... Args>
static inline void cb_launch(const cuda_be_t *cb, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             Args &&...args) {
    /* after bn_persist's cooperative kernel (pdl_hold) a plain launch, so no graph holds a
     * programmatic edge out of a cooperative node */
    if (!(cb->fusion & BACKEND_FUSE_PDL) || cb->pdl_hold) {   /* (the lambda converts as a call would) */
        const_cast<cuda_be_t *>(cb)->pdl_hold = false;
        [&](KArgs... a) { kernel<<<grid, block, smem, cb->stream>>>(a...); }(static_cast<Args &&>(args)...);
        return;
    }
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cb->stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
}

/* ---- device element conversions ---- */
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* Runs the statement list with T bound to the C++ type of dt; an unknown dt fails. */
#define DISPATCH_DT(cb, dt, T, ...) do { switch (dt) { \
    case DT_F32: { typedef float T; __VA_ARGS__; } break; \
    case DT_F16: { typedef __half T; __VA_ARGS__; } break; \
    case DT_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break; \
    default: return cb_fail((cb), "unknown dtype %d at %s:%d", (int)(dt), __FILE__, __LINE__); \
    } } while (0)

/* N elements of T moved as one aligned access. */
template <typename T, int N> struct alignas(sizeof(T) * N) pack_t { T v[N]; };

static inline size_t dt_size(dtype_t dt) { return dt == DT_F32 ? 4 : 2; }

/* True when every pointer is aligned to `align` bytes. */
static inline bool cb_aligned(const void *p, size_t align) {
    return ((uintptr_t)p % align) == 0;
}

#endif
