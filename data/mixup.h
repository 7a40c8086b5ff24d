/* mixup.h: timm's Mixup / CutMix of one normalised micro-batch and its soft targets.
 *
 * Definition followed (timm data/mixup.py, Mixup with cutmix_minmax None, correct_lam
 * True): with probability `prob` (per batch, per element or per pair, by mode) a sample is
 * mixed with its partner n - 1 - i (the flipped batch); CutMix instead of mixup with
 * probability switch_prob when both alphas are > 0; lam ~ Beta(alpha, alpha) of the chosen
 * method. Mixup: x_i = lam x_i + (1 - lam) x_j. CutMix: a box of side int(H sqrt(1 - lam))
 * x int(W sqrt(1 - lam)) centred at a uniform pixel (cy, cx), cut at the border (rows
 * clip(cy - cut_h // 2, 0, H) .. clip(cy + cut_h // 2, 0, H)), is copied from the partner
 * and lam becomes 1 - box area / (H W). Targets: label smoothing folded in
 * (off = smoothing / classes, on = 1 - smoothing + off), y_i * lam + y_j * (1 - lam).
 * Modes: batch (one lam for the batch, in double as timm's Python float), elem (one per
 * sample, float32 as timm's numpy array), pair (one per pair i, n - 1 - i). An odd batch
 * (timm refuses it) pairs its middle sample with itself; in pair mode it stays unmixed.
 *
 * Draws: rng (seed, RNG_STREAM_MIXUP, epoch, micro-batch index + 2^32 * rank), so a
 * micro-batch's mixing depends only on where it is in the epoch: resume reproduces it, and
 * the GPU path (which draws here too and uploads the result) mixes exactly alike. Order:
 *   batch: u < prob; if both alphas: u < switch_prob; lam = Beta; cutmix: cy, cx
 *   elem, pair: per sample (pair: per pair): [u < switch_prob if both alphas], lam = Beta,
 *   u < prob, then for a mixed cutmix sample cy = rng_below(H), cx = rng_below(W).
 * Beta(a, a) = G1 / (G1 + G2) from two Marsaglia-Tsang Gamma(a) draws (boosted for a < 1),
 * computed in log space.
 */
#ifndef RUNNER_DATA_MIXUP_H
#define RUNNER_DATA_MIXUP_H

#include <stdbool.h>
#include <stdint.h>

#include "util/augops.h"
#include "util/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MIXUP_BATCH = 0, MIXUP_PAIR = 1, MIXUP_ELEM = 2 } mixup_mode_t;

typedef struct mixup_opts {
    double alpha;          /* mixup Beta alpha; 0: no mixup (timm --mixup) */
    double cutmix_alpha;   /* cutmix Beta alpha; 0: no cutmix (timm --cutmix) */
    double prob;           /* timm --mixup-prob */
    double switch_prob;    /* timm --mixup-switch-prob */
    mixup_mode_t mode;     /* timm --mixup-mode */
    double smoothing;      /* folded into the targets (timm --smoothing) */
    int classes;           /* target width */
} mixup_opts_t;

/* True when mixup or cutmix is on (an alpha > 0). */
bool mixup_enabled(const mixup_opts_t *o);

/* A Beta(a, a) draw in (0, 1). */
double mixup_beta(rng_t *r, double a);

/* timm rand_bbox (margin 0) for lam and the centre (cy, cx): rows [*yl, *yh), columns
 * [*xl, *xh); returns the corrected lam = 1 - area / (h w). ratio is sqrt(1 - lam). */
double mixup_box(int h, int w, double ratio, int cy, int cx, int *yl, int *yh, int *xl, int *xh);

/* The samples of a batch-mode mixing with lam (1: none), cutmix when cut with centre
 * (cy, cx) (what mixup_draw does after its draws; tests feed their own). */
void mixup_set_batch(double lam, int cut, int cy, int cx, int n, int h, int w, mix_sample_t *s);

/* Sample i of an elem-mode mixing (pair: also its partner n - 1 - i) with lam (float32),
 * cutmix when cut with centre (cy, cx). */
void mixup_set_elem(int i, bool pair, float lam, int cut, int cy, int cx, int n, int h, int w, mix_sample_t *s);

/* The mixing of micro-batch `batch` of the epoch on `rank` (n samples of h x w) into s[n]. */
void mixup_draw(const mixup_opts_t *o, uint64_t seed, int64_t epoch, int64_t batch, int rank, int n, int h,
                int w, mix_sample_t *s);

/* Mixes x (n x h x w x c floats, NHWC) in place as s says. */
void mixup_apply(const mix_sample_t *s, int n, int h, int w, int c, float *x);

/* timm's on/off values for smoothing over classes (float32 as torch.full stores them). */
void mixup_on_off(double smoothing, int classes, float *on, float *off);

/* Soft targets t (n x classes) from the samples' labels. */
void mixup_targets(const mix_sample_t *s, int n, const int32_t *labels, int classes, float on, float off,
                   float *t);

#ifdef __cplusplus
}
#endif
#endif
