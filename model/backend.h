/* backend.h: the op table every compute backend fills (cpu, cuda).
 *
 * The net, the optimizer, AMP and DDP call these ops and never branch on the backend.
 * All tensor pointers are backend memory (host memory for cpu, device memory for cuda)
 * obtained from backend_alloc; scalars are passed by value from the host. Layout is NHWC
 * (channels-last) for activations; conv weights are stored KRSC (out, kh, kw, in), the
 * NHWC twin of torchvision's OIHW, converted at import/export.
 *
 * Precision. `dt` names the storage/compute type of activations (x, y, dx, dy, z) and of
 * the conv/linear weight argument `w`: DT_F32, or DT_F16/DT_BF16 under AMP. Parameter
 * gradients, BN statistics, the loss and optimizer state are always fp32. The cuda
 * backend stores half tensors as 2-byte values; the cpu backend emulates them in 4-byte
 * floats holding values already rounded to half (backend_elem_size tells which), rounding
 * every half output it writes (round-to-nearest-even) and accumulating in fp32.
 *
 * Accumulation. Every op that writes a parameter gradient (dw, db, dgamma, dbeta) ADDS
 * into it (PyTorch's .grad semantics); the trainer zeroes gradients once per optimizer
 * step, so gradient accumulation over micro-batches needs nothing special.
 *
 * Errors. Ops return 0 or -1; on -1 the backend's err_t (backend_err) says what failed
 * (CUDA/cuDNN call, file, line). Nothing here exits.
 *
 * Ownership. backend_create returns a backend owned by the caller; backend_free releases
 * it and everything it allocated internally (workspaces, algorithm caches, streams).
 */
#ifndef RUNNER_MODEL_BACKEND_H
#define RUNNER_MODEL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, DT_COUNT } dtype_t;
extern const char *const dtype_names[DT_COUNT]; /* "fp32", "fp16", "bf16" */

typedef enum { BACKEND_CPU = 0, BACKEND_CUDA = 1, BACKEND_KIND_COUNT } backend_kind_t;

/* The geometry of one 2-D convolution: input NHWC (n, h, w, c), weight KRSC
 * (k, r, s, c / groups), output NPQK (n, p, q, k) with p = (h + 2*pad - r) / stride + 1
 * and likewise q. groups 0 and 1 both mean a dense convolution (so a zero-initialised
 * shape stays dense); otherwise c and k are multiples of groups and output channels
 * [g*k/groups, (g+1)*k/groups) see input channels [g*c/groups, (g+1)*c/groups) only
 * (torch's groups; depthwise when groups == c). The weight rows of group g are the
 * contiguous block of output channels g*k/groups.., each (r, s, c / groups). */
typedef struct conv_shape {
    int n, h, w, c;
    int k, r, s;
    int stride, pad;
    int p, q;
    int groups;
} conv_shape_t;

/* groups of a conv_shape_t as a count (0 -> 1). */
static inline int conv_groups(const conv_shape_t *s) { return s->groups > 1 ? s->groups : 1; }

/* The activation fused into batch norm (bn_apply and the masks of the bn backward ops):
 * relu(v) = max(v, 0), relu6(v) = min(max(v, 0), 6) (torch.nn.ReLU6 = hardtanh(0, 6)),
 * NaN passing through both. */
typedef enum { ACT_NONE = 0, ACT_RELU = 1, ACT_RELU6 = 2 } act_kind_t;

/* The key of dropout's masks (util/dropout.h), kept in backend memory so that a recorded
 * CUDA graph reads the current one: row i of a batch is sample first_sample +
 * i * sample_stride of the epoch, and an element's mask is a function of (seed, epoch,
 * sample, node, element) only. */
typedef struct dropout_key {
    uint64_t seed;
    uint64_t epoch;
    int64_t first_sample;
    int64_t sample_stride;
} dropout_key_t;

/* The geometry of one max-pool (PyTorch max_pool2d, dilation 1, ceil_mode false): input
 * NHWC (n, h, w, c), a kernel x kernel window moved by stride over the input padded by pad
 * on each side with -inf (pad <= kernel / 2), output NPQC (n, p, q, c) with
 * p = (h + 2*pad - kernel) / stride + 1 and likewise q. */
typedef struct pool_shape {
    int n, h, w, c;
    int kernel, stride, pad;
    int p, q;
} pool_shape_t;

typedef struct backend backend_t;

/* Step control: the numbers one optimizer step reads and writes, kept in backend memory
 * and touched only by ops on the backend's own queue, so that a step (loss-gradient
 * scaling, unscale and inf/NaN check, skipping the update, scale growth/backoff, the
 * optimizer's step count) needs no round trip to the host. torch's GradScaler keeps the
 * same numbers in device tensors (_scale, _growth_tracker, found_inf) for the same reason.
 * The optimizer owns one (optim_ctl); host code reads it only through download. */
typedef struct step_ctl {
    float loss_scale;         /* multiplies the loss gradient; 1 without fp16 scaling */
    int32_t found_inf;        /* set by unscale_check_finite; the optimizer ops skip when set */
    int32_t growth_tracker;   /* clean steps since the scale last changed */
    int32_t growth_interval;  /* 0: no dynamic scaling (fp32, bf16) */
    float growth_factor;      /* 2 */
    float backoff_factor;     /* 0.5 */
    int64_t optim_steps;      /* optimizer steps taken; skipped steps do not count */
    double lr;                /* this step's learning rate, written by the host before the
                               * step (optim_set_lr); sgd_step/adamw_step read it when
                               * given lr NaN, so a recorded step takes each step's value */
} step_ctl_t;

/* Options for creating a backend. Zero-initialise and set what you need. */
typedef struct backend_opts {
    backend_kind_t kind;
    int device;          /* cuda: device ordinal after CUDA_VISIBLE_DEVICES; cpu: ignored */
    int threads;         /* cpu: worker threads (0: all cores); cuda: ignored */
    bool deterministic;  /* cuda: deterministic algorithms only; cpu is always deterministic */
    bool allow_tf32;     /* cuda: TF32 tensor cores for fp32 convs/GEMMs */
    bool cpu_winograd;   /* cpu: Winograd for 3x3 filter gradients where oneDNN has it
                          * (faster, ~10x less precise; train.cpu_winograd) */
    unsigned cuda_fusion;/* cuda: BACKEND_FUSE_* bits (train.cuda_fusion); 0: none */
} backend_opts_t;

/* Fusion options of the CUDA backend (issue 25). "all" (BACKEND_FUSE_ALL), the runner's
 * default (train.cuda_fusion [all]), is the options a GPU run has shown exact and faster
 * (docs/benchmarks.md "Fusion options"); a backend created with 0 runs none of them
 * (train.cuda_fusion []). The cpu backend ignores them. Names as in train.cuda_fusion and
 * bench_gpu_bench --fusion; what the first GPU run (H100, bf16, ResNet-50 batch 128)
 * measured is in brackets (the second run, H100, 2026-11-26, in braces; the fourth, H200,
 * 2026-11-26, in angle brackets).
 *   graph_conv   convolutions on the cuDNN graph (backend) API, one execution plan per
 *                layer shape and direction built once, variant packs cached per layer;
 *                the legacy API where the graph API has no engine for a shape and for
 *                grouped convolutions [faster: ~15-23 us of host time per conv call
 *                against ~150-440]
 *   conv_stats   BN batch statistics from the producing convolution (conv2d_fwd_bn_stats)
 *                [slower: +1.5 ms per step]
 *   dgrad_dbn    a BN's backward reduction (with its ReLU mask) in the data gradient of
 *                the convolution that consumes it (conv2d_bwd_data_bn) [no gain]
 *   dgrad_accum  residual gradients summed by the convolution (beta = 1) instead of a
 *                separate add (conv2d_bwd_data_accum) [faster: -0.25 ms]
 *                {graph_conv + dgrad_accum against none, whole step replayed: bf16
 *                13.93 -> 9.33 ms at batch 128, 17.07 -> 15.93 at 256; fp16 10.88 ->
 *                9.41, 16.97 -> 15.99}
 *   vec16        16-byte accesses in the BN kernels on every channel count that is a
 *                multiple of 8 (else 4- and 8-byte ones below 256 channels) [no gain]
 *   bn_remask    the BN backward kernels of a BN + ReLU / ReLU6 without a residual input
 *                take the activation's mask from x and the forward's statistics and
 *                affine (rounded to the activation dtype as the forward stored y)
 *                instead of reading y: the same bits, a third fewer bytes read by the
 *                reduce pass and a quarter by the apply pass {faster: -0.25 ms at bf16 batch
 *                128, -0.56 ms at 256 on top of graph_conv + dgrad_accum}
 *   bn_wide_final  the second pass of the BN reductions (bn_stats, bn_bwd_reduce: the sum
 *                of the row splits' partials per channel) with 32 x 32 threads a block and
 *                the loads unrolled, instead of 32 x 8 threads adding up to 128 splits
 *                each one after another (the 1024-split layers at batch 128); another
 *                fixed order of the double sums, so deterministic, the float results
 *                within an ulp of the default order's (predicted up to -1 ms of the 3.1 ms
 *                the two took per bf16 step at batch 128, from the H100 profile)
 *                <H200, 2026-11-26, whole step replayed, on top of graph_conv + dgrad_accum
 *                + bn_remask: -0.20 ms at bf16 batch 128 (8.19 -> 7.99), -0.28 at 256,
 *                fp16 -0.21 / -0.27; in all since then>
 *   bn_fold_running  the running-statistics update in the kernel that finishes the
 *                statistics (bn_stats_running), one launch per BN layer and step fewer
 *                where no SyncBN reduces the statistics in between; the same float
 *                arithmetic as bn_update_running's kernel, so the same bits (predicted
 *                -0.26 ms from the H100 profile's 53 launches of ~5 us, events included)
 *                <H200: -0.03 ms at bf16 batch 128, -0.04 at 256, fp16 -0.04: a graph
 *                launches a kernel of 0.6 MB in well under the 5 us the events showed;
 *                in all since then>
 *   dgrad_accum_tune  with graph_conv and dgrad_accum, outside deterministic mode: the
 *                accumulating data gradient's engine chosen by timing the first 4 that
 *                finalize, into a zeroed scratch output (as the other graphs are timed on
 *                their buffers), instead of the heuristic's first (predicted from the
 *                H100 profile's 16 accumulating dgrads at 146 TFLOP/s against 317 for the
 *                36 plain ones) <H200: no gain, +0.01 / -0.01 ms: not in all>
 *   bn_more_splits  the BN row kernels (statistics, apply, backward reduce and apply) take
 *                at least 4 rows a thread instead of 16, so the small layers get more
 *                blocks: at batch 128 the 8 x 8 layers (8192 rows x 256 channels) ran on
 *                64 blocks of 256 threads and the 4 x 4 ones on 16 to 128, for 132 SMs
 *                (the H200 profile: bn_bwd_reduce at 8192 x 256 took 23 us a call at 0.37
 *                TB/s). More row splits change the order of the statistics' sums (still
 *                fixed: deterministic); apply results are the same bits [not yet measured;
 *                predicted -0.1 to -0.2 ms at bf16 batch 128] <H200: slower, +0.05 ms at bf16
 *                batch 128, +0.40 at 256: not in all>
 *   pdl          the backend's own kernels (BN, elementwise, loss, optimizer, pooling,
 *                bias) launched with programmatic dependent launch (Hopper's
 *                cudaLaunchAttributeProgrammaticStreamSerialization, kept as programmatic
 *                edges when a step is recorded as a CUDA graph): the next kernel's blocks
 *                may be scheduled while this one's last blocks finish, and each kernel
 *                waits for its predecessor's completion and memory
 *                (cudaGridDependencySynchronize) before its first access, so the results
 *                are the same bits; what it removes is the gap between dependent kernels
 *                (~330 own kernels a ResNet-50 step) <H200, 2026-11-26 (7a04ce7), on top
 *                of all: the replayed step unchanged (+0.02 / -0.01 ms at bf16 / fp16
 *                batch 128, 0.00 at 256), the step with normal launches 0.4 ms faster
 *                (8.65 -> 8.22 ms bf16 128, 13.76 -> 13.29 bf16 256); exact
 *                (test_gpu_cli_* with it on); in all since then>
 *   heur_b       with graph_conv, the engines of a convolution's graph ranked by cuDNN's
 *                neural-net heuristic (CUDNN_HEUR_MODE_B; mode A's ranking where it has
 *                none) before mode A's list: in deterministic mode, which takes the first
 *                usable engine untimed so that every run and resume picks the same one,
 *                that first engine is mode B's; outside it, mode B's first 4 are timed.
 *                Another engine: rounding, not the result; deterministic mode still
 *                repeats its bits <H200 (7a04ce7): the flagship's epoch 3.15 s against
 *                3.13 with mode A's first: not in all>
 *   bn_mask_bits the BN + add + ReLU layers (a residual block's last BN, whose mask
 *                bn_remask cannot recompute without the residual) store their ReLU mask
 *                as bits while the forward writes y (bn_apply_mask), and both BN backward
 *                passes read the bits instead of y (bn_bwd_reduce_mask, bn_bwd_apply_mask):
 *                the same mask, so the same bits in every result; in ResNet-50 (CIFAR
 *                stem, batch 128, 16 such layers, 230M elements) the two passes read 0.92
 *                GB of y and 0.06 GB of bits instead, the forward writes 0.03 GB more
 *                (predicted -0.83 GB: -0.17 to -0.25 ms at 4.8 to 3.35 TB/s) <H200
 *                (7a04ce7), whole step replayed, on top of all: -0.39 ms at bf16 batch
 *                128 (7.89 -> 7.50), fp16 -0.44; exact; in all since then>
 *   bn_dual_add  a projection shortcut's BN (the downsample BN of a stage's first block)
 *                is applied inside the kernels of the block's last BN (bn_apply_dual,
 *                bn_bwd_reduce_dual, bn_bwd_apply_dual): its output is never stored and
 *                its gradient (the masked gradient of the add) never written or read;
 *                the same bits as the separate ops (its output rounded to the act dtype
 *                before the add, as stored; its sums in the same order). ResNet-50 (CIFAR
 *                stem, batch 128): 4 such blocks, 62.9M elements, 5 passes of them fewer
 *                (forward: write and read z; backward: write dz, read it twice):
 *                predicted -0.63 GB, -0.13 to -0.19 ms, and 12 launches fewer (the
 *                shortcut's apply, backward partial sums and apply) <H200 (7a04ce7): -0.21
 *                ms at bf16 batch 128 (7.89 -> 7.67), fp16 -0.28; with pdl and
 *                bn_mask_bits -0.56 / -0.57 (7.33 / 7.35 ms), the flagship's epoch 2.91 s
 *                against 3.13; exact; in all since then>
 *   wgrad_f32    with graph_conv, a dense convolution's weight gradient added by cuDNN
 *                into the fp32 gradient (an fp32 output, beta = 1), instead of written in
 *                the act dtype to a staging buffer and added by a kernel of ours: no
 *                rounding of the gradient to bf16 / fp16 before it is summed (closer to
 *                fp32; not the bits of the unfused path), 53 launches and -0.09 GB a
 *                ResNet-50 step fewer; the staged path where cuDNN has no engine for the
 *                fp32 output (runtime-compiled engines included; the pattern probe says
 *                which) <H200 (7a04ce7): cuDNN 9.19 finalizes no engine for the fp32
 *                output of a bf16 or fp16 wgrad on any ResNet-50 layer, so the staged path
 *                ran everywhere (+0.00 ms): not in all>
 *   bn_one_pass  the BN reductions (bn_stats, bn_bwd_reduce; not bn_dual_add's) of the
 *                layers with at most 64 row splits (ResNet-50 at batch 128: the 8 x 8 and
 *                4 x 4 layers, 8192 and 2048 rows) in one kernel: the block that finishes
 *                a channel block last (a ticket per channel block) adds the splits'
 *                partials and writes the results, instead of a second kernel: 52 launches
 *                a step fewer (28 statistics, 24 backward sums: the layers of 8192 and
 *                2048 rows but the projection shortcuts' blocks, whose backward is
 *                bn_dual_add's) and no gap between the two; another fixed order of the
 *                sums (deterministic; rounding, not the result) [not yet measured;
 *                predicted -0.05 to -0.15 ms at 1 to 3 us a launch and gap; the fifth
 *                run's profile had these layers' reductions at 0.2 to 0.4 TB/s;
 *                bench_gpu_bench --bn-sweep times the form per shape]
 *   bn_apply_tune  the BN apply kernels (bn_apply, bn_bwd_apply and their mask and dual
 *                forms) launched with the row splits (grid rows) that timed fastest at
 *                the first call of each kernel and shape: the default's, half, 2x, 4x
 *                and 8x, each timed 3 times with events on the call's own buffers
 *                (outputs that overlap no input: the call repeats the same writes;
 *                else, and while a graph is being recorded, the default runs untimed).
 *                Each element is computed alike under any grid, so the results are the
 *                same bits (test_gpu_norm) whatever the timing picks, run to run [not yet
 *                measured; the fifth run's profile had the 8192- and 2048-row layers'
 *                apply passes at 0.4 to 0.9 TB/s on 16 to 64 blocks]
 *   bn_persist   each direction of a BN layer (not bn_dual_add's) in one cooperative kernel
 *                (bn_fwd_fused, bn_bwd_fused; model/cuda/norm_persist.cu) instead of three:
 *                the blocks stay resident, keep the rows they read in shared memory (~227
 *                KB an SM), meet at two grid barriers for the sums, and apply from what
 *                they kept, so only the rows that did not fit are read from memory again;
 *                the row kernels' blocks run as virtual blocks in their order, so the same
 *                bits as the separate ops (their two-pass order); the separate ops where
 *                the device has no cooperative launch, SyncBN reduces between the passes,
 *                or a pointer's alignment or overlap rules it out [not yet measured;
 *                predicted at bf16 batch 128 by the byte model: -0.52 GB of forward and
 *                -0.83 GB of backward reads a step (8.36 -> 7.01 GB), -0.28 to -0.54 ms,
 *                and 4 launches a layer fewer]
 * conv_stats and dgrad_dbn run unfused in deterministic mode (their cuDNN reductions add
 * partial sums in no fixed order). "all" (BACKEND_FUSE_ALL) is the options measured
 * faster and shown exact (test_gpu_cli_train / resume / paths / graphs with them on);
 * the others stay selectable by name for measurement. */
enum {
    BACKEND_FUSE_GRAPH_CONV = 1u << 0,
    BACKEND_FUSE_CONV_STATS = 1u << 1,
    BACKEND_FUSE_DGRAD_DBN = 1u << 2,
    BACKEND_FUSE_DGRAD_ACCUM = 1u << 3,
    BACKEND_FUSE_VEC16 = 1u << 4,
    BACKEND_FUSE_BN_REMASK = 1u << 5,
    BACKEND_FUSE_BN_WIDE_FINAL = 1u << 6,
    BACKEND_FUSE_BN_FOLD_RUNNING = 1u << 7,
    BACKEND_FUSE_DGRAD_ACCUM_TUNE = 1u << 8,
    BACKEND_FUSE_BN_MORE_SPLITS = 1u << 9,
    BACKEND_FUSE_PDL = 1u << 10,
    BACKEND_FUSE_HEUR_B = 1u << 11,
    BACKEND_FUSE_BN_MASK_BITS = 1u << 12,
    BACKEND_FUSE_BN_DUAL_ADD = 1u << 13,
    BACKEND_FUSE_WGRAD_F32 = 1u << 14,
    BACKEND_FUSE_BN_ONE_PASS = 1u << 15,
    BACKEND_FUSE_BN_APPLY_TUNE = 1u << 16,
    BACKEND_FUSE_BN_PERSIST = 1u << 17,
    BACKEND_FUSE_COUNT = 18,
    BACKEND_FUSE_EVERY = (1u << 18) - 1,   /* every option (measurement and tests) */
    BACKEND_FUSE_ALL = BACKEND_FUSE_GRAPH_CONV | BACKEND_FUSE_DGRAD_ACCUM | BACKEND_FUSE_BN_REMASK |
                       BACKEND_FUSE_BN_WIDE_FINAL | BACKEND_FUSE_BN_FOLD_RUNNING | BACKEND_FUSE_PDL |
                       BACKEND_FUSE_BN_MASK_BITS | BACKEND_FUSE_BN_DUAL_ADD
};
/* The option names in bit order: the one list backend_fusion_name, the parser's message
 * and train.cuda_fusion's schema (runner/config_schema.c, which adds "all") are made of. */
#define BACKEND_FUSION_NAMES "graph_conv", "conv_stats", "dgrad_dbn", "dgrad_accum", "vec16", "bn_remask", \
    "bn_wide_final", "bn_fold_running", "dgrad_accum_tune", "bn_more_splits", "pdl", "heur_b", \
    "bn_mask_bits", "bn_dual_add", "wgrad_f32", "bn_one_pass", "bn_apply_tune", "bn_persist"
/* "graph_conv", ... for bit i (NULL past the last). */
const char *backend_fusion_name(int bit);
/* Parses a comma-separated list of names ("all" and "none" allowed) into *mask; an
 * unknown name fails with ERR_INPUT naming the known ones. */
int backend_fusion_parse(const char *list, unsigned *mask, err_t *e);
/* Writes the names of mask's bits, comma-separated ("none" for 0); a buffer of
 * BACKEND_FUSION_NAMES_MAX holds every option's (test_net_traffic checks it). */
enum { BACKEND_FUSION_NAMES_MAX = 320 };
void backend_fusion_format(unsigned mask, char *buf, size_t len);

/* The op table. One line per slot; slots marked (optional) may be NULL. */
typedef struct backend_ops {
    const char *name;
    void (*destroy)(backend_t *be);
    /* memory */
    void *(*alloc)(backend_t *be, size_t bytes);                  /* 256-byte aligned; NULL + err on failure */
    void (*release)(backend_t *be, void *p);
    int (*upload)(backend_t *be, void *dst, const void *host_src, size_t bytes);
    int (*download)(backend_t *be, void *host_dst, const void *src, size_t bytes);
    int (*copy)(backend_t *be, void *dst, const void *src, size_t bytes);
    int (*zero)(backend_t *be, void *dst, size_t bytes);
    int (*sync)(backend_t *be);                                   /* wait for all queued work */
    size_t (*peak_memory)(backend_t *be);                         /* bytes, high-water mark */
    /* convolution (grouped when s->groups > 1; no bias: channel_bias_* add it) */
    int (*conv2d_fwd)(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                      const void *w, void *y);
    int (*conv2d_bwd_data)(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                           const void *w, void *dx);
    int (*conv2d_bwd_filter)(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                             const void *dy, float *dw);           /* dw += ..., fp32 KRSC */
    /* batch norm over M = N*H*W rows of C channels, split in phases so SyncBN can reduce
     * statistics across ranks between them */
    int (*bn_stats)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean,
                    float *var);                                  /* biased variance */
    int (*bn_apply)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                    const float *var, const float *gamma, const float *beta, float eps,
                    const void *z, act_kind_t act, void *y);      /* y = act(bn(x) [+ z]); z may be NULL */
    int (*bn_update_running)(backend_t *be, int c, const float *mean, const float *var,
                             int64_t count, float momentum, float *run_mean, float *run_var);
                                                                  /* unbiased var (count/(count-1)) */
    int (*bn_bwd_reduce)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x,
                         const void *y, act_kind_t act, const void *dy, const float *mean,
                         const float *var, const float *gamma, const float *beta, float eps,
                         float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta);
        /* y non-NULL: dy is masked by the derivative of the fused activation act seen
         * from its output y: kept where y > 0 (ACT_RELU; NaN masks), zeroed where y <= 0
         * or y >= 6 (ACT_RELU6, torch's hardtanh backward: NaN passes). y NULL: no mask
         * (act ignored). Writes sum_dy, sum_dy_xhat (local, overwritten) and adds them
         * into dbeta, dgamma.
         * beta non-NULL (with y and gamma): y is exactly what bn_apply(m, c, dt, x, mean,
         * var, gamma, beta, eps, z = NULL, act) wrote, so a backend may take the mask from
         * x, mean, var, gamma, beta and eps instead of reading y, with the same bits (the
         * cuda backend's bn_remask); NULL: the mask comes from y (a bn_add_relu, whose
         * mask needs z). gamma is read only then, and may be NULL with beta. */
    int (*bn_bwd_apply)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x,
                        const void *y, act_kind_t act, const void *dy, const float *mean,
                        const float *var, const float *gamma, const float *beta, float eps,
                        const float *sum_dy, const float *sum_dy_xhat, int64_t count, void *dx,
                        void *dz);
        /* count: rows the statistics cover (m, or the global count under SyncBN).
         * dz non-NULL (bn_add_relu): dz = masked dy. dx is overwritten. beta: as in
         * bn_bwd_reduce (NULL whenever dz is given). */
    /* elementwise */
    int (*relu_fwd)(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y);
    int (*relu_bwd)(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx);
    int (*add)(backend_t *be, int64_t n, dtype_t dt, const void *a, const void *b, void *y);
    /* relu6: y = min(max(x, 0), 6) (NaN passes); backward dx = 0 where y <= 0 or y >= 6,
     * else dy (torch's hardtanh_backward, which passes NaN; on the output, as for torch's
     * in-place ReLU6) */
    int (*relu6_fwd)(backend_t *be, int64_t n, dtype_t dt, const void *x, void *y);
    int (*relu6_bwd)(backend_t *be, int64_t n, dtype_t dt, const void *y, const void *dy, void *dx);
    /* per-channel bias of m rows of c channels (a conv's output, NHWC): y += b, each
     * output rounded once to dt; backward db[j] += sum_i dy[i, j] summed in a fixed
     * order (deterministic), fp32 result */
    int (*channel_bias_fwd)(backend_t *be, int64_t m, int c, dtype_t dt, const float *b, void *y);
    int (*channel_bias_bwd)(backend_t *be, int64_t m, int c, dtype_t dt, const void *dy, float *db);
    /* inverted dropout of n samples of per_sample elements each: element e of row i is
     * kept when the mask bit of (key, node, sample first_sample + i * sample_stride, e)
     * says so (util/dropout.h: probability 1 - p) and then multiplied by
     * dropout_scale(p), else zeroed. key is backend memory, read when the op runs (on
     * the device for cuda). Backward recomputes the mask: dx = dy * mask * scale. The
     * same bits on every backend for fp32. */
    int (*dropout_fwd)(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p,
                       uint32_t node, const dropout_key_t *key, const void *x, void *y);
    int (*dropout_bwd)(backend_t *be, int n, int64_t per_sample, dtype_t dt, double p,
                       uint32_t node, const dropout_key_t *key, const void *dy, void *dx);
    /* global average pool NHWC (n, hw, c) -> (n, c) */
    int (*avgpool_fwd)(backend_t *be, int n, int hw, int c, dtype_t dt, const void *x, void *y);
    int (*avgpool_bwd)(backend_t *be, int n, int hw, int c, dtype_t dt, const void *dy, void *dx);
    /* adaptive average pool (torch adaptive_avg_pool2d) NHWC (n, h, w, c) -> (n, p, q, c)
     * with s->p x s->q outputs (s->kernel, stride, pad unused): output (i, j) averages
     * input rows [floor(i*h/p), ceil((i+1)*h/p)) and likewise columns. Backward gathers
     * per input element the windows containing it, in output order (deterministic), and
     * overwrites dx. */
    int (*adaptive_avgpool_fwd)(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x,
                                void *y);
    int (*adaptive_avgpool_bwd)(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *dy,
                                void *dx);
    /* max pool (pool_shape_t). Each output is the first maximum of its window in window
     * order (rows, then columns; padding never wins), a NaN taking over as torch's kernel
     * does (`v > max || isnan(v)`); y is that input element itself, so half data is exact
     * selection. Backward recomputes the argmax from x and writes dx (overwritten) = the
     * sum of dy over the windows whose argmax each input element is, added in output
     * order (as torch's CPU kernel) in fp32 and rounded once. */
    int (*maxpool_fwd)(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x, void *y);
    int (*maxpool_bwd)(backend_t *be, const pool_shape_t *s, dtype_t dt, const void *x,
                       const void *dy, void *dx);
    /* fully connected: y[n,out] = x[n,in] w[out,in]^T + b[out] */
    int (*linear_fwd)(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                      const void *w, const float *b, void *y);
    int (*linear_bwd)(backend_t *be, int n, int in, int out, dtype_t dt, const void *x,
                      const void *w, const void *dy, void *dx, float *dw, float *db);
        /* dx may be NULL; dw, db accumulate */
    /* softmax cross-entropy with label smoothing (torch.nn.CrossEntropyLoss semantics).
     * dlogits = grad_scale * [ctl->loss_scale] * d(sum of per-sample losses)/dlogits
     * (ctl may be NULL: factor 1); loss_sum[0] = sum of per-sample losses (fp32,
     * overwritten); correct[0], correct[1] = top-1 and top-5 hits (overwritten). dlogits
     * may be NULL (evaluation). */
    int (*softmax_xent)(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                        const int32_t *labels, float smoothing, float grad_scale,
                        const step_ctl_t *ctl, void *dlogits, float *loss_sum, int32_t *correct);
    /* the same against soft targets (fp32 n x classes, backend memory; timm's
     * SoftTargetCrossEntropy, used with mixup): loss_i = sum_j t_ij (lse_i - x_ij),
     * dlogits = grad_scale * [ctl->loss_scale] * (softmax_ij * sum_k t_ik - t_ij); the hits
     * count the dominant label argmax_j t_ij (ties: the lower index), as timm reports
     * accuracy under mixup. */
    int (*softmax_xent_soft)(backend_t *be, int n, int classes, dtype_t dt, const void *logits,
                             const float *targets, float grad_scale, const step_ctl_t *ctl,
                             void *dlogits, float *loss_sum, int32_t *correct);
    /* optimizers over a contiguous range of the flat fp32 arrays. Both read ctl on the
     * device: nothing is written when ctl->found_inf is set; SGD initialises the momentum
     * buffer when ctl->optim_steps == 0, AdamW bias-corrects with step ctl->optim_steps + 1
     * (the count is advanced afterwards by step_ctl_update). beta1/beta2/lr/dampening/
     * weight_decay are given as the doubles torch would hold (see optim.c). lr NaN: the
     * learning rate is ctl->lr, read where the op runs (on the device), with the same
     * arithmetic as a value passed here; that is how a step recorded into a graph takes
     * the schedule's value of every step it is replayed for. */
    int (*sgd_step)(backend_t *be, int64_t n, float *p, const float *g, float *buf, double lr,
                    double momentum, double dampening, double weight_decay, bool nesterov,
                    const step_ctl_t *ctl);                       /* torch.optim.SGD */
    int (*adamw_step)(backend_t *be, int64_t n, float *p, const float *g, float *m, float *v,
                      double lr, double beta1, double beta2, double eps, double weight_decay,
                      const step_ctl_t *ctl);                     /* torch.optim.AdamW */
    /* After the optimizer ops of a step: found_inf clear: optim_steps++, and with
     * growth_interval > 0 growth_tracker++ (at growth_interval: loss_scale *=
     * growth_factor, tracker 0); found_inf set: loss_scale *= backoff_factor, tracker 0.
     * found_inf itself is left as it is (the trainer reads it for the step's record). */
    int (*step_ctl_update)(backend_t *be, step_ctl_t *ctl);
    /* Gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_, norm 2) of
     * the n gradients g: norm[0] = sqrt(sum g^2), summed in double in a fixed order and
     * rounded to fp32 (norm: backend memory, so nothing waits for the device). Then, unless
     * ctl->found_inf is set (an overflowed step is skipped, not clipped; ctl may be NULL) or max_norm <= 0
     * (norm only): coef = (1 / (norm + 1e-6)) * max_norm in fp32, which is how torch
     * evaluates max_norm / (total_norm + 1e-6), and g *= coef when coef < 1 (torch
     * multiplies by the coefficient clamped to 1, which leaves g unchanged). */
    int (*clip_grad_norm)(backend_t *be, int64_t n, float *g, double max_norm,
                          const step_ctl_t *ctl, float *norm);
    /* EMA of weights (timm ModelEmaV3's ema.lerp_(x, weight=1 - decay)): with the fp32
     * weight w = (float)(1 - decay), ema = ema + w * (x - ema) when |w| < 0.5, else
     * x - (x - ema) * (1 - w), each operation rounded to fp32 (torch.lerp's formula);
     * decay 0 copies x. */
    int (*ema_update)(backend_t *be, int64_t n, float *ema, const float *x, double decay);
    /* ema_update with the decay read where the op runs from *decay (one double of backend
     * memory that the host writes before the step), so a recorded step takes each step's
     * decay (timm's warm-up changes it every step). Same arithmetic. */
    int (*ema_update_dev)(backend_t *be, int64_t n, float *ema, const float *x, const double *decay);
    /* mixed precision */
    int (*cast)(backend_t *be, int64_t n, const void *src, dtype_t src_dt, void *dst,
                dtype_t dst_dt);
    int (*unscale_check_finite)(backend_t *be, int64_t n, float *g, step_ctl_t *ctl);
        /* g *= (float)(1 / (double)ctl->loss_scale); ctl->found_inf |= any non-finite g */
    int (*scale)(backend_t *be, int64_t n, float *x, float alpha); /* x *= alpha */
    /* SyncBN on the device: gathered holds `world` records of 2c floats in rank order, each
     * a rank's batch mean [c] then biased variance [c] over `count` rows (every rank the
     * same count); writes the statistics of the union (mean, biased variance) to mean and
     * var, combined in double in rank order exactly as model/bn_combine.h (torch's
     * batch_norm_gather_stats_with_counts). (optional) */
    int (*bn_combine)(backend_t *be, int world, int c, const float *gathered, int64_t count,
                      float *mean, float *var);
    /* Runs fn(ctx) on the host in queue order: after the ops issued before it, before the
     * ops issued after it; recorded like an op between graph_capture_begin/end (the cpu
     * backend's host collectives of DDP over shm inside a recorded step). fn reports
     * failures through ctx. (optional; the cpu backend has it) */
    int (*host_task)(backend_t *be, void (*fn)(void *ctx), void *ctx);
    /* Graphs (optional; NULL where the backend has none): record the ops issued between
     * graph_capture_begin and graph_capture_end instead of running them, then replay the
     * recording with one launch. Pointers and scalars are baked in, so only a sequence
     * whose arguments do not change may be recorded, and only after it ran once (the
     * first run of a shape may search algorithms, grow workspaces or wait, which cannot
     * be recorded). An op that fails while recording leaves its error in be->err; the
     * caller then calls graph_capture_end, which discards the recording and leaves the
     * backend usable. graph_launch returns 1 without running anything when memory the
     * recording uses was reallocated since (a workspace grew): free it and record again.
     * While recording, what a capture cannot hold fails the recording: host transfers
     * (upload, download), sync, alloc and release. The cpu backend has these ops only with
     * RUNNER_CPU_GRAPHS=1 in the environment (a test hook: model/cpu/cpu_graph.c records
     * the op calls and replays them with a CUDA graph's semantics). */
    int (*graph_capture_begin)(backend_t *be);
    int (*graph_capture_end)(backend_t *be, void **graph);        /* *graph NULL on failure */
    int (*graph_launch)(backend_t *be, void *graph);
    void (*graph_free)(backend_t *be, void *graph);
    /* Introspection (optional; env.json and benchmarks say what ran). conv_engine: the
     * kernel a convolution of shape s runs on in direction which (0 fwd, 1 bwd data,
     * 2 bwd filter), e.g. "dnnl jit:avx2" or "gemm" (CPU), "cudnn fwd IMPLICIT_PRECOMP_GEMM
     * tensor_op, ws 12.0 MB, gpu 0.123 ms, host 9 us; by gpu+host cost of 5 usable" (CUDA,
     * -1 before the shape's first call); it is the one later calls use.
     * libraries: the math libraries and the instruction-set level they run at. */
    int (*conv_engine)(backend_t *be, const conv_shape_t *s, int which, char *buf, size_t len);
    void (*libraries)(backend_t *be, char *buf, size_t len);
    /* Fused convolutions (issue 25; all optional: NULL, and the net runs the unfused ops
     * it always ran, with their bits). Each gives what its unfused sequence gives, to
     * rounding; the cpu backend's conv2d_bwd_data_accum gives the same bits.
     * conv2d_bwd_data_accum: dx += conv2d_bwd_data(dy, w) (dx holds a gradient already;
     *   the net's residual-gradient sum without a separate add).
     * conv2d_fwd_bn_stats: conv2d_fwd, then what bn_stats(m = n*p*q, k channels) writes
     *   for y into mean and var (the statistics may come from the conv's epilogue).
     * conv2d_bwd_data_bn: dx = conv2d_bwd_data(dy, w), masked by the derivative of act
     *   seen from relu_y (as bn_bwd_reduce masks dy) when relu_y is given, or left unmasked
     *   (bn_bwd_apply masks it again with the same relu_y and act, so both give the same
     *   result), then what bn_bwd_reduce(m = n*h*w, c, bn_x, relu_y, act, dx, mean, var,
     *   eps, ...) writes into sum_dy, sum_dy_xhat and adds into dgamma, dbeta. A backend
     *   may run it unfused for any act (the cuda backend fuses ACT_NONE and ACT_RELU). */
    int (*conv2d_bwd_data_accum)(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                                 const void *w, void *dx);
    int (*conv2d_fwd_bn_stats)(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *x,
                               const void *w, void *y, float *mean, float *var);
    int (*conv2d_bwd_data_bn)(backend_t *be, const conv_shape_t *s, dtype_t dt, const void *dy,
                              const void *w, void *dx, const void *bn_x, const void *relu_y,
                              act_kind_t act, const float *mean, const float *var, float eps,
                              float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta);
    /* bn_stats, then bn_update_running(c, mean, var, count, momentum, run_mean, run_var) on
     * what it wrote, in one op (optional: NULL, and the net calls the two; the cuda
     * backend's bn_fold_running). The same results as the two calls, bit for bit. The net
     * uses it only where nothing changes the statistics in between (no SyncBN). */
    int (*bn_stats_running)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean,
                            float *var, int64_t count, float momentum, float *run_mean, float *run_var);
    /* The activation's mask kept as bits (optional, all three or none: NULL, and the net
     * reads y; the cuda backend's bn_mask_bits). The mask of m rows of c channels is
     * (m * c + 7) / 8 bytes, element i = row * c + channel at bit i & 7 of byte i >> 3.
     * bn_apply_mask: bn_apply (act RELU or RELU6), and the mask's bit i set where
     *   bn_bwd_reduce / bn_bwd_apply keep the gradient at the y[i] it stored (y > 0 for
     *   relu, not (y <= 0 or y >= 6) for relu6); returns 1 with nothing written where the
     *   backend cannot for this shape or alignment (call bn_apply then, and read y).
     * bn_bwd_reduce_mask, bn_bwd_apply_mask: bn_bwd_reduce / bn_bwd_apply with y (and
     *   act) as given there and beta NULL, the mask taken from the bits bn_apply_mask
     *   wrote with that y instead of reading y: the same results, bit for bit (y is
     *   passed for the launch geometry only). */
    int (*bn_apply_mask)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                         const float *var, const float *gamma, const float *beta, float eps,
                         const void *z, act_kind_t act, void *y, uint8_t *mask);
    int (*bn_bwd_reduce_mask)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x,
                              const void *y, act_kind_t act, const void *dy, const float *mean,
                              const float *var, const float *gamma, float eps, float *sum_dy,
                              float *sum_dy_xhat, float *dgamma, float *dbeta, const uint8_t *mask);
    int (*bn_bwd_apply_mask)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x,
                             const void *y, act_kind_t act, const void *dy, const float *mean,
                             const float *var, const float *gamma, float eps, const float *sum_dy,
                             const float *sum_dy_xhat, int64_t count, void *dx, void *dz,
                             const uint8_t *mask);
    /* A shortcut's BN inside the add-relu BN that adds it (optional, all three or none:
     * NULL, and the net runs the two BNs' ops; the cuda backend's bn_dual_add). The
     * shortcut z = bn2(x2; mean2, var2, gamma2, beta2), no activation, m rows of c
     * channels as the add-relu BN's, is neither stored nor is its gradient.
     * bn_apply_dual: y = act(bn(x) + z), z rounded to dt as bn_apply would have stored it:
     *   the bits of bn_apply(z) then bn_apply(x, ..., z, act, y); with mask (may be NULL)
     *   also the mask bits as bn_apply_mask writes them. 1 (nothing written) where the
     *   backend cannot (then the net runs the two bn_apply calls).
     * bn_bwd_reduce_dual: bn_bwd_reduce of the add-relu BN (x, y, act, dy; the mask from
     *   the bits when mask is given, else from y) into sum_dy, sum_dy_xhat, dgamma,
     *   dbeta, and of the shortcut's BN on the gradient it would have received (dy
     *   masked: the add's dz) into sum_dy2, sum_dy_xhat2, dgamma2, dbeta2.
     * bn_bwd_apply_dual: dx as bn_bwd_apply of the add-relu BN gives it and dx2 as the
     *   shortcut BN's bn_bwd_apply on dz gives it (count, count2: their statistics' rows).
     * The same bits as the separate ops where the pointers share their alignment. */
    int (*bn_apply_dual)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const float *mean,
                         const float *var, const float *gamma, const float *beta, const void *x2,
                         const float *mean2, const float *var2, const float *gamma2, const float *beta2,
                         float eps, act_kind_t act, void *y, uint8_t *mask);
    int (*bn_bwd_reduce_dual)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                              act_kind_t act, const void *dy, const float *mean, const float *var,
                              const void *x2, const float *mean2, const float *var2, float eps,
                              float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, float *sum_dy2,
                              float *sum_dy_xhat2, float *dgamma2, float *dbeta2, const uint8_t *mask);
    int (*bn_bwd_apply_dual)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                             act_kind_t act, const void *dy, const float *mean, const float *var,
                             const float *gamma, const void *x2, const float *mean2, const float *var2,
                             const float *gamma2, float eps, const float *sum_dy, const float *sum_dy_xhat,
                             int64_t count, const float *sum_dy2, const float *sum_dy_xhat2, int64_t count2,
                             void *dx, void *dx2, const uint8_t *mask);
    /* A BN's passes one op each way (optional, both or none: NULL, and the net runs the
     * separate ops; the cuda backend's bn_persist). Each returns 1 with nothing written
     * where the backend cannot for this shape, alignment or device (the net then runs
     * the separate ops), else the same bits as the separate ops:
     * bn_fwd_fused: bn_stats_running(m, c, dt, x, mean, var, count, momentum, run_mean,
     *   run_var) (run_mean NULL: bn_stats only), then bn_apply(x, mean, var, gamma, beta,
     *   eps, z, act, y), or bn_apply_mask when mask is given.
     * bn_bwd_fused: bn_bwd_reduce(x, y, act, dy, mean, var, gamma, beta, eps, sum_dy,
     *   sum_dy_xhat, dgamma, dbeta) then bn_bwd_apply(..., count, dx, dz), or their _mask
     *   forms (beta unused) when mask is given. */
    int (*bn_fwd_fused)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, float *mean, float *var,
                        int64_t count, float momentum, float *run_mean, float *run_var, const float *gamma,
                        const float *beta, float eps, const void *z, act_kind_t act, void *y, uint8_t *mask);
    int (*bn_bwd_fused)(backend_t *be, int64_t m, int c, dtype_t dt, const void *x, const void *y,
                        act_kind_t act, const void *dy, const float *mean, const float *var, const float *gamma,
                        const float *beta, float eps, float *sum_dy, float *sum_dy_xhat, float *dgamma,
                        float *dbeta, int64_t count, void *dx, void *dz, const uint8_t *mask);
} backend_ops_t;

/* The common header of every backend object; implementations embed it first. */
struct backend {
    const backend_ops_t *ops;
    backend_kind_t kind;
    int device;
    int threads;
    err_t err;          /* the last failure of any op */
    char notice[512];   /* what the backend did differently from what was asked, for the
                           console ("" if nothing; the caller prints and clears it), e.g. a
                           cuDNN fallback to a non-deterministic algorithm */
};

/* Creates a backend. kind BACKEND_CUDA in a build without CUDA, or on a machine without a
 * visible GPU, fails with ERR_INPUT and a message saying so. */
backend_t *backend_create(const backend_opts_t *opts, err_t *e);
void backend_free(backend_t *be);

/* Bytes one element of dt occupies in this backend's memory (cpu: always 4). */
size_t backend_elem_size(const backend_t *be, dtype_t dt);

/* Number of CUDA devices visible (0 without CUDA or without a GPU); never fails. */
int backend_cuda_device_count(void);
/* Fills a short description of GPU i ("NVIDIA H100 80GB HBM3, 81559 MiB, cc 9.0"). */
int backend_cuda_device_name(int i, char *buf, size_t len);
/* Total memory of GPU i in bytes (cudaDeviceProp.totalGlobalMem); 0 without CUDA or when
 * i is not a visible device. */
size_t backend_cuda_device_memory(int i);
/* Versions "driver 13.0, runtime 13.0, cuDNN 9.x, NCCL 2.28.x" or "" without CUDA. */
void backend_cuda_versions(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
