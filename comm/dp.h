/* dp.h: DataParallel semantics in one process (PyTorch nn.DataParallel): world replicas
 * of one net, each bound to its own backend (device) and driven by its own thread.
 *
 * Each training step: parameters and buffers are copied from replica 0 to the others
 * (replicate: device to device when every replica is a CUDA backend, on any devices or
 * several on one; through the host otherwise); the batch is scattered in contiguous
 * chunks of torch's sizes (ceil(n/world) per chunk, the last smaller, fewer chunks when n
 * is small); every replica runs forward on its chunk; the loss is the mean over the whole
 * batch (each replica's logits gradient is scaled by loss_scale / global_batch, which is
 * exactly what gathering the outputs on replica 0 and differentiating the mean loss there
 * gives, since each sample's loss depends only on its own logits); backward on every
 * replica; gradients are summed into replica 0 in replica order (0 + 1 + ...,
 * deterministic; on replica 0's device for CUDA replicas); the optimizer then steps on
 * replica 0 only (the trainer's job). BN running statistics come from replica 0 only
 * (torch keeps only the module's own buffers, which replica 0 updates with its chunk).
 *
 * It does not: run the optimizer, own the nets or backends, or support SyncBN.
 *
 * Call sequence:
 *     nets[i] = resnet_build(...); net_bind(nets[i], backend_i, ceil(B/world), ...);
 *     net_init(nets[0], seed); dp_t *d = dp_create(nets, world, H, W, &e);
 *     per optimizer step: net_zero_grads(nets[0]);
 *         for each micro-batch: dp_forward_backward(d, images, labels, n, global_batch,
 *                                                   smoothing, loss_scale, &out, &e);
 *         optimizer on net_params(nets[0]) / net_grads(nets[0])
 *     evaluation: use nets[0] directly.   dp_free(d) (nets stay the caller's).
 */
#ifndef RUNNER_COMM_DP_H
#define RUNNER_COMM_DP_H

#include <stdint.h>

#include "model/net.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dp dp_t;

/* Timing of the last dp_forward_backward. */
typedef struct dp_timing {
    double replicate_s;   /* copying params/buffers from replica 0 */
    double compute_s;     /* forward + loss + backward, slowest replica */
    double reduce_s;      /* summing gradients into replica 0 */
} dp_timing_t;

/* nets[0..world-1]: the same architecture, each bound (net_bind) on its own backend with
 * max_batch >= ceil(batch / world) for in_h x in_w inputs. Borrowed, not owned (the
 * array must outlive d). Starts world - 1 threads. With CUDA replicas it also allocates
 * two gradient-sized fp32 arrays on replica 0's backend (its earlier gradient, staging),
 * released by dp_free; the backends must outlive d. */
dp_t *dp_create(net_t *const *nets, int world, int in_h, int in_w, err_t *e);
void dp_free(dp_t *d);

/* The chunk torch's scatter gives replica i of a batch of n: [*start, *start + *count). */
void dp_chunk(int n, int world, int i, int *start, int *count);

/* One micro-batch: replicate, scatter images (host NHWC fp32, n x H x W x C) and labels
 * (or, when targets is not NULL, the rows of the soft targets, n x classes: mixup, which
 * mixed the whole micro-batch on the host before the scatter, as timm's Mixup does in front
 * of nn.DataParallel; the nets need net_enable_soft_targets), forward, loss (grad_scale =
 * loss_scale / global_batch), backward on every replica
 * (each into zeroed gradients), and replica 0's gradient array becomes
 * previous + ((g0 + g1) + ...) as torch's .grad accumulation does. out receives the sums
 * over the whole micro-batch. */
int dp_forward_backward(dp_t *d, const float *images, const int32_t *labels, const float *targets, int n,
                        int global_batch, float smoothing, float loss_scale,
                        net_loss_out_t *out, err_t *e);
void dp_take_timing(dp_t *d, dp_timing_t *t);

/* The dropout key (net_set_rng_key) of the next dp_forward_backward's micro-batch: row j
 * of it is sample first_sample + j * sample_stride, so replica i, whose chunk starts at
 * row start_i, keys its nets with first_sample + start_i * sample_stride and draws the
 * masks a single process would. Kept until changed. */
void dp_set_rng_key(dp_t *d, uint64_t seed, uint64_t epoch, int64_t first_sample, int64_t sample_stride);

#ifdef __cplusplus
}
#endif
#endif
