/* cpu_impl.h: private to model/cpu/. The CPU backend's context, its thread pool and the
 * functions the op files export to cpu_backend.c, which assembles the op table.
 *
 * Nothing outside model/cpu/ includes this file.
 */
#ifndef RUNNER_MODEL_CPU_IMPL_H
#define RUNNER_MODEL_CPU_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/backend.h"
#include "util/half.h"

/* ---- thread pool ------------------------------------------------------------------
 * A fixed set of workers that run fn(arg, chunk) for chunk in [0, nchunks). Threads claim
 * chunks from a shared counter, so a descheduled worker (the machine is shared) delays
 * nothing it has not started. Results never depend on which thread ran a chunk: every
 * task writes its own outputs, and reductions write one partial per chunk that the
 * caller combines in chunk order, so results are the same bits whatever the timing or
 * the thread count. (oneDNN's convolutions run on OpenMP, not here; they repeat bit for
 * bit for a given thread count.) */
typedef void (*cpu_task_fn)(void *arg, int chunk);

typedef struct cpu_pool {
    int nthreads;                 /* including the calling thread */
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t start_cv;
    bool quit;                    /* under mu */
    uint32_t generation;          /* bumped per parallel call (under mu, read atomically) */
    cpu_task_fn fn;               /* the current call, valid while its chunks remain */
    void *arg;
    int nchunks;
    uint64_t ticket;              /* atomic: generation << 32 | next unclaimed chunk */
    int done;                     /* atomic: chunks finished in the current call */
} cpu_pool_t;

int cpu_pool_init(cpu_pool_t *p, int nthreads, err_t *e);
void cpu_pool_deinit(cpu_pool_t *p);
/* Runs fn over nchunks chunks on all threads and returns when every chunk is done. */
void cpu_pool_run(cpu_pool_t *p, int nchunks, cpu_task_fn fn, void *arg);

/* ---- convolution engines ----------------------------------------------------------- */
enum { CPU_CONV_AUTO = 0, CPU_CONV_GEMM = 1, CPU_CONV_DNNL = 2, CPU_CONV_DNNL_BLOCKED = 3,
       CPU_CONV_DNNL_WINOGRAD = 4 };
/* oneDNN variants: direct on NHWC, direct on blocked activations, Winograd (blocked). */
enum { CPU_DNNL_NHWC = 0, CPU_DNNL_BLOCKED = 1, CPU_DNNL_WINOGRAD = 2 };

typedef struct cpu_dnnl cpu_dnnl_t;   /* oneDNN engine, stream and primitive cache */

/* One engine decision: the engine (CPU_CONV_*) for a shape and direction, made once. */
typedef struct cpu_conv_choice {
    conv_shape_t s;
    int which;                    /* 0 fwd, 1 bwd data, 2 bwd filter */
    int engine;
    char impl[48];                /* oneDNN's kernel name ("jit:avx2"), "" for GEMM */
} cpu_conv_choice_t;

typedef struct cpu_graph cpu_graph_t;   /* a recording (cpu_graph.c) */

/* The backend context. */
typedef struct cpu_backend {
    backend_t base;               /* must be first */
    cpu_pool_t pool;
    size_t live_bytes, peak_bytes;
    int conv_engine;              /* CPU_CONV_*: forced engine, or AUTO */
    bool winograd;                /* AUTO may use Winograd (backend_opts_t.cpu_winograd) */
    bool avx2_blocked;            /* oneDNN runs at AVX2 (or AVX): AUTO prefers the blocked
                                   * layout for wide 3x3 layers too (cpu_conv.c) */
    cpu_conv_choice_t *choices;   /* engine decisions so far (cpu_conv.c) */
    int nchoices, choices_cap;
    float *scratch;               /* grow-only workspace for im2col and AMP rounding */
    size_t scratch_floats;
    float *accum;                 /* grow-only: conv2d_bwd_data_accum's data gradient */
    size_t accum_floats;
    cpu_dnnl_t *dnnl;             /* NULL without oneDNN */
    /* graphs (cpu_graph.c, RUNNER_CPU_GRAPHS): ops is graph_ops, plain the cpu table */
    const backend_ops_t *plain;
    backend_ops_t graph_ops;
    cpu_graph_t *rec;             /* the recording in progress, NULL when not recording */
    int stale_every, launches;    /* RUNNER_CPU_GRAPHS=stale: every 5th launch reports stale */
    bool fail_recordings;         /* RUNNER_CPU_GRAPHS=fail[-rank<r>] */
} cpu_backend_t;

static inline cpu_backend_t *cpu_of(backend_t *be) { return (cpu_backend_t *)be; }

/* Returns a workspace of at least n floats (valid until the next call), or NULL with
 * be->err set. */
float *cpu_scratch(cpu_backend_t *c, size_t n);
/* The same for conv2d_bwd_data_accum's own buffer (the convolution uses cpu_scratch). */
float *cpu_accum_buf(cpu_backend_t *c, size_t n);

/* Rounds v to dt (identity for DT_F32). */
static inline float cpu_round(dtype_t dt, float v) {
    return dt == DT_F16 ? round_f16(v) : dt == DT_BF16 ? round_bf16(v) : v;
}
/* Rounds n floats from src into dst (may be equal) to dt on the calling thread, vectorised
 * (F16C for fp16 where the CPU has it); the same bits as cpu_round. */
void cpu_round_n(dtype_t dt, float *dst, const float *src, int64_t n);
/* Rounds n floats in place to dt, in parallel. */
void cpu_round_array(cpu_backend_t *c, dtype_t dt, float *x, int64_t n);
/* Copies n floats from src to dst rounding to dt (dst may equal src). */
void cpu_round_copy(cpu_backend_t *c, dtype_t dt, float *dst, const float *src, int64_t n);

/* ---- op implementations (one family per file) -------------------------------------- */
/* cpu_conv.c */
int cpu_conv2d_fwd(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                   const void *w, void *y);
int cpu_conv2d_bwd_data(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                        const void *w, void *dx);
int cpu_conv2d_bwd_filter(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                          const void *dy, float *dw);
int cpu_conv2d_bwd_data_accum(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                              const void *w, void *dx);
/* cpu_dnnl.c: 0 ok, -1 error (be->err set); only called when c->dnnl != NULL */
cpu_dnnl_t *cpu_dnnl_create(int threads, err_t *e);
void cpu_dnnl_free(cpu_dnnl_t *d);
/* which: 0 fwd (a x, b w, out y), 1 bwd data (a dy, b w, out dx), 2 bwd filter (a x,
 * b dy, out dw accumulated). variant: CPU_DNNL_*. */
int cpu_dnnl_conv(cpu_backend_t *c, int which, const conv_shape_t *s, int variant,
                  const float *a, const float *b, float *out);
/* Whether oneDNN implements (s, which, variant) with a real (non-reference) kernel on this
 * CPU and ISA limit: 1 yes (*impl: its name, e.g. "jit:avx2"), 0 no, -1 error. Builds and
 * caches the primitive, so asking costs nothing later. */
int cpu_dnnl_query(cpu_dnnl_t *d, const conv_shape_t *s, int which, int variant,
                   const char **impl, err_t *e);
/* The ISA oneDNN dispatches to (after ONEDNN_MAX_CPU_ISA): "avx2", "avx512_core", ...;
 * and its version ("2.6.3"). */
const char *cpu_dnnl_isa_name(void);
const char *cpu_dnnl_version(void);
/* Whether oneDNN dispatches to the AVX/AVX2 family (below AVX-512, above SSE4.1). */
bool cpu_dnnl_isa_is_avx2(void);

/* cpu_norm.c */
int cpu_bn_stats(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean,
                 float *var);
int cpu_bn_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                 const float *var, const float *gamma, const float *beta, float eps,
                 const void *z, act_kind_t act, void *y);
int cpu_bn_update_running(backend_t *be, int c, const float *mean, const float *var,
                          int64_t count, float momentum, float *run_mean, float *run_var);
int cpu_bn_bwd_reduce(backend_t *be, int64_t m, int c, dtype_t dt, const void *x,
                      const void *y, act_kind_t act, const void *dy, const float *mean,
                      const float *var, const float *gamma, const float *beta, float eps,
                      float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta);
int cpu_bn_bwd_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x,
                     const void *y, act_kind_t act, const void *dy, const float *mean,
                     const float *var, const float *gamma, const float *beta, float eps,
                     const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx,
                     void *dz);

/* cpu_ops.c */
int cpu_relu_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y);
int cpu_relu_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx);
int cpu_add(backend_t *be, int64_t n, dtype_t dt, const void *a, const void *b, void *y);
int cpu_avgpool_fwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *x, void *y);
int cpu_avgpool_bwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *dy, void *dx);
int cpu_maxpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y);
int cpu_maxpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, const void *dy,
                    void *dx);
int cpu_linear_fwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                   const void *w, const float *b, void *y);
int cpu_linear_bwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                   const void *w, const void *dy, void *dx, float *dw, float *db);
int cpu_softmax_xent(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                     const int32_t *labels, float smoothing, float grad_scale,
                     const step_ctl_t *ctl, void *dlogits, float *loss_sum, int32_t *correct);
int cpu_softmax_xent_soft(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                          const float *targets, float grad_scale, const step_ctl_t *ctl,
                          void *dlogits, float *loss_sum, int32_t *correct);
int cpu_sgd_step(backend_t *be, int64_t n, float *p, const float *g, float *buf, double lr,
                 double momentum, double dampening, double weight_decay, bool nesterov,
                 const step_ctl_t *ctl);
int cpu_adamw_step(backend_t *be, int64_t n, float *p, const float *g, float *m, float *v,
                   double lr, double beta1, double beta2, double eps, double weight_decay,
                   const step_ctl_t *ctl);
int cpu_step_ctl_update(backend_t *be, step_ctl_t *ctl);
int cpu_clip_grad_norm(backend_t *be, int64_t n, float *g, double max_norm, const step_ctl_t *ctl,
                       float *norm);
int cpu_ema_update(backend_t *be, int64_t n, float *ema, const float *x, double decay);
int cpu_ema_update_dev(backend_t *be, int64_t n, float *ema, const float *x, const double *decay);
int cpu_bn_combine(backend_t *be, int world, int c, const float *gathered, int64_t count, float *mean,
                   float *var);
int cpu_cast(backend_t *be, int64_t n, const void *src, dtype_t src_dt, void *dst,
             dtype_t dst_dt);
int cpu_unscale_check_finite(backend_t *be, int64_t n, float *g, step_ctl_t *ctl);
int cpu_scale(backend_t *be, int64_t n, float *x, float alpha);

/* cpu_graph.c: makes c's op table the recording one (graph_* ops with CUDA graph
 * semantics); mode: RUNNER_CPU_GRAPHS ("stale", "fail", "fail-rank<r>": see there).
 * abandon: frees a recording left open (destroy). */
void cpu_graph_install(cpu_backend_t *c, const char *mode);
void cpu_graph_abandon(cpu_backend_t *c);
/* cpu_layers.c */
int cpu_relu6_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y);
int cpu_relu6_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx);
int cpu_channel_bias_fwd(backend_t *be, int64_t m, int c, dtype_t dt, const float *b, void *y);
int cpu_channel_bias_bwd(backend_t *be, int64_t m, int c, dtype_t dt, const void *dy, float *db);
int cpu_dropout_fwd(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                    const dropout_key_t *key, const void *x, void *y);
int cpu_dropout_bwd(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p, uint32_t node,
                    const dropout_key_t *key, const void *dy, void *dx);
int cpu_adaptive_avgpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y);
int cpu_adaptive_avgpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *dy, void *dx);

/* Splits [0, n) into chunks of `grain` elements: chunk i covers [i*grain, min(n, ...)). */
static inline int cpu_nchunks(int64_t n, int64_t grain) {
    return n <= 0 ? 0 : (int)((n + grain - 1) / grain);
}

#endif
