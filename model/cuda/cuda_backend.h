/* cuda_backend.h: the CUDA compute backend (cuDNN convolutions, cuBLASLt classifier, own
 * kernels for batch norm, elementwise ops, loss, optimizers and augmentation).
 *
 * It fills every slot of backend_ops_t (model/backend.h) for device memory of one GPU.
 * Half tensors (DT_F16, DT_BF16) are stored as real 2-byte values, so backend_elem_size
 * must return 2 for them and 4 for DT_F32 on this backend. All work of one backend runs
 * in order on one CUDA stream (cuda_backend_stream); nothing allocates inside a training
 * step once every convolution shape has been seen once (algorithm search and workspace
 * growth happen on the first use of a shape).
 *
 * This header is plain C (model/backend.c includes it under RUNNER_HAVE_CUDA); the
 * implementation lives in the .cu files beside it. It does not: pick devices for DDP/DP
 * (the plan does), talk to other ranks (comm/nccl.c), or read datasets (data/).
 */
#ifndef RUNNER_MODEL_CUDA_BACKEND_H
#define RUNNER_MODEL_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model/backend.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates a backend on GPU o->device (after CUDA_VISIBLE_DEVICES). Without a visible GPU
 * it fails with ERR_INPUT ("device: cuda requested but no CUDA GPU is visible ...");
 * a device ordinal out of range is ERR_INPUT naming the count. Free with backend_free. */
backend_t *cuda_backend_create(const backend_opts_t *o, err_t *e);

/* Number of visible CUDA devices; 0 when there is no driver or no GPU. Never fails. */
int cuda_device_count(void);

/* "NVIDIA H100 80GB HBM3, 81559 MiB, cc 9.0" for device i. Returns 0, or -1 (buf gets
 * "unknown") when i is not a visible device. */
int cuda_device_name(int i, char *buf, size_t len);

/* Total memory of device i in bytes; 0 when i is not a visible device. */
size_t cuda_device_memory(int i);

/* "driver 13.0, runtime 13.0, cuDNN 9.19.0, cuBLASLt 13.0.x" (driver "none" without one). */
void cuda_versions(char *buf, size_t len);

/* Page-locked host memory for the loader's staging buffers (fast, asynchronous
 * uploads). Returns NULL with ERR_RUNTIME in e on failure. Free with cuda_host_free. */
void *cuda_host_alloc(size_t bytes, err_t *e);
void cuda_host_free(void *p);

/* The backend's CUDA stream as a cudaStream_t cast to void * (for NCCL and the loader).
 * be must be a cuda backend. */
void *cuda_backend_stream(backend_t *be);

/* Asynchronous upload on the backend's stream: returns before the copy ran. With pinned
 * src (cuda_host_alloc) the caller must keep src unchanged until a later sync or event;
 * ops->upload, in contrast, is safe to reuse its source as soon as it returns. */
int cuda_upload_async(backend_t *be, void *dst, const void *host_src, size_t bytes);

/* Copies bytes from src (memory of src_be's device) to dst (memory of dst_be's device):
 * waits for src_be's stream, so src holds what was queued on it, then enqueues the copy
 * on dst_be's stream (cudaMemcpyPeerAsync: direct where peer access is possible, which
 * it enables once per device pair; staged through the host otherwise; a plain device
 * copy when both are on one device). Returns before the copy ran: later work on dst_be's
 * stream sees dst, and src must stay unchanged until dst_be's stream got past the copy
 * (sync dst_be). The two may be the same backend. Errors go to dst_be's err. */
int cuda_copy_peer(backend_t *dst_be, void *dst, backend_t *src_be, const void *src, size_t bytes);

/* The copy stream of the CPU loader's path (stager.cu): host batches uploaded on a second
 * stream into two alternating device buffers of `bytes`, so the copy of the next batch
 * overlaps the compute stream's work on the current one.
 *   cuda_stager_upload: enqueues the copy (of host_src, and of src2 when bytes2 > 0, put
 *     at *dev2) once the slot is free, makes the compute stream wait for it, waits (host)
 *     for the copy only, and returns the device buffer (NULL with e set on failure); the
 *     sources may be reused on return. bytes + bytes2 must fit the size given to create.
 *   cuda_stager_release: after the caller enqueued (on the compute stream) the last use
 *     of the buffer upload returned: marks its slot free from that point of the stream. */
typedef struct cuda_stager cuda_stager_t;
cuda_stager_t *cuda_stager_create(backend_t *be, size_t bytes, err_t *e);
void *cuda_stager_upload(cuda_stager_t *s, const void *host_src, size_t bytes, const void *src2, size_t bytes2,
                         void **dev2, err_t *e);
int cuda_stager_release(cuda_stager_t *s, err_t *e);
void cuda_stager_free(cuda_stager_t *s);

/* Enqueues dw[i] += (float)src[i] style accumulation of a gradient computed in half; used
 * by conv and linear internally and exported for tests. */
int cuda_accumulate_half(backend_t *be, int64_t n, dtype_t src_dt, const void *src, float *dw);

/* Releases cached convolution algorithms and the shared workspace (the next use of a shape
 * searches again). For benchmarks that switch dtypes. Graphs recorded before are stale
 * afterwards (graph_launch returns 1): they use the freed workspace. */
void cuda_backend_clear_caches(backend_t *be);

/* Issue 25, for tests and benchmarks: the cuDNN graph API engine that last ran a
 * convolution of shape s in direction which (0 fwd, 1 bwd data, 2 bwd filter), as
 * "cudnn-graph eng<N> <knobs>[ +<fused ops>]": 0, or 1 when no graph plan ran it (the
 * legacy API did, or no call yet). */
int cuda_conv_graph_engine(backend_t *be, const conv_shape_t *s, int which, char *buf, size_t len);
/* Issue 25, for the op profiler: whether the last call of a fused op
 * (conv2d_fwd_bn_stats, conv2d_bwd_data_bn, conv2d_bwd_data_accum) ran fused: 1, or 0
 * when it ran its unfused fallback (no graph engine, deterministic mode, an activation
 * the graph does not build); after bn_bwd_reduce or bn_bwd_apply, whether it recomputed
 * the activation's mask instead of reading y (bn_remask). */
int cuda_backend_last_fused(backend_t *be);
/* Issue 25, for the BN geometry sweep (bench_gpu_bench --bn-sweep) and its test: overrides
 * of the BN row kernels' launch geometry (model/cuda/norm.cu, bn_geom): rows_min, the
 * fewest rows a thread takes (default 16, bn_more_splits 4); blocks_per_sm, the blocks
 * (row splits x channel blocks) aimed at per SM (default 8); v_max, the widest channel
 * vector a thread takes where the default would take a wider one (8, 4, 2 or 1; the mask
 * kernels of bn_mask_bits keep 8); one_pass, the reductions (bn_stats, bn_bwd_reduce but
 * bn_dual_add's) in one kernel: the block that finishes a channel block last (a ticket
 * per channel block) adds the row splits' partials and writes the results, instead of a
 * second kernel doing it (one launch fewer per reduction). 0 keeps the default; NULL
 * restores every default. The reductions then add their partial sums in another fixed
 * order (rounding, not the result; deterministic either way); the apply kernels compute
 * each element alike, so their outputs are the same bits under any geometry
 * (test_gpu_norm). persist_blocks, persist_slots (bn_persist's cooperative kernels, for
 * their tests): at most that many blocks in the grid (so each takes several of the row
 * kernels' blocks), at most that many rows a thread kept in shared memory (-1: none, so
 * every row is read again); the same bits under any. Outside a graph capture (one_pass
 * allocates its tickets once): 0, or -1 with the backend's error. */
typedef struct cuda_bn_geom {
    int rows_min, blocks_per_sm, v_max, one_pass;
    int persist_blocks, persist_slots;
} cuda_bn_geom_t;
int cuda_backend_bn_geometry(backend_t *be, const cuda_bn_geom_t *g);
/* For a unit test without a GPU: builds and finalizes every descriptor of the operations
 * of graph kind (0 .. cuda_conv_graph_kinds() - 1, named by cuda_conv_graph_kind_name:
 * fprop, dgrad, wgrad, dgrad_accum, fprop_stats, dgrad_dbn, dgrad_drelu_dbn) for shape s
 * in dt with 16-byte aligned tensors: tensors, the convolution, pointwise, reduction and
 * genStats operations, not the operation graph (which needs a device). 0 ("<n>
 * operations" in why), or -1 with the failing step and cuDNN's status in why. */
int cuda_conv_graph_kinds(void);
const char *cuda_conv_graph_kind_name(int kind);
int cuda_conv_graph_describe(int kind, const conv_shape_t *s, dtype_t dt, bool deterministic, char *why, size_t len);

/* Issue 25, the pattern probe (bench_gpu_bench --patterns): what cuDNN offers for graph
 * kind on shape s in dt on be's device, and how fast, on scratch buffers of its own
 * (zeros; 256-byte aligned). The engine configs of heuristics mode A, then the fallback
 * list, are counted (configs), filtered by the backend's numerical-note rules (usable;
 * deterministic mode: no NONDETERMINISTIC note, and the kinds with reductions count no
 * usable engine, as plan_build), split into pre-compiled ones and runtime-compiled ones
 * (NVRTC at finalize, ~1 s each); the first 4 usable pre-compiled ones that finalize are
 * timed (ms per run, one warm-up and two runs, events) and the fastest kept (and the
 * first one's time: deterministic mode's pick where no runtime-compiled engine comes
 * before it); with rtc,
 * the first usable runtime-compiled one is finalized and timed too. 0, or -1 with be's
 * error (a CUDA failure); a graph that does not build is 0 with why set. */
typedef struct cuda_graph_probe {
    int configs, usable, runtime;   /* runtime: of the usable, runtime-compiled */
    float pre_ms, rtc_ms;           /* -1: none (or rtc not asked) */
    float first_ms;                 /* the first usable pre-compiled plan's: what deterministic
                                     * mode runs (it takes that one untimed); -1: none */
    char pre_engine[128], rtc_engine[128];
    char why[160];
} cuda_graph_probe_t;
int cuda_conv_graph_probe(backend_t *be, int kind, const conv_shape_t *s, dtype_t dt, bool rtc,
                          cuda_graph_probe_t *r);

#ifdef __cplusplus
}
#endif
#endif
