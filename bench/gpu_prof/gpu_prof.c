/* gpu_prof.c: the op-kind profiler of bench_gpu_bench --profile (contract in gpu_prof.h).
 *
 * Bytes per call are the fewest a kernel doing the op must move through device memory:
 * each input read once, each output written once, a read-modify-write counted twice;
 * e = bytes per activation element (2 for fp16/bf16, 4 for fp32), per-channel vectors
 * fp32. m = rows (n*h*w), c = channels.
 *   bn_stats            read m*c*e; write 2c*4 (mean, var)
 *   bn_apply            read m*c*e (x) [+ m*c*e (z)] + 4c*4; write m*c*e (y)
 *   bn_update_running   read 4c*4; write 2c*4
 *   (bn_stats_running, bn_fold_running's op: counted under bn_stats, + 2c*4 read, 2c*4
 *                       written: the running statistics)
 *   bn_bwd_reduce       read 2*m*c*e (x, dy) [+ m*c*e (y, the relu mask)] + 2c*4 (mean,
 *                       var) + 2c*4 (dgamma, dbeta); write 4c*4
 *   bn_bwd_apply        read 2*m*c*e [+ m*c*e (y)] + 5c*4; write m*c*e (dx) [+ m*c*e (dz)]
 *     either with the mask recomputed (bn_remask; cuda_backend_last_fused 1 after the
 *     call): not y but + 2c*4 (gamma, beta; the apply has gamma already: + c*4)
 *   bn_mask_bits' ops, under the same kinds: bn_apply_mask + m*c/8 written (the bits);
 *     bn_bwd_reduce_mask, bn_bwd_apply_mask: m*c/8 read (the bits) instead of y
 *   bn_dual_add's ops, under the same kinds (the shortcut's BN inside): bn_apply_dual
 *     read 2*m*c*e (x, x2) + 8c*4; write m*c*e (y) [+ m*c/8 bits];
 *     bn_bwd_reduce_dual read 3*m*c*e (x, x2, dy) + m*c*e (y) or m*c/8 (bits) + 4c*4,
 *     write 8c*4; bn_bwd_apply_dual read 3*m*c*e + the mask + 10c*4, write 2*m*c*e
 *   relu_fwd            2n*e;  relu_bwd, add: 3n*e
 *   avgpool_fwd/bwd     n*hw*c*e + n*c*e;  maxpool_fwd n*h*w*c*e + n*p*q*c*e;
 *   maxpool_bwd         2 * n*h*w*c*e (x read, dx written) + n*p*q*c*e (dy)
 *   softmax_xent(_soft) read n*C*e (+ n*4 labels | n*C*4 targets); write n*C*e (dlogits)
 *   sgd_step            read p, g, buf; write p, buf: 5n*4   adamw_step: 7n*4
 *   clip_grad_norm      read n*4, write n*4 (the worst case, when it clips)
 *   unscale_check_finite, scale: 2n*4   ema_update: 3n*4   cast: n*(e_src + e_dst)
 *   zero: bytes   copy: 2*bytes   upload/download: the bytes over the host link (not
 *                 device memory: left out of the memory-bound total)
 *   conv (each direction): x + w + y once, at e (weight gradient: written fp32);
 *                 FLOPs 2*n*p*q*k*r*s*c
 *   linear: fwd n*in + out*in + n*out at e + out*4; bwd x, w, dy read, dx written, dw,
 *           db read-modify-written in fp32; FLOPs 2*n*in*out (fwd), 4*n*in*out (bwd)
 *   fused convolutions (issue 25; the byte model's rules, model/net_fusion.h): the conv's
 *   bytes plus what its epilogue reads and writes, when it ran fused:
 *     conv_fwd_bn_stats    + 24k (sum, sum of squares; mean, var from them)
 *     conv_bwd_data_bn     + n*h*w*c*e (bn_x) [+ n*h*w*c*e (relu_y)] + 32c (as bn_bwd_reduce's vectors)
 *     conv_bwd_data_accum  + n*h*w*c*e (the gradient it adds to)
 *   when a fused op ran its unfused fallback (cuda_backend_last_fused 0; always on the
 *   CPU), the conv kind gets the conv's bytes and the pseudo-kind fused_fallback (calls,
 *   bytes, no GPU time of its own: that is in the conv kind) the unfused kernel's:
 *   bn_stats', bn_bwd_reduce's or add's bytes above.
 * "Memory-bound" kinds are all but conv_* and linear_* (matrix work) and upload/download.
 */
#include "bench/gpu_prof/gpu_prof.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/cuda_backend.h"
#include "util/clock.h"

int gpu_prof_spin(void *stream, long long cycles);   /* spin.cu */

/* One line per backend op profiled: add a line here and a wrapper below for a new op. */
#define GPU_PROF_KINDS(X)                                                                          \
    X(conv_fwd) X(conv_bwd_data) X(conv_bwd_filter) X(conv_fwd_bn_stats) X(conv_bwd_data_bn)        \
    X(conv_bwd_data_accum) X(linear_fwd) X(linear_bwd) X(bn_stats)                                 \
    X(bn_apply) X(bn_update_running) X(bn_bwd_reduce) X(bn_bwd_apply) X(relu_fwd) X(relu_bwd)      \
    X(add) X(avgpool_fwd) X(avgpool_bwd) X(maxpool_fwd) X(maxpool_bwd) X(softmax_xent)              \
    X(softmax_xent_soft) X(sgd_step) X(adamw_step) X(step_ctl_update) X(clip_grad_norm)            \
    X(ema_update) X(cast) X(unscale_check_finite) X(scale) X(relu6_fwd) X(relu6_bwd) X(channel_bias_fwd)  \
    X(channel_bias_bwd) X(dropout_fwd) X(dropout_bwd) X(adaptive_avgpool_fwd) X(adaptive_avgpool_bwd)   \
    X(fused_fallback) X(zero) X(copy) X(upload) X(download)

enum {
#define X(k) K_##k,
    GPU_PROF_KINDS(X)
#undef X
    K_COUNT
};
static const char *const kind_names[K_COUNT] = {
#define X(k) #k,
    GPU_PROF_KINDS(X)
#undef X
};

/* matrix work (cuDNN, cuBLASLt) and host transfers: outside the memory-bound total */
static bool memory_bound(int k) { return k > K_linear_bwd && k != K_upload && k != K_download; }

typedef struct call_rec {
    int kind;
    double flops;          /* replayed mode: what collect adds per replay (kind sums, then) */
    double fallback_bytes; /* replayed mode: a fused op's unfused fallback (fused_fallback) */
    bool fallback;
    int64_t m;      /* the call's rows and channels (BN: m x c; conv: n*p*q x k), 0: not said */
    int c;
    double bytes;
} call_rec_t;

typedef struct kind_sum {
    int64_t calls, late;
    double host_us, gpu_ms, bytes, flops;
} kind_sum_t;

/* GPU time per (kind, rows, channels): which layers' calls cost what */
enum { PROF_SHAPES = 512 };
typedef struct shape_sum {
    int kind;
    int64_t m;
    int c;
    int64_t calls;
    double gpu_ms, bytes;
} shape_sum_t;

struct gpu_prof {
    backend_t *be;
    const backend_ops_t *orig;
    backend_ops_t ops;
    bool timing;
    bool replayed;            /* gpu_prof_replayed: events as graph nodes, sums per replay */
    double span_ms;           /* replayed mode: first event to last, summed over the replays */
    double head_us;
    long long spin_cycles;
    void *stream;
    cudaEvent_t *ev;          /* pairs: 2i before call i, 2i + 1 after */
    call_rec_t *recs;
    int n_recs, cap_recs;
    kind_sum_t k[K_COUNT];
    shape_sum_t shapes[PROF_SHAPES];
    int n_shapes;
};

static gpu_prof_t *g_prof;   /* the one profiled backend of the process */
/* The shape of the call a wrapper is about to make (SHAPE), taken by prof_leave. */
static int64_t g_shape_m;
static int g_shape_c;
#define SHAPE(m_, c_) (g_shape_m = (int64_t)(m_), g_shape_c = (int)(c_))

/* Adds one call to its (kind, m, c) line (ms: its GPU time, 0 untimed; calls past
 * PROF_SHAPES lines: not kept). */
static void shape_add(gpu_prof_t *p, const call_rec_t *r, double ms) {
    int i = 0;
    while (i < p->n_shapes && !(p->shapes[i].kind == r->kind && p->shapes[i].m == r->m && p->shapes[i].c == r->c)) i++;
    if (i == p->n_shapes) {
        if (i == PROF_SHAPES) return;
        p->shapes[i] = (shape_sum_t){r->kind, r->m, r->c, 0, 0.0, 0.0};
        p->n_shapes++;
    }
    p->shapes[i].calls++;
    p->shapes[i].gpu_ms += ms;
    p->shapes[i].bytes += r->bytes;
}

/* bytes per element of dt as this backend stores it (CUDA: 2 for half; the CPU: 4) */
static double es_of(const backend_t *be, dtype_t dt) { return (double)backend_elem_size(be, dt); }
#define es(dt) es_of(be, dt)

/* Room for cap records and their event pairs. */
static int prof_reserve(gpu_prof_t *p, int cap) {
    if (cap <= p->cap_recs) return 0;
    call_rec_t *r = realloc(p->recs, (size_t)cap * sizeof *r);
    if (r) p->recs = r;
    cudaEvent_t *ev = r ? realloc(p->ev, (size_t)cap * 2 * sizeof *ev) : NULL;
    if (ev) p->ev = ev;
    if (!r || !ev) return -1;
    for (int i = 2 * p->cap_recs; i < 2 * cap; i++)
        if (cudaEventCreate(&p->ev[i]) != cudaSuccess) {
            for (int j = 2 * p->cap_recs; j < i; j++) cudaEventDestroy(p->ev[j]);
            return -1;
        }
    p->cap_recs = cap;
    return 0;
}

/* Replayed mode: the first event of a new record as a graph node, only while the stream
 * is being captured (the trainer's normal first step is not profiled) and only into the
 * events made beforehand (nothing is created during a capture). */
static int prof_enter_replayed(gpu_prof_t *p) {
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)p->stream, &st) != cudaSuccess || st != cudaStreamCaptureStatusActive ||
        p->n_recs == p->cap_recs)
        return -1;
    int slot = p->n_recs;
    if (cudaEventRecordWithFlags(p->ev[2 * slot], (cudaStream_t)p->stream, cudaEventRecordExternal) != cudaSuccess)
        return -1;
    return slot;
}

/* Before a call: with timing, the head start and the first event of a new record. */
static int prof_enter(gpu_prof_t *p) {
    if (!p->timing) return -1;
    if (p->replayed) return prof_enter_replayed(p);
    if (p->n_recs == p->cap_recs && prof_reserve(p, p->cap_recs ? 2 * p->cap_recs : 1024)) return -1;
    int slot = p->n_recs;
    if (gpu_prof_spin(p->stream, p->spin_cycles) ||
        cudaEventRecord(p->ev[2 * slot], (cudaStream_t)p->stream) != cudaSuccess)
        return -1;
    return slot;
}

/* Replayed mode, after a captured call: its second event as a graph node and its record
 * (the sums are added per replay, by collect). */
static void prof_leave_replayed(gpu_prof_t *p, int kind, int slot, double bytes, double flops, bool fallback,
                                double fallback_bytes) {
    if (slot >= 0 &&
        cudaEventRecordWithFlags(p->ev[2 * slot + 1], (cudaStream_t)p->stream, cudaEventRecordExternal) ==
            cudaSuccess) {
        p->recs[slot] = (call_rec_t){.kind = kind, .flops = flops, .fallback_bytes = fallback_bytes,
                                     .fallback = fallback, .m = g_shape_m, .c = g_shape_c, .bytes = bytes};
        p->n_recs++;
    }
    g_shape_m = 0;
    g_shape_c = 0;
}

/* After a call: host time, the second event, the sums. */
static void prof_leave(gpu_prof_t *p, int kind, int slot, double t0, double bytes, double flops) {
    if (p->replayed) {
        prof_leave_replayed(p, kind, slot, bytes, flops, false, 0.0);
        return;
    }
    double host_us = (now_s() - t0) * 1e6;
    kind_sum_t *s = &p->k[kind];
    s->calls++;
    s->host_us += host_us;
    s->bytes += bytes;
    s->flops += flops;
    if (slot >= 0 && cudaEventRecord(p->ev[2 * slot + 1], (cudaStream_t)p->stream) == cudaSuccess) {
        p->recs[slot].kind = kind;
        p->recs[slot].m = g_shape_m;
        p->recs[slot].c = g_shape_c;
        p->recs[slot].bytes = bytes;
        p->n_recs++;
        s->late += host_us > p->head_us;
    } else if (!p->timing && g_shape_m > 0) {   /* untimed (a cpu backend): calls and bytes per shape */
        call_rec_t r = {.kind = kind, .m = g_shape_m, .c = g_shape_c, .bytes = bytes};
        shape_add(p, &r, 0.0);
    }
    g_shape_m = 0;
    g_shape_c = 0;
}

/* The body every wrapper shares: enter, the real op, leave with its bytes and FLOPs. */
#define PROF_CALL(kind, call, bytes, flops)                      \
    gpu_prof_t *p = g_prof;                                      \
    int slot = prof_enter(p);                                    \
    double t0 = now_s();                                         \
    int rc = p->orig->call;                                      \
    prof_leave(p, K_##kind, slot, t0, (bytes), (flops));         \
    return rc

/* A fused op's call (see the top): the conv kind with conv_b + epi_b when it ran fused,
 * else conv_b there and unfused_b under fused_fallback. */
#define PROF_FUSED(kname, call, conv_b, epi_b, unfused_b, flops)                      \
    gpu_prof_t *p = g_prof;                                                          \
    int slot = prof_enter(p);                                                        \
    double t0 = now_s();                                                             \
    int rc = p->orig->call;                                                          \
    bool fused = be->kind == BACKEND_CUDA && cuda_backend_last_fused(be);            \
    if (p->replayed) {                                                               \
        prof_leave_replayed(p, K_##kname, slot, (conv_b) + (fused ? (epi_b) : 0.0), (flops), !fused, \
                            (unfused_b));                                            \
        return rc;                                                                   \
    }                                                                                \
    prof_leave(p, K_##kname, slot, t0, (conv_b) + (fused ? (epi_b) : 0.0), (flops)); \
    if (!fused) {                                                                    \
        p->k[K_fused_fallback].calls++;                                              \
        p->k[K_fused_fallback].bytes += (unfused_b);                                 \
    }                                                                                \
    return rc

static double conv_flops(const conv_shape_t *s) {
    return 2.0 * s->n * s->p * s->q * (double)s->k * s->r * s->s * s->c;
}
static double conv_bytes(const backend_t *be, const conv_shape_t *s, dtype_t dt, double w_es) {
    return es(dt) * ((double)s->n * s->h * s->w * s->c + (double)s->n * s->p * s->q * s->k) +
           w_es * (double)s->k * s->r * s->s * s->c;
}

static int w_conv_fwd(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w, void *y) {
    SHAPE((int64_t)s->n * s->p * s->q, s->k);
    PROF_CALL(conv_fwd, conv2d_fwd(be, s, dt, x, w, y), conv_bytes(be, s, dt, es(dt)), conv_flops(s));
}
static int w_conv_bwd_data(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w,
                           void *dx) {
    SHAPE((int64_t)s->n * s->p * s->q, s->k);
    PROF_CALL(conv_bwd_data, conv2d_bwd_data(be, s, dt, dy, w, dx), conv_bytes(be, s, dt, es(dt)), conv_flops(s));
}
static int w_conv_bwd_filter(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *dy,
                             float *dw) {
    SHAPE((int64_t)s->n * s->p * s->q, s->k);
    PROF_CALL(conv_bwd_filter, conv2d_bwd_filter(be, s, dt, x, dy, dw), conv_bytes(be, s, dt, 8.0), conv_flops(s));
}
static int w_conv_fwd_bn_stats(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x, const void *w,
                               void *y, float *mean, float *var) {
    double m = (double)s->n * s->p * s->q;
    PROF_FUSED(conv_fwd_bn_stats, conv2d_fwd_bn_stats(be, s, dt, x, w, y, mean, var), conv_bytes(be, s, dt, es(dt)),
               24.0 * s->k, es(dt) * m * s->k + 8.0 * s->k, conv_flops(s));
}
static int w_conv_bwd_data_bn(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w,
                              void *dx, const void *bn_x, const void *relu_y, act_kind_t act, const float *mean,
                              const float *var, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma,
                              float *dbeta) {
    double mc = (double)s->n * s->h * s->w * s->c;
    PROF_FUSED(conv_bwd_data_bn,
               conv2d_bwd_data_bn(be, s, dt, dy, w, dx, bn_x, relu_y, act, mean, var, eps, sum_dy, sum_dy_xhat, dgamma,
                                  dbeta),
               conv_bytes(be, s, dt, es(dt)), es(dt) * mc * (relu_y ? 2 : 1) + 32.0 * s->c,
               es(dt) * mc * (relu_y ? 3 : 2) + 32.0 * s->c, conv_flops(s));
}
static int w_conv_bwd_data_accum(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy, const void *w,
                                 void *dx) {
    double nx = (double)s->n * s->h * s->w * s->c;
    SHAPE((int64_t)s->n * s->p * s->q, s->k);
    PROF_FUSED(conv_bwd_data_accum, conv2d_bwd_data_accum(be, s, dt, dy, w, dx), conv_bytes(be, s, dt, es(dt)),
               es(dt) * nx, 3.0 * es(dt) * nx, conv_flops(s));
}
static int w_linear_fwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x, const void *w,
                        const float *b, void *y) {
    PROF_CALL(linear_fwd, linear_fwd(be, n, in, out, dt, x, w, b, y),
              es(dt) * ((double)n * in + (double)out * in + (double)n * out) + 4.0 * out, 2.0 * n * in * out);
}
static int w_linear_bwd(backend_t *be, int n, int in, int out, dtype_t dt, const void *x, const void *w,
                        const void *dy, void *dx, float *dw, float *db) {
    PROF_CALL(linear_bwd, linear_bwd(be, n, in, out, dt, x, w, dy, dx, dw, db),
              es(dt) * ((double)n * in * (dx ? 2 : 1) + (double)out * in + (double)n * out) +
                  8.0 * ((double)out * in + out),
              (dx ? 4.0 : 2.0) * n * in * out);
}
static int w_bn_stats(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var) {
    SHAPE(m, c);
    PROF_CALL(bn_stats, bn_stats(be, m, c, dt, x, mean, var), es(dt) * m * c + 8.0 * c, 0);
}
/* bn_fold_running's one op: counted as bn_stats, with the running update's bytes */
static int w_bn_stats_running(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var,
                              int64_t count, float momentum, float *run_mean, float *run_var) {
    SHAPE(m, c);
    PROF_CALL(bn_stats, bn_stats_running(be, m, c, dt, x, mean, var, count, momentum, run_mean, run_var),
              es(dt) * m * c + 8.0 * c + 16.0 * c, 0);
}
static int w_bn_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                      const float *var, const float *gamma, const float *beta, float eps, const void *z,
                      act_kind_t act, void *y) {
    SHAPE(m, c);
    PROF_CALL(bn_apply, bn_apply(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y),
              es(dt) * m * c * (z ? 3 : 2) + 16.0 * c, 0);
}
static int w_bn_apply_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                           const float *var, const float *gamma, const float *beta, float eps, const void *z,
                           act_kind_t act, void *y, uint8_t *mask) {
    SHAPE(m, c);
    PROF_CALL(bn_apply, bn_apply_mask(be, m, c, dt, x, mean, var, gamma, beta, eps, z, act, y, mask),
              es(dt) * m * c * (z ? 3 : 2) + m * c / 8.0 + 16.0 * c, 0);
}
static int w_bn_update_running(backend_t *be, int c, const float *mean, const float *var, int64_t count,
                               float momentum, float *run_mean, float *run_var) {
    SHAPE(1, c);
    PROF_CALL(bn_update_running, bn_update_running(be, c, mean, var, count, momentum, run_mean, run_var),
              24.0 * c, 0);
}
/* Whether the BN backward op just called recomputed its mask instead of reading y. */
static bool remasked(backend_t *be) { return be->kind == BACKEND_CUDA && cuda_backend_last_fused(be); }

static int w_bn_bwd_reduce(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                           act_kind_t act, const void *dy, const float *mean, const float *var, const float *gamma,
                           const float *beta, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma,
                           float *dbeta) {
    SHAPE(m, c);
    PROF_CALL(bn_bwd_reduce,
              bn_bwd_reduce(be, m, c, dt, x, y, act, dy, mean, var, gamma, beta, eps, sum_dy, sum_dy_xhat, dgamma,
                            dbeta),
              remasked(be) ? es(dt) * m * c * 2 + 40.0 * c : es(dt) * m * c * (y ? 3 : 2) + 32.0 * c, 0);
}
static int w_bn_bwd_apply(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                          act_kind_t act, const void *dy, const float *mean, const float *var, const float *gamma,
                          const float *beta, float eps, const float *sum_dy, const float *sum_dy_xhat, int64_t count,
                          void *dx, void *dz) {
    SHAPE(m, c);
    PROF_CALL(bn_bwd_apply,
              bn_bwd_apply(be, m, c, dt, x, y, act, dy, mean, var, gamma, beta, eps, sum_dy, sum_dy_xhat, count, dx,
                           dz),
              remasked(be) ? es(dt) * m * c * (3 + (dz ? 1 : 0)) + 24.0 * c
                           : es(dt) * m * c * (3 + (y ? 1 : 0) + (dz ? 1 : 0)) + 20.0 * c, 0);
}
static int w_bn_bwd_reduce_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                                act_kind_t act, const void *dy, const float *mean, const float *var,
                                const float *gamma, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma,
                                float *dbeta, const uint8_t *mask) {
    SHAPE(m, c);
    PROF_CALL(bn_bwd_reduce,
              bn_bwd_reduce_mask(be, m, c, dt, x, y, act, dy, mean, var, gamma, eps, sum_dy, sum_dy_xhat, dgamma,
                                 dbeta, mask),
              es(dt) * m * c * 2 + m * c / 8.0 + 32.0 * c, 0);
}
static int w_bn_bwd_apply_mask(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                               act_kind_t act, const void *dy, const float *mean, const float *var,
                               const float *gamma, float eps, const float *sum_dy, const float *sum_dy_xhat,
                               int64_t count, void *dx, void *dz, const uint8_t *mask) {
    SHAPE(m, c);
    PROF_CALL(bn_bwd_apply,
              bn_bwd_apply_mask(be, m, c, dt, x, y, act, dy, mean, var, gamma, eps, sum_dy, sum_dy_xhat, count, dx,
                                dz, mask),
              es(dt) * m * c * (3 + (dz ? 1 : 0)) + m * c / 8.0 + 20.0 * c, 0);
}
/* the mask's bytes: the bits, else y */
static double mask_b(const backend_t *be, const void *bits, int64_t m, int c, dtype_t dt) {
    return bits ? m * c / 8.0 : es(dt) * m * c;
}
static int w_bn_apply_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                           const float *var, const float *gamma, const float *beta, const void *x2, const float *mean2,
                           const float *var2, const float *gamma2, const float *beta2, float eps, act_kind_t act,
                           void *y, uint8_t *mask) {
    SHAPE(m, c);
    PROF_CALL(bn_apply,
              bn_apply_dual(be, m, c, dt, x, mean, var, gamma, beta, x2, mean2, var2, gamma2, beta2, eps, act, y,
                            mask),
              es(dt) * m * c * 3 + (mask ? m * c / 8.0 : 0.0) + 32.0 * c, 0);
}
static int w_bn_bwd_reduce_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                                act_kind_t act, const void *dy, const float *mean, const float *var, const void *x2,
                                const float *mean2, const float *var2, float eps, float *sum_dy, float *sum_dy_xhat,
                                float *dgamma, float *dbeta, float *sum_dy2, float *sum_dy_xhat2, float *dgamma2,
                                float *dbeta2, const uint8_t *mask) {
    SHAPE(m, c);
    PROF_CALL(bn_bwd_reduce,
              bn_bwd_reduce_dual(be, m, c, dt, x, y, act, dy, mean, var, x2, mean2, var2, eps, sum_dy, sum_dy_xhat,
                                 dgamma, dbeta, sum_dy2, sum_dy_xhat2, dgamma2, dbeta2, mask),
              es(dt) * m * c * 3 + mask_b(be, mask, m, c, dt) + 48.0 * c, 0);
}
static int w_bn_bwd_apply_dual(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                               act_kind_t act, const void *dy, const float *mean, const float *var, const float *gamma,
                               const void *x2, const float *mean2, const float *var2, const float *gamma2, float eps,
                               const float *sum_dy, const float *sum_dy_xhat, int64_t count, const float *sum_dy2,
                               const float *sum_dy_xhat2, int64_t count2, void *dx, void *dx2, const uint8_t *mask) {
    SHAPE(m, c);
    PROF_CALL(bn_bwd_apply,
              bn_bwd_apply_dual(be, m, c, dt, x, y, act, dy, mean, var, gamma, x2, mean2, var2, gamma2, eps, sum_dy,
                                sum_dy_xhat, count, sum_dy2, sum_dy_xhat2, count2, dx, dx2, mask),
              es(dt) * m * c * 5 + mask_b(be, mask, m, c, dt) + 40.0 * c, 0);
}
static int w_relu_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    PROF_CALL(relu_fwd, relu_fwd(be, n, dt, x, y), 2.0 * es(dt) * n, 0);
}
static int w_relu_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    PROF_CALL(relu_bwd, relu_bwd(be, n, dt, y, dy, dx), 3.0 * es(dt) * n, 0);
}
static int w_add(backend_t *be, int64_t n, dtype_t dt, const void *a, const void *b, void *y) {
    PROF_CALL(add, add(be, n, dt, a, b, y), 3.0 * es(dt) * n, 0);
}
static int w_avgpool_fwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *x, void *y) {
    PROF_CALL(avgpool_fwd, avgpool_fwd(be, n, hw, c, dt, x, y), es(dt) * ((double)n * hw * c + (double)n * c), 0);
}
static int w_avgpool_bwd(backend_t *be, int n, int hw, int c, dtype_t dt, const void *dy, void *dx) {
    PROF_CALL(avgpool_bwd, avgpool_bwd(be, n, hw, c, dt, dy, dx), es(dt) * ((double)n * hw * c + (double)n * c), 0);
}
static double pool_in(const pool_shape_t *s) { return (double)s->n * s->h * s->w * s->c; }
static double pool_out(const pool_shape_t *s) { return (double)s->n * s->p * s->q * s->c; }
static int w_maxpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    PROF_CALL(maxpool_fwd, maxpool_fwd(be, s, dt, x, y), es(dt) * (pool_in(s) + pool_out(s)), 0);
}
static int w_maxpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, const void *dy, void *dx) {
    PROF_CALL(maxpool_bwd, maxpool_bwd(be, s, dt, x, dy, dx), es(dt) * (2 * pool_in(s) + pool_out(s)), 0);
}
static int w_softmax_xent(backend_t *be, int n, int classes, dtype_t dt, const void *logits, const int32_t *labels,
                          float smoothing, float grad_scale, const step_ctl_t *ctl, void *dlogits, float *loss_sum,
                          int32_t *correct) {
    PROF_CALL(softmax_xent,
              softmax_xent(be, n, classes, dt, logits, labels, smoothing, grad_scale, ctl, dlogits, loss_sum, correct),
              es(dt) * n * classes * (dlogits ? 2 : 1) + 4.0 * n, 0);
}
static int w_softmax_xent_soft(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                               const float *targets, float grad_scale, const step_ctl_t *ctl, void *dlogits,
                               float *loss_sum, int32_t *correct) {
    PROF_CALL(softmax_xent_soft,
              softmax_xent_soft(be, n, classes, dt, logits, targets, grad_scale, ctl, dlogits, loss_sum, correct),
              es(dt) * n * classes * (dlogits ? 2 : 1) + 4.0 * n * classes, 0);
}
static int w_sgd_step(backend_t *be, int64_t n, float *pp, const float *g, float *buf, double lr, double momentum,
                      double dampening, double weight_decay, bool nesterov, const step_ctl_t *ctl) {
    PROF_CALL(sgd_step, sgd_step(be, n, pp, g, buf, lr, momentum, dampening, weight_decay, nesterov, ctl), 20.0 * n, 0);
}
static int w_adamw_step(backend_t *be, int64_t n, float *pp, const float *g, float *m, float *v, double lr,
                        double beta1, double beta2, double eps, double weight_decay, const step_ctl_t *ctl) {
    PROF_CALL(adamw_step, adamw_step(be, n, pp, g, m, v, lr, beta1, beta2, eps, weight_decay, ctl), 28.0 * n, 0);
}
static int w_step_ctl_update(backend_t *be, step_ctl_t *ctl) {
    PROF_CALL(step_ctl_update, step_ctl_update(be, ctl), 2.0 * sizeof *ctl, 0);
}
static int w_clip_grad_norm(backend_t *be, int64_t n, float *g, double max_norm, const step_ctl_t *ctl,
                            float *norm) {
    PROF_CALL(clip_grad_norm, clip_grad_norm(be, n, g, max_norm, ctl, norm), 8.0 * n, 0);
}
static int w_ema_update(backend_t *be, int64_t n, float *ema, const float *x, double decay) {
    PROF_CALL(ema_update, ema_update(be, n, ema, x, decay), 12.0 * n, 0);
}
static int w_cast(backend_t *be, int64_t n, const void *src, dtype_t src_dt, void *dst, dtype_t dst_dt) {
    PROF_CALL(cast, cast(be, n, src, src_dt, dst, dst_dt), (es(src_dt) + es(dst_dt)) * n, 0);
}
static int w_unscale_check_finite(backend_t *be, int64_t n, float *g, step_ctl_t *ctl) {
    PROF_CALL(unscale_check_finite, unscale_check_finite(be, n, g, ctl), 8.0 * n, 0);
}
static int w_scale(backend_t *be, int64_t n, float *x, float alpha) {
    PROF_CALL(scale, scale(be, n, x, alpha), 8.0 * n, 0);
}
static int w_relu6_fwd(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y) {
    PROF_CALL(relu6_fwd, relu6_fwd(be, n, dt, x, y), 2.0 * es(dt) * n, 0);
}
static int w_relu6_bwd(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx) {
    PROF_CALL(relu6_bwd, relu6_bwd(be, n, dt, y, dy, dx), 3.0 * es(dt) * n, 0);
}
static int w_channel_bias_fwd(backend_t *be, int64_t m, int c, dtype_t dt, const float *b, void *y) {
    PROF_CALL(channel_bias_fwd, channel_bias_fwd(be, m, c, dt, b, y), 2.0 * es(dt) * m * c + 4.0 * c, 0);
}
static int w_channel_bias_bwd(backend_t *be, int64_t m, int c, dtype_t dt, const void *dy, float *db) {
    PROF_CALL(channel_bias_bwd, channel_bias_bwd(be, m, c, dt, dy, db), es(dt) * m * c + 8.0 * c, 0);
}
static int w_dropout_fwd(backend_t *be, int n, int64_t per, dtype_t dt, double pr, uint32_t node,
                         const dropout_key_t *key, const void *x, void *y) {
    PROF_CALL(dropout_fwd, dropout_fwd(be, n, per, dt, pr, node, key, x, y), 2.0 * es(dt) * n * per, 0);
}
static int w_dropout_bwd(backend_t *be, int n, int64_t per, dtype_t dt, double pr, uint32_t node,
                         const dropout_key_t *key, const void *dy, void *dx) {
    PROF_CALL(dropout_bwd, dropout_bwd(be, n, per, dt, pr, node, key, dy, dx), 2.0 * es(dt) * n * per, 0);
}
static int w_adaptive_avgpool_fwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y) {
    PROF_CALL(adaptive_avgpool_fwd, adaptive_avgpool_fwd(be, s, dt, x, y), es(dt) * (pool_in(s) + pool_out(s)), 0);
}
static int w_adaptive_avgpool_bwd(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *dy, void *dx) {
    PROF_CALL(adaptive_avgpool_bwd, adaptive_avgpool_bwd(be, s, dt, dy, dx), es(dt) * (pool_in(s) + pool_out(s)),
              0);
}
static int w_zero(backend_t *be, void *dst, size_t bytes) {
    PROF_CALL(zero, zero(be, dst, bytes), (double)bytes, 0);
}
static int w_copy(backend_t *be, void *dst, const void *src, size_t bytes) {
    PROF_CALL(copy, copy(be, dst, src, bytes), 2.0 * bytes, 0);
}
static int w_upload(backend_t *be, void *dst, const void *src, size_t bytes) {
    PROF_CALL(upload, upload(be, dst, src, bytes), (double)bytes, 0);
}
static int w_download(backend_t *be, void *dst, const void *src, size_t bytes) {
    PROF_CALL(download, download(be, dst, src, bytes), (double)bytes, 0);
}

/* Replaces each slot the backend has (a NULL slot stays NULL). */
#define WRAP(slot, fn) if (p->ops.slot) p->ops.slot = fn
static void wrap_all(gpu_prof_t *p) {
    WRAP(conv2d_fwd, w_conv_fwd); WRAP(conv2d_bwd_data, w_conv_bwd_data); WRAP(conv2d_bwd_filter, w_conv_bwd_filter);
    WRAP(conv2d_fwd_bn_stats, w_conv_fwd_bn_stats); WRAP(conv2d_bwd_data_bn, w_conv_bwd_data_bn);
    WRAP(conv2d_bwd_data_accum, w_conv_bwd_data_accum);
    WRAP(linear_fwd, w_linear_fwd); WRAP(linear_bwd, w_linear_bwd); WRAP(bn_stats, w_bn_stats);
    WRAP(bn_stats_running, w_bn_stats_running);
    WRAP(bn_apply, w_bn_apply); WRAP(bn_update_running, w_bn_update_running); WRAP(bn_bwd_reduce, w_bn_bwd_reduce);
    WRAP(bn_bwd_apply, w_bn_bwd_apply); WRAP(relu_fwd, w_relu_fwd); WRAP(relu_bwd, w_relu_bwd); WRAP(add, w_add);
    WRAP(avgpool_fwd, w_avgpool_fwd); WRAP(avgpool_bwd, w_avgpool_bwd); WRAP(maxpool_fwd, w_maxpool_fwd);
    WRAP(maxpool_bwd, w_maxpool_bwd); WRAP(softmax_xent, w_softmax_xent); WRAP(softmax_xent_soft, w_softmax_xent_soft);
    WRAP(sgd_step, w_sgd_step); WRAP(adamw_step, w_adamw_step); WRAP(step_ctl_update, w_step_ctl_update);
    WRAP(clip_grad_norm, w_clip_grad_norm); WRAP(ema_update, w_ema_update); WRAP(cast, w_cast);
    WRAP(unscale_check_finite, w_unscale_check_finite); WRAP(scale, w_scale); WRAP(zero, w_zero);
    WRAP(relu6_fwd, w_relu6_fwd); WRAP(relu6_bwd, w_relu6_bwd); WRAP(channel_bias_fwd, w_channel_bias_fwd);
    WRAP(channel_bias_bwd, w_channel_bias_bwd); WRAP(dropout_fwd, w_dropout_fwd); WRAP(dropout_bwd, w_dropout_bwd);
    WRAP(adaptive_avgpool_fwd, w_adaptive_avgpool_fwd); WRAP(adaptive_avgpool_bwd, w_adaptive_avgpool_bwd);
    WRAP(copy, w_copy); WRAP(upload, w_upload); WRAP(download, w_download);
    WRAP(bn_apply_mask, w_bn_apply_mask); WRAP(bn_bwd_reduce_mask, w_bn_bwd_reduce_mask);
    WRAP(bn_bwd_apply_mask, w_bn_bwd_apply_mask);
    WRAP(bn_apply_dual, w_bn_apply_dual); WRAP(bn_bwd_reduce_dual, w_bn_bwd_reduce_dual);
    WRAP(bn_bwd_apply_dual, w_bn_bwd_apply_dual);
}

/* Spin cycles for head_us: one spin of a known count timed with events. */
static int calibrate(gpu_prof_t *p, err_t *e) {
    cudaEvent_t a, b;
    const long long probe = 2000000;
    float ms = 0;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess)
        return err_set(e, ERR_RUNTIME, "gpu_prof: cudaEventCreate failed");
    int rc = -1;
    for (int rep = 0; rep < 2; rep++)   /* the first launch loads the module */
        if (cudaEventRecord(a, (cudaStream_t)p->stream) != cudaSuccess || gpu_prof_spin(p->stream, probe) ||
            cudaEventRecord(b, (cudaStream_t)p->stream) != cudaSuccess || cudaEventSynchronize(b) != cudaSuccess ||
            cudaEventElapsedTime(&ms, a, b) != cudaSuccess)
            goto out;
    if (ms <= 0) goto out;
    p->spin_cycles = (long long)((double)probe * p->head_us / (ms * 1e3)) + 1;
    rc = 0;
out:
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return rc ? err_set(e, ERR_RUNTIME, "gpu_prof: calibrating the spin kernel failed: %s",
                        cudaGetErrorString(cudaGetLastError()))
              : 0;
}

gpu_prof_t *gpu_prof_attach(backend_t *be, double head_start_us, err_t *e) {
    if (g_prof) {
        err_set(e, ERR_INPUT, "gpu_prof: one profiled backend per process");
        return NULL;
    }
    gpu_prof_t *p = calloc(1, sizeof *p);
    if (!p) {
        err_set(e, ERR_RUNTIME, "gpu_prof: out of memory");
        return NULL;
    }
    p->be = be;
    p->orig = be->ops;
    p->ops = *be->ops;
    p->head_us = head_start_us;
    p->stream = be->kind == BACKEND_CUDA ? cuda_backend_stream(be) : NULL;
    if (p->stream && calibrate(p, e)) {
        free(p);
        return NULL;
    }
    wrap_all(p);
    g_prof = p;
    be->ops = &p->ops;
    return p;
}

void gpu_prof_timing(gpu_prof_t *p, bool on) { p->timing = on && p->stream; }

int gpu_prof_replayed(gpu_prof_t *p, bool on, err_t *e) {
    if (on && !p->stream) return err_set(e, ERR_INPUT, "gpu_prof: the replayed mode needs a CUDA backend");
    if (on && prof_reserve(p, GPU_PROF_GRAPH_CALLS))
        return err_set(e, ERR_RUNTIME, "gpu_prof: cannot make %d event pairs for the replayed mode",
                       GPU_PROF_GRAPH_CALLS);
    gpu_prof_reset(p);
    p->replayed = on;
    p->timing = on || p->timing;
    return 0;
}

void gpu_prof_reset(gpu_prof_t *p) {
    memset(p->k, 0, sizeof p->k);
    p->span_ms = 0;
    p->n_recs = 0;
    p->n_shapes = 0;
}

int gpu_prof_recorded_calls(const gpu_prof_t *p) { return p->replayed ? p->n_recs : 0; }


int gpu_prof_collect(gpu_prof_t *p, err_t *e) {
    for (int i = 0; i < p->n_recs; i++) {
        float ms = 0;
        cudaError_t st = cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]);
        if (st != cudaSuccess)
            return err_set(e, ERR_RUNTIME, "gpu_prof: cudaEventElapsedTime: %s", cudaGetErrorString(st));
        const call_rec_t *r = &p->recs[i];
        kind_sum_t *s = &p->k[r->kind];
        s->gpu_ms += ms;
        if (p->replayed) {   /* the recorded call once more, with this replay's time */
            s->calls++;
            s->bytes += r->bytes;
            s->flops += r->flops;
            if (r->fallback) {
                p->k[K_fused_fallback].calls++;
                p->k[K_fused_fallback].bytes += r->fallback_bytes;
            }
        }
        if (r->m > 0) shape_add(p, r, ms);
    }
    if (p->replayed) {   /* the same calls again at the next replay */
        float span = 0;
        if (p->n_recs > 0) {
            cudaError_t st = cudaEventElapsedTime(&span, p->ev[0], p->ev[2 * p->n_recs - 1]);
            if (st != cudaSuccess)
                return err_set(e, ERR_RUNTIME, "gpu_prof: cudaEventElapsedTime: %s", cudaGetErrorString(st));
        }
        p->span_ms += span;
        return 0;
    }
    p->n_recs = 0;
    return 0;
}

typedef struct totals {
    double gpu_ms, host_ms, mem_bytes, mem_gpu_ms;
} totals_t;

static totals_t sum_up(const gpu_prof_t *p) {
    totals_t t = {0, 0, 0, 0};
    for (int k = 0; k < K_COUNT; k++) {
        t.gpu_ms += p->k[k].gpu_ms;
        t.host_ms += p->k[k].host_us * 1e-3;
        if (memory_bound(k)) {
            t.mem_bytes += p->k[k].bytes;
            t.mem_gpu_ms += p->k[k].gpu_ms;
        }
    }
    return t;
}

void gpu_prof_print(const gpu_prof_t *p, int steps, FILE *f) {
    double n = steps > 0 ? steps : 1;
    if (p->replayed)
        fprintf(f, "replayed: per step (%d replays of the recorded step; GPU time between event nodes of the "
                "graph, no host time):\n", steps);
    else
        fprintf(f, "per step (%d profiled; GPU time behind a %.0f us head start):\n", steps, p->head_us);
    fprintf(f, "%-22s %6s %9s %9s %9s %8s %8s %5s\n", "op kind", "calls", "gpu ms", "host ms", "MB", "GB/s", "TFLOP/s",
            "late");
    for (int k = 0; k < K_COUNT; k++) {
        const kind_sum_t *s = &p->k[k];
        if (!s->calls) continue;
        double gbs = s->gpu_ms > 0 ? s->bytes / (s->gpu_ms * 1e-3) / 1e9 : 0;
        double tf = s->gpu_ms > 0 ? s->flops / (s->gpu_ms * 1e-3) / 1e12 : 0;
        fprintf(f, "%-22s %6.0f %9.3f %9.3f %9.1f %8.0f %8.1f %5.0f\n", kind_names[k], s->calls / n,
                s->gpu_ms / n, s->host_us * 1e-3 / n, s->bytes / n / 1e6, gbs, tf, s->late / n);
    }
    totals_t t = sum_up(p);
    fprintf(f, "%-22s %6s %9.3f %9.3f\n", "total", "", t.gpu_ms / n, t.host_ms / n);
    if (p->replayed)
        fprintf(f, "replayed step with its event nodes, first event to last: %.3f ms (the ops' %.3f ms lie "
                "inside it; what is left is the gaps between them)\n", p->span_ms / n, t.gpu_ms / n);
    fprintf(f, "memory-bound kinds: %.1f MB per step in %.3f ms of GPU time (%.0f GB/s)\n", t.mem_bytes / n / 1e6,
            t.mem_gpu_ms / n, t.mem_gpu_ms > 0 ? t.mem_bytes / (t.mem_gpu_ms * 1e-3) / 1e9 : 0.0);
    if (!p->n_shapes) return;
    /* the lines with the most GPU time, most first (selection: a few hundred lines at most) */
    enum { TOP = 24 };
    bool used[PROF_SHAPES] = {false};
    fprintf(f, "by shape (the %d with the most GPU time; rows x channels; per step):\n", TOP);
    fprintf(f, "%-22s %8s %5s %6s %9s %8s %8s\n", "op kind", "rows", "ch", "calls", "gpu ms", "us/call", "GB/s");
    for (int top = 0; top < TOP && top < p->n_shapes; top++) {
        int best = -1;
        for (int i = 0; i < p->n_shapes; i++)
            if (!used[i] && (best < 0 || p->shapes[i].gpu_ms > p->shapes[best].gpu_ms)) best = i;
        used[best] = true;
        const shape_sum_t *s = &p->shapes[best];
        fprintf(f, "%-22s %8lld %5d %6.0f %9.3f %8.1f %8.0f\n", kind_names[s->kind], (long long)s->m, s->c,
                s->calls / n, s->gpu_ms / n, s->calls ? s->gpu_ms * 1e3 / (double)s->calls : 0.0,
                s->gpu_ms > 0 ? s->bytes / (s->gpu_ms * 1e-3) / 1e9 : 0.0);
    }
}

void gpu_prof_json(const gpu_prof_t *p, int steps, FILE *f) {
    double n = steps > 0 ? steps : 1;
    totals_t t = sum_up(p);
    fprintf(f, "{\"mode\": \"%s\", \"steps\": %d, \"head_start_us\": %.0f, \"gpu_ms\": %.4f, \"host_ms\": %.4f, "
            "\"nonconv_bytes\": %.0f, \"nonconv_gpu_ms\": %.4f, \"span_ms\": %.4f, \"kinds\": [",
            p->replayed ? "replayed" : "eager", steps, p->replayed ? 0.0 : p->head_us, t.gpu_ms / n, t.host_ms / n,
            t.mem_bytes / n, t.mem_gpu_ms / n, p->span_ms / n);
    int first = 1;
    for (int k = 0; k < K_COUNT; k++) {
        const kind_sum_t *s = &p->k[k];
        if (!s->calls) continue;
        fprintf(f, "%s{\"kind\": \"%s\", \"calls\": %.1f, \"gpu_ms\": %.4f, \"host_ms\": %.4f, \"bytes\": %.0f, "
                "\"flops\": %.0f, \"late\": %.1f, \"memory_bound\": %s}", first ? "" : ", ", kind_names[k],
                s->calls / n, s->gpu_ms / n, s->host_us * 1e-3 / n, s->bytes / n, s->flops / n, s->late / n,
                memory_bound(k) ? "true" : "false");
        first = 0;
    }
    fprintf(f, "], \"shapes\": [");
    for (int i = 0; i < p->n_shapes; i++) {
        const shape_sum_t *s = &p->shapes[i];
        fprintf(f, "%s{\"kind\": \"%s\", \"rows\": %lld, \"channels\": %d, \"calls\": %.1f, \"gpu_ms\": %.4f, "
                "\"bytes\": %.0f}", i ? ", " : "", kind_names[s->kind], (long long)s->m, s->c, s->calls / n,
                s->gpu_ms / n, s->bytes / n);
    }
    fprintf(f, "]}");
}

backend_t *gpu_prof_backend(const gpu_prof_t *p) { return p->be; }

void gpu_prof_detach(gpu_prof_t *p) {
    if (!p) return;
    p->be->ops = p->orig;
    for (int i = 0; i < 2 * p->cap_recs; i++) cudaEventDestroy(p->ev[i]);
    free(p->ev);
    free(p->recs);
    if (g_prof == p) g_prof = NULL;
    free(p);
}
