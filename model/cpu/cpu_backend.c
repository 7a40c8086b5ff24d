/* cpu_backend.c: creates the CPU backend, owns its memory accounting and workspace, and
 * assembles the op table from the op families in cpu_conv.c, cpu_norm.c, cpu_ops.c and
 * cpu_layers.c.
 *
 * Memory ops work on host memory: alloc is 256-byte aligned and counted, so peak_memory
 * is the high-water mark of live bytes obtained through alloc (internal workspaces are
 * not counted). Not here: the ops themselves.
 */
#include "model/cpu/cpu_backend.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "model/cpu/cpu_impl.h"

#define CPU_ALIGN 256

/* Each allocation carries its size in a 256-byte prefix so release can account for it. */
static void *cpu_alloc(backend_t *be, size_t bytes) {
    cpu_backend_t *c = cpu_of(be);
    size_t body = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (body < bytes || body > SIZE_MAX - CPU_ALIGN) {
        err_set(&be->err, ERR_RUNTIME, "cpu backend: allocation of %zu bytes is too large", bytes);
        return NULL;
    }
    char *raw = aligned_alloc(CPU_ALIGN, body + CPU_ALIGN);
    if (!raw) {
        err_set(&be->err, ERR_RUNTIME, "cpu backend: out of memory allocating %zu bytes "
                "(reduce batch_size or the model)", bytes);
        return NULL;
    }
    memcpy(raw, &bytes, sizeof bytes);
    c->live_bytes += bytes;
    if (c->live_bytes > c->peak_bytes) c->peak_bytes = c->live_bytes;
    return raw + CPU_ALIGN;
}

static void cpu_release(backend_t *be, void *p) {
    if (!p) return;
    char *raw = (char *)p - CPU_ALIGN;
    size_t bytes;
    memcpy(&bytes, raw, sizeof bytes);
    cpu_of(be)->live_bytes -= bytes;
    free(raw);
}

#define MEM_GRAIN ((size_t)1 << 20)   /* bytes per parallel task of zero/copy */

typedef struct mem_task {
    char *dst;
    const char *src;     /* NULL: zero */
    size_t bytes;
} mem_task_t;

static void mem_chunk(void *argp, int chunk) {
    mem_task_t *t = argp;
    size_t lo = (size_t)chunk * MEM_GRAIN;
    size_t n = t->bytes - lo < MEM_GRAIN ? t->bytes - lo : MEM_GRAIN;
    if (t->src) memcpy(t->dst + lo, t->src + lo, n);
    else memset(t->dst + lo, 0, n);
}

/* Copies (non-overlapping, or identical) or zeroes large buffers on all threads; gradient
 * zeroing and parameter copies of a whole model are tens of megabytes. */
static int cpu_copy(backend_t *be, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return 0;
    const char *d = dst, *s = src;
    if (bytes < 2 * MEM_GRAIN || (d < s + bytes && s < d + bytes)) {
        memmove(dst, src, bytes);
        return 0;
    }
    mem_task_t t = {dst, src, bytes};
    cpu_pool_run(&cpu_of(be)->pool, (int)((bytes + MEM_GRAIN - 1) / MEM_GRAIN), mem_chunk, &t);
    return 0;
}

static int cpu_zero(backend_t *be, void *dst, size_t bytes) {
    if (bytes < 2 * MEM_GRAIN) {
        if (bytes) memset(dst, 0, bytes);
        return 0;
    }
    mem_task_t t = {dst, NULL, bytes};
    cpu_pool_run(&cpu_of(be)->pool, (int)((bytes + MEM_GRAIN - 1) / MEM_GRAIN), mem_chunk, &t);
    return 0;
}

static int cpu_sync(backend_t *be) { (void)be; return 0; }

static size_t cpu_peak_memory(backend_t *be) { return cpu_of(be)->peak_bytes; }

/* Makes *buf hold at least n floats (grow-only, 256-byte aligned). */
static float *grow_floats(cpu_backend_t *c, float **buf, size_t *have, size_t n) {
    if (n <= *have) return *buf;
    free(*buf);
    *have = 0;
    size_t bytes = (n * sizeof(float) + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    *buf = aligned_alloc(CPU_ALIGN, bytes);
    if (!*buf) {
        err_set(&c->base.err, ERR_RUNTIME, "cpu backend: out of memory for a %zu-byte workspace",
                bytes);
        return NULL;
    }
    *have = n;
    return *buf;
}

float *cpu_scratch(cpu_backend_t *c, size_t n) { return grow_floats(c, &c->scratch, &c->scratch_floats, n); }

float *cpu_accum_buf(cpu_backend_t *c, size_t n) { return grow_floats(c, &c->accum, &c->accum_floats, n); }

typedef struct round_task {
    dtype_t dt;
    float *dst;
    const float *src;
    int64_t n;
} round_task_t;

#define ROUND_GRAIN 65536

/* bf16 round-to-nearest-even of n floats, branch-free so it vectorises; the same bits as
 * round_bf16 (util/half.h), NaN included (quietened, upper half kept). */
static void round_bf16_n(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        uint32_t q = (u | 0x00400000u) & 0xffff0000u;
        uint32_t o = (u & 0x7fffffffu) > 0x7f800000u ? q : r;
        memcpy(&dst[i], &o, 4);
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* fp16 rounding with the F16C conversion instructions (IEEE round-to-nearest-even, with
 * subnormals, overflow to inf and NaN as util/half.h), 8 floats at a time. */
__attribute__((target("avx,f16c"))) static void round_f16_n_f16c(float *dst, const float *src,
                                                                 int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) dst[i] = round_f16(src[i]);
}
#endif

/* fp16 rounding of n floats: F16C where the CPU has it, else util/half.h per element. */
static void round_f16_n(float *dst, const float *src, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) /* clang 14: no "f16c" here */
    if (__builtin_cpu_supports("f16c")) {
        round_f16_n_f16c(dst, src, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = round_f16(src[i]);
}

void cpu_round_n(dtype_t dt, float *dst, const float *src, int64_t n) {
    if (dt == DT_F16) round_f16_n(dst, src, n);
    else if (dt == DT_BF16) round_bf16_n(dst, src, n);
    else if (dst != src) memmove(dst, src, (size_t)n * sizeof(float));
}

static void round_chunk(void *argp, int chunk) {
    round_task_t *t = argp;
    int64_t lo = (int64_t)chunk * ROUND_GRAIN, hi = lo + ROUND_GRAIN;
    if (hi > t->n) hi = t->n;
    cpu_round_n(t->dt, t->dst + lo, t->src + lo, hi - lo);
}

void cpu_round_copy(cpu_backend_t *c, dtype_t dt, float *dst, const float *src, int64_t n) {
    round_task_t t = {dt, dst, src, n};
    cpu_pool_run(&c->pool, cpu_nchunks(n, ROUND_GRAIN), round_chunk, &t);
}

void cpu_round_array(cpu_backend_t *c, dtype_t dt, float *x, int64_t n) {
    if (dt == DT_F32) return;
    cpu_round_copy(c, dt, x, x, n);
}

static int cpu_upload(backend_t *be, void *dst, const void *src, size_t bytes) {
    return cpu_copy(be, dst, src, bytes);
}

static int cpu_download(backend_t *be, void *dst, const void *src, size_t bytes) {
    return cpu_copy(be, dst, src, bytes);
}

static void cpu_destroy(backend_t *be) {
    cpu_backend_t *c = cpu_of(be);
    cpu_graph_abandon(c);
    cpu_pool_deinit(&c->pool);
#ifdef RUNNER_HAVE_DNNL
    cpu_dnnl_free(c->dnnl);
#endif
    free(c->choices);
    free(c->scratch);
    free(c->accum);
    free(c);
}

/* The cpu backend runs ops as they are issued, so queue order is now. */
static int cpu_host_task(backend_t *be, void (*fn)(void *ctx), void *ctx) {
    (void)be;
    fn(ctx);
    return 0;
}

/* "oneDNN 2.6.3 (isa avx2), OpenBLAS 0.3.21 ... (core Haswell)": what the CPU kernels run
 * on, after ONEDNN_MAX_CPU_ISA / OPENBLAS_CORETYPE. */
static void cpu_libraries(backend_t *be, char *buf, size_t len) {
    (void)be;
    char dnnl[96] = "no oneDNN";
#ifdef RUNNER_HAVE_DNNL
    snprintf(dnnl, sizeof dnnl, "oneDNN %s (isa %s)", cpu_dnnl_version(), cpu_dnnl_isa_name());
#endif
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    snprintf(buf, len, "%s, %s (core %s)", dnnl, cfg ? cfg : "OpenBLAS", core ? core : "?");
}

static const backend_ops_t cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .peak_memory = cpu_peak_memory,
    .conv2d_fwd = cpu_conv2d_fwd,
    .conv2d_bwd_data = cpu_conv2d_bwd_data,
    .conv2d_bwd_filter = cpu_conv2d_bwd_filter,
    .bn_stats = cpu_bn_stats,
    .bn_apply = cpu_bn_apply,
    .bn_update_running = cpu_bn_update_running,
    .bn_bwd_reduce = cpu_bn_bwd_reduce,
    .bn_bwd_apply = cpu_bn_bwd_apply,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .add = cpu_add,
    .relu6_fwd = cpu_relu6_fwd,
    .relu6_bwd = cpu_relu6_bwd,
    .channel_bias_fwd = cpu_channel_bias_fwd,
    .channel_bias_bwd = cpu_channel_bias_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .adaptive_avgpool_fwd = cpu_adaptive_avgpool_fwd,
    .adaptive_avgpool_bwd = cpu_adaptive_avgpool_bwd,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .softmax_xent = cpu_softmax_xent,
    .softmax_xent_soft = cpu_softmax_xent_soft,
    .sgd_step = cpu_sgd_step,
    .adamw_step = cpu_adamw_step,
    .step_ctl_update = cpu_step_ctl_update,
    .clip_grad_norm = cpu_clip_grad_norm,
    .ema_update = cpu_ema_update,
    .ema_update_dev = cpu_ema_update_dev,
    .cast = cpu_cast,
    .unscale_check_finite = cpu_unscale_check_finite,
    .scale = cpu_scale,
    .bn_combine = cpu_bn_combine,
    .host_task = cpu_host_task,
    .conv_engine = cpu_backend_conv_describe,
    .libraries = cpu_libraries,
    .conv2d_bwd_data_accum = cpu_conv2d_bwd_data_accum,
};

backend_t *cpu_backend_create(const backend_opts_t *o, err_t *e) {
    int threads = o ? o->threads : 0;
    if (threads < 0) {
        err_set(e, ERR_INPUT, "cpu backend: threads = %d; use 0 (all cores) or a positive count",
                threads);
        return NULL;
    }
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    cpu_backend_t *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(e, ERR_RUNTIME, "cpu backend: out of memory");
        return NULL;
    }
    c->base.ops = &cpu_ops;
    c->base.kind = BACKEND_CPU;
    c->base.device = 0;
    c->base.threads = threads;
    c->winograd = o && o->cpu_winograd;
    if (cpu_pool_init(&c->pool, threads, e) != 0) {
        free(c);
        return NULL;
    }
    /* OpenBLAS (the classifier GEMM, the GEMM conv engine) has one process-wide thread
     * count; oneDNN's is set per call (cpu_dnnl.c). */
    openblas_set_num_threads(threads);
#ifdef RUNNER_HAVE_DNNL
    c->dnnl = cpu_dnnl_create(threads, e);
    if (!c->dnnl) {
        cpu_pool_deinit(&c->pool);
        free(c);
        return NULL;
    }
    c->avx2_blocked = cpu_dnnl_isa_is_avx2();
#endif
    /* test hook: RUNNER_CPU_CONV_ENGINE=gemm|dnnl|dnnl_blk|dnnl_wino forces the convolution
     * engine as cpu_backend_set_conv_engine does, so that a test can train the same run
     * on two correct engines (two summation orders) through the CLI */
    const char *ce = getenv("RUNNER_CPU_CONV_ENGINE");
    static const char *const engines[] = {"auto", "gemm", "dnnl", "dnnl_blk", "dnnl_wino"};
    for (int i = 0; ce && i < (int)(sizeof engines / sizeof engines[0]); i++)
        if (!strcmp(ce, engines[i])) c->conv_engine = i;
    /* test hook: graphs with CUDA semantics (cpu_graph.c), for the trainer's recorded steps */
    const char *g = getenv("RUNNER_CPU_GRAPHS");
    if (g && *g && strcmp(g, "0")) cpu_graph_install(c, g);
    return &c->base;
}

void cpu_backend_set_conv_engine(backend_t *be, int engine) {
    cpu_backend_t *c = cpu_of(be);
    c->conv_engine = engine;
    c->nchoices = 0;   /* decisions were made for the previous setting */
}
