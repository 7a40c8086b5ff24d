/* sampler.h: which dataset indices a rank visits in an epoch, and in what order.
 *
 * Training (eval = false) follows torch.utils.data.DistributedSampler:
 *   - order: shuffle ? a permutation of 0..N-1 : 0..N-1. Our permutation is Fisher-Yates
 *     driven by rng keyed (seed, RNG_STREAM_SHUFFLE, epoch) (PyTorch seeds randperm with
 *     seed + epoch; the numbers differ, the properties are the same);
 *   - drop_last = false: padded to total = W * ceil(N / W) by repeating indices from the
 *     start of the order (cycling if needed); drop_last = true: truncated to
 *     total = W * floor(N / W);
 *   - rank r takes order[r], order[r + W], order[r + 2W], ...: num_samples = total / W.
 * Every rank therefore has the same number of samples and the ranks are disjoint except
 * for the padding.
 *
 * Evaluation (eval = true): no shuffle, no padding, so every sample is evaluated exactly
 * once over all ranks: rank r takes the CONTIGUOUS range [begin_r, begin_r + count_r) with
 * count_r = N / W + (r < N % W) and begin_r = r * (N / W) + min(r, N % W). Ranks may differ
 * by one sample; the caller all-reduces sums (not means).
 *
 * Resume: an epoch can start at sample k of the rank's list (sampler_indices + k), which
 * the loader exposes as a batch offset.
 */
#ifndef RUNNER_DATA_SAMPLER_H
#define RUNNER_DATA_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sampler_opts {
    int64_t n;         /* dataset size, >= 1 */
    int world_size;    /* >= 1 */
    int rank;          /* 0 <= rank < world_size */
    bool shuffle;      /* train: true; ignored when eval */
    bool drop_last;    /* train: false; ignored when eval */
    bool eval;         /* evaluation split (see above) */
    uint64_t seed;
} sampler_opts_t;

/* Caller-owned; sampler_init / sampler_deinit. Fields are read-only for callers. */
typedef struct sampler {
    sampler_opts_t o;
    int64_t num_samples;   /* this rank's samples per epoch */
    int64_t total_size;    /* over all ranks (train: num_samples * W; eval: N) */
    int64_t epoch;         /* the epoch indices[] was built for (-1 before set_epoch) */
    int64_t *indices;      /* num_samples dataset indices, this rank, this epoch */
    int64_t *order_;       /* scratch: the full epoch order (N entries) */
} sampler_t;

/* Validates o and sizes the sampler; indices are built by sampler_set_epoch. 0 / -1. */
int sampler_init(sampler_t *s, const sampler_opts_t *o, err_t *e);

/* Builds this rank's indices for an epoch (>= 0). Same (seed, epoch) -> same indices. */
int sampler_set_epoch(sampler_t *s, int64_t epoch, err_t *e);

void sampler_deinit(sampler_t *s);

/* Per-rank sample count for (n, world, drop_last) by DistributedSampler's rule (train). */
int64_t sampler_num_samples(int64_t n, int world_size, bool drop_last);

/* The evaluation range of a rank (see above). */
void sampler_eval_range(int64_t n, int world_size, int rank, int64_t *begin, int64_t *count);

#ifdef __cplusplus
}
#endif
#endif
