/* steady.h: the steady-state training rate of a run, from the time of every step.
 *
 * The trainer reads its steps back a window at a time (each step on the CPU and in DP,
 * up to 32 steps on a GPU) and records every window in timing.csv (docs/architecture.md):
 * its steps, the images they trained (all ranks) and its wall time, which excludes
 * evaluation and checkpoints. A window is warm-up when it holds one of the first
 * STEADY_WARMUP_STEPS steps that the process ran in an epoch: each epoch refills the
 * loader's queue, and the first epoch of a process (a resume too) also pays for lazy
 * allocations, kernel selection and a CUDA graph's capture. The same count is the
 * default warm-up of timm's benchmark.py (--num-warm-iter 10).
 *
 * The steady-state rate is (images of the steady windows) / (seconds of the steady
 * windows): every steady step counts with its real time, so images/s and the seconds an
 * epoch takes at that rate (images per epoch / rate) cannot disagree. The trainer keeps
 * these sums for summary.json (steady_sums_t, saved in its checkpoints); the report
 * recomputes them from timing.csv with the spread over blocks (steady_measure).
 * Not here: reading files (runread.h), comparing runs (verdict.h).
 */
#ifndef RUNNER_REPORT_STEADY_H
#define RUNNER_REPORT_STEADY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    STEADY_WARMUP_STEPS = 10,   /* steps at the start of each epoch (and of a resume) left out */
    STEADY_MIN_STEPS = 20,      /* fewer steady-state steps: too short to measure */
    STEADY_BLOCKS = 5,          /* consecutive blocks the within-run spread is taken over */
    STEADY_MIN_BLOCKS = 3       /* fewer steady windows: no within-run spread */
};

/* Running sums over windows (trainer: summary.json and its checkpoints). */
typedef struct steady_sums {
    int64_t steady_steps, warmup_steps;
    double steady_images, steady_seconds, warmup_images, warmup_seconds;
} steady_sums_t;

/* True when a window whose first step had since_start steps of its epoch run before it
 * (in this process) is warm-up. */
bool steady_is_warmup(int64_t since_start);

/* Adds one window: steps steps, images images, seconds of wall time. */
void steady_add(steady_sums_t *s, int64_t since_start, int64_t steps, double images, double seconds);

/* images/s over the steady windows; NaN when there is none. */
double steady_rate(const steady_sums_t *s);

/* One window as timing.csv records it. */
typedef struct steady_window {
    int64_t since_start, steps;
    double images, seconds;
} steady_window_t;

/* What one run's windows say. */
typedef struct steady_measure {
    steady_sums_t sums;
    double rate;          /* steady images/s; NaN without a steady window */
    int blocks;           /* blocks the steady windows were split into (0: fewer than
                             STEADY_MIN_BLOCKS steady windows) */
    double block_std;     /* sample standard deviation of the blocks' rates; NaN without blocks */
    double se;            /* block_std / sqrt(blocks): the within-run uncertainty of rate */
} steady_measure_t;

/* Measures windows w[0..n) in step order. The steady windows are cut into
 * min(STEADY_BLOCKS, steady windows) consecutive blocks of about equal step counts;
 * each block's rate is its images over its seconds. */
void steady_measure(const steady_window_t *w, size_t n, steady_measure_t *out);

#ifdef __cplusplus
}
#endif
#endif
