/* test_verdict.c: the numbers behind a comparison's verdict (runner/report/steady.h,
 * verdict.h): the steady-state rate of a synthetic step record with a known answer, its
 * within-run spread, sample statistics, the t quantile, Welch's test, and the verdict's
 * words on constructed cases (a clear winner, within noise, too short, single seeds,
 * accuracy that differs, old runs, one member, a failed member). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/report/steady.h"
#include "runner/report/verdict.h"
#include "tests/test.h"

/* Epoch 1: 30 one-step windows (a CPU run) of 10 images: the first 10 (warm-up) take
 * 0.5 s each, the other 20 take 0.1 s (100 images/s). Epoch 2: four-step windows (a GPU
 * run) starting at step 0, 4, 8 (warm-up: each holds one of the first 10 steps) taking
 * 1 s, then 12, 16, 20 with 40 images in 0.2 s (200 images/s). Steady: 200 + 120 images in
 * 2.0 + 0.6 s = 123.0769... images/s over 20 + 12 steps. */
static size_t record(steady_window_t *w) {
    size_t n = 0;
    for (int i = 0; i < 30; i++)
        w[n++] = (steady_window_t){.since_start = i, .steps = 1, .images = 10, .seconds = i < 10 ? 0.5 : 0.1};
    for (int k = 0; k < 6; k++)
        w[n++] = (steady_window_t){.since_start = 4 * k, .steps = 4, .images = 40, .seconds = k < 3 ? 1.0 : 0.2};
    return n;
}

static void test_steady_rate(void) {
    steady_window_t w[40];
    size_t n = record(w);
    steady_measure_t m;
    steady_measure(w, n, &m);
    CHECK_NEAR(m.rate, 320.0 / 2.6, 1e-12, 0);
    CHECK_INT(m.sums.steady_steps, 32);
    CHECK_INT(m.sums.warmup_steps, 22);
    CHECK_NEAR(m.sums.steady_seconds, 2.6, 1e-12, 0);
    CHECK_NEAR(m.sums.warmup_seconds, 8.0, 1e-12, 0);
    /* 5 blocks by steps before each steady window (b = floor(5 * before / 32)): windows
     * 0-6, 7-12, 13-19 of epoch 1 at 100 images/s, then the first two of epoch 2 and the
     * last at 200: mean 140, deviations -40 x3, +60 x2, std sqrt(12000 / 4) */
    CHECK_INT(m.blocks, 5);
    CHECK_NEAR(m.block_std, sqrt(3000.0), 1e-9, 0);
    CHECK_NEAR(m.se, sqrt(3000.0) / sqrt(5.0), 1e-9, 0);
    /* the trainer's running sums give the same rate */
    steady_sums_t s = {0};
    for (size_t i = 0; i < n; i++) steady_add(&s, w[i].since_start, w[i].steps, w[i].images, w[i].seconds);
    CHECK_NEAR(steady_rate(&s), 320.0 / 2.6, 1e-12, 0);
    CHECK(steady_is_warmup(9) && !steady_is_warmup(10));
}

static void test_steady_edges(void) {
    steady_window_t w[40];
    size_t n = record(w);
    steady_measure_t m;
    /* only warm-up: no rate */
    steady_measure(w, 10, &m);
    CHECK(isnan(m.rate));
    CHECK_INT(m.sums.warmup_steps, 10);
    CHECK_INT(m.blocks, 0);
    /* two steady windows: a rate, but no spread */
    steady_measure(w, 12, &m);
    CHECK_NEAR(m.rate, 100.0, 1e-12, 0);
    CHECK_INT(m.blocks, 0);
    CHECK(isnan(m.se));
    /* a window with a NaN time (never written by the trainer) is left out entirely */
    w[20].seconds = NAN;
    steady_measure(w, n, &m);
    CHECK_INT(m.sums.steady_steps, 31);
    CHECK_NEAR(m.rate, 310.0 / 2.5, 1e-12, 0);
}

static void test_stats(void) {
    double v[] = {1, 2, NAN, 3, 4};
    stat_summary_t s;
    stats_summarize(v, 5, &s);
    CHECK_INT(s.n, 4);
    CHECK_NEAR(s.mean, 2.5, 0, 0);
    CHECK_NEAR(s.std, sqrt(5.0 / 3.0), 1e-15, 0);
    CHECK_NEAR(s.min, 1, 0, 0);
    CHECK_NEAR(s.max, 4, 0, 0);
    stats_summarize(v, 1, &s);
    CHECK_INT(s.n, 1);
    CHECK(isnan(s.std));
    stats_summarize(v + 2, 1, &s);
    CHECK_INT(s.n, 0);
    CHECK(isnan(s.mean));
    /* Student's t, two-sided 95%: the table values, and a fractional df (checked against
     * a numerical integration of the density) */
    CHECK_NEAR(stats_t95(1), 12.7062, 1e-4, 0);
    CHECK_NEAR(stats_t95(2), 4.3027, 1e-4, 0);
    CHECK_NEAR(stats_t95(4), 2.7764, 1e-4, 0);
    CHECK_NEAR(stats_t95(10), 2.2281, 1e-4, 0);
    CHECK_NEAR(stats_t95(30), 2.0423, 1e-4, 0);
    CHECK_NEAR(stats_t95(2.5), 3.5747, 1e-4, 0);
    CHECK_NEAR(stats_t95(INFINITY), 1.95996, 1e-5, 0);
    CHECK(isnan(stats_t95(0.5)));
    /* Welch: t = 10 / sqrt(2) = 7.07 against t95(8) = 2.31; 1 / sqrt(2) is not */
    CHECK_INT(stats_differ(10, 1, 4, 20, 1, 4), 1);
    CHECK_INT(stats_differ(10, 1, 4, 11, 1, 4), 0);
    CHECK_INT(stats_differ(10, NAN, 4, 20, 1, 4), -1);
    CHECK_INT(stats_differ(0.5, 0, 2, 0.5, 0, 2), 0);
    CHECK_INT(stats_differ(0.5, 0, 2, 0.25, 0, 2), 1);
}

/* A member of n runs; its noise is the spread over the runs (n >= 2). */
static verdict_member_t member(const char *name, const double *ips, const double *top1, int n, int64_t steady) {
    verdict_member_t m = {.name = name, .runs = n, .min_steady_steps = steady};
    stats_summarize(ips, n, &m.ips);
    stats_summarize(top1, n, &m.final_top1);
    stats_summarize(top1, n, &m.best_top1);
    m.ips_se = n >= 2 ? m.ips.std / sqrt(n) : NAN;
    m.ips_df = n - 1;
    return m;
}

static const double slow[] = {100, 102, 98}, fast[] = {200, 204, 196}, noisy_a[] = {100, 120, 80},
                    noisy_b[] = {105, 125, 85}, acc_a[] = {0.50, 0.51, 0.49}, acc_b[] = {0.50, 0.52, 0.48},
                    acc_low[] = {0.40, 0.41, 0.39};

static void test_clear_winner(void) {
    verdict_member_t m[2] = {member("fp32", slow, acc_a, 3, 100), member("amp", fast, acc_b, 3, 100)};
    verdict_t v;
    verdict_build(m, 2, &v);
    CHECK_INT(v.speed_kind, SPEED_CLEAR);
    CHECK_INT(v.fastest, 1);
    CHECK_INT(v.next, 0);
    /* log-ratio interval: 2 * exp(+-t95(2.941) * sqrt(2) * 0.011547) */
    CHECK_NEAR(v.ratio, 2.0, 1e-12, 0);
    CHECK_NEAR(v.ratio_lo, 1.89759, 1e-5, 0);
    CHECK_NEAR(v.ratio_hi, 2.10794, 1e-5, 0);
    CHECK_STR(v.speed, "Fastest: amp, 2.00x the throughput of fp32, the next fastest (95% interval 1.90x to "
                       "2.11x; 200 vs 100 images/s).");
    CHECK_INT(v.accuracy_kind, ACC_SAME);
    CHECK_STR(v.accuracy, "Accuracy is the same within the seed spread: no member's final val top-1 differs from "
                          "fp32's 50.00% \xc2\xb1 1.00 over 3 seeds (Welch's t-test, 95%); every member's mean is "
                          "50.00%.");
    CHECK_INT(m[1].fastest, 1);
    CHECK_INT(m[0].fastest, 0);
    CHECK_NEAR(m[0].speedup, 1.0, 0, 0);
    CHECK(isnan(m[0].speedup_lo));
    CHECK_NEAR(m[1].speedup, 2.0, 1e-12, 0);
    CHECK_NEAR(m[1].speedup_lo, 1.89759, 1e-5, 0);
    CHECK_INT(m[0].accuracy_differs, 0);
    CHECK_INT(m[1].accuracy_differs, 0);
    CHECK_CONTAINS(v.method, "leaving out the first 10 steps of each epoch (warm-up) and evaluation");
}

static void test_within_noise(void) {
    verdict_member_t m[2] = {member("fp32", noisy_a, acc_a, 3, 100), member("amp", noisy_b, acc_low, 3, 100)};
    verdict_t v;
    verdict_build(m, 2, &v);
    CHECK_INT(v.speed_kind, SPEED_TIE);
    CHECK_STR(v.speed, "No clear fastest: amp (105 images/s) is ahead, but fp32 is within noise of it (amp is 1.05x "
                       "fp32, 95% interval 0.67x to 1.63x).");
    CHECK_INT(m[0].fastest, 1);
    CHECK_INT(m[1].fastest, 1);
    /* 10 points apart with a 1-point spread over 3 seeds: differs */
    CHECK_INT(v.accuracy_kind, ACC_DIFFERS);
    CHECK_STR(v.accuracy, "Accuracy differs beyond the seed spread (Welch's t-test, 95%): final val top-1 amp "
                          "40.00% \xc2\xb1 1.00 over 3 seeds vs fp32 50.00% \xc2\xb1 1.00 over 3 seeds.");
    CHECK_INT(m[1].accuracy_differs, 1);
}

static void test_too_short(void) {
    verdict_member_t m[2] = {member("fp32", slow, acc_a, 3, 100), member("amp", fast, acc_b, 3, 12)};
    verdict_t v;
    verdict_build(m, 2, &v);
    CHECK_INT(v.speed_kind, SPEED_TOO_SHORT);
    CHECK_INT(v.fastest, -1);
    CHECK_STR(v.speed, "Too short to rank throughput: amp had 12 steady-state steps in a run; at least 20 are "
                       "needed (the first 10 steps of each epoch are warm-up and do not count). Run more steps "
                       "(train.max_steps or train.epochs).");
    CHECK_INT(m[0].fastest, -1);
    CHECK_INT(m[1].fastest, -1);
    /* members with the same count are named once, with it: the docs' quick look on 9
     * members said "X had 18 steady-state steps" nine times */
    verdict_member_t m3[3] = {member("fp32", slow, acc_a, 3, 18), member("amp", fast, acc_b, 3, 18),
                              member("bf16", fast, acc_b, 3, 18)};
    verdict_build(m3, 3, &v);
    CHECK_INT(v.speed_kind, SPEED_TOO_SHORT);
    CHECK_STR(v.speed, "Too short to rank throughput: every member had 18 steady-state steps in a run; at least 20 "
                       "are needed (the first 10 steps of each epoch are warm-up and do not count). Run more steps "
                       "(train.max_steps or train.epochs).");
    m3[0] = member("fp32", slow, acc_a, 3, 100);
    m3[1] = member("amp", fast, acc_b, 3, 12);
    m3[2] = member("bf16", fast, acc_b, 3, 15);
    verdict_build(m3, 3, &v);
    CHECK_STR(v.speed, "Too short to rank throughput: amp had 12 and bf16 had 15 steady-state steps in a run; at "
                       "least 20 are needed (the first 10 steps of each epoch are warm-up and do not count). Run "
                       "more steps (train.max_steps or train.epochs).");
    m3[0] = member("fp32", slow, acc_a, 3, 12);
    verdict_build(m3, 3, &v);
    CHECK_STR(v.speed, "Too short to rank throughput: fp32 and amp had 12 and bf16 had 15 steady-state steps in a "
                       "run; at least 20 are needed (the first 10 steps of each epoch are warm-up and do not "
                       "count). Run more steps (train.max_steps or train.epochs).");
    /* a single run without a noise estimate is too short too */
    const double one_a[] = {100}, one_b[] = {150}, top_a[] = {0.5}, top_b[] = {0.52};
    m[0] = member("fp32", one_a, top_a, 1, 100);
    m[1] = member("amp", one_b, top_b, 1, 100);
    verdict_build(m, 2, &v);
    CHECK_INT(v.speed_kind, SPEED_TOO_SHORT);
    CHECK_STR(v.speed, "Too short to rank throughput: the noise of fp32 and amp is unknown (a single run whose "
                       "timing.csv has fewer than 3 steady-state read-back windows). Run more steps, or set "
                       "repeats: 2 or more.");
}

static void test_single_seed(void) {
    const double one_a[] = {100}, one_b[] = {150}, top_a[] = {0.5}, top_b[] = {0.52};
    verdict_member_t m[2] = {member("fp32", one_a, top_a, 1, 100), member("amp", one_b, top_b, 1, 100)};
    /* one run each: the noise is the within-run spread over blocks */
    m[0].ips_se = m[1].ips_se = 1;
    m[0].ips_df = m[1].ips_df = 4;
    verdict_t v;
    verdict_build(m, 2, &v);
    CHECK_INT(v.speed_kind, SPEED_CLEAR);
    CHECK_STR(v.speed, "Fastest: amp, 1.50x the throughput of fp32, the next fastest (95% interval 1.46x to 1.54x; "
                       "150 vs 100 images/s).");
    CHECK_INT(v.accuracy_kind, ACC_UNKNOWN);
    CHECK_STR(v.accuracy, "Accuracy noise unknown: one seed per member, so the final val top-1 spread of 2.00 points "
                          "(50.00% for fp32 to 52.00% for amp) cannot be told from seed noise. Set repeats: 3 or "
                          "more in the matrix file.");
    CHECK_INT(m[1].accuracy_differs, -1);
    CHECK_INT(m[0].accuracy_differs, 0);
}

static void test_other_cases(void) {
    verdict_member_t m[3];
    verdict_t v;
    /* a run directory from an older runner: not ranked */
    const double one[] = {100}, top[] = {0.5};
    m[0] = member("old", one, top, 1, -1);
    m[1] = member("amp", fast, acc_b, 3, 100);
    verdict_build(m, 2, &v);
    CHECK_INT(v.speed_kind, SPEED_UNMEASURED);
    CHECK_STR(v.speed, "Throughput not ranked: old has no timing.csv (a run directory from an older runner), so its "
                       "rate was not measured from every step.");
    /* the reference has one seed, the other three */
    CHECK_INT(v.accuracy_kind, ACC_UNKNOWN);
    CHECK_CONTAINS(v.accuracy, "Accuracy noise unknown: the reference, old, has one seed; every member's final val top-1 "
                               "is 50.00%");
    /* single seeds with equal accuracy: no spread to quote */
    const double top_same[] = {1.0};
    m[0] = member("fp32", one, top_same, 1, 100);
    m[1] = member("amp", one, top_same, 1, 100);
    verdict_build(m, 2, &v);
    CHECK_STR(v.accuracy, "Accuracy noise unknown: one seed per member; every member's final val top-1 is 100.00%, "
                          "but how much it varies with the seed is unknown. Set repeats: 3 or more in the matrix file.");
    /* one member */
    m[0] = member("fp32", slow, acc_a, 3, 100);
    verdict_build(m, 1, &v);
    CHECK_INT(v.speed_kind, SPEED_ONE);
    CHECK_STR(v.speed, "Throughput: fp32 ran at 100 images/s; there is nothing to compare it with.");
    CHECK_STR(v.accuracy, "Accuracy: final val top-1 of fp32 50.00% \xc2\xb1 1.00 over 3 seeds.");
    /* a member with no completed run is named, not ranked */
    m[1] = member("amp", fast, acc_b, 3, 100);
    m[2] = member("broken", NULL, NULL, 0, 0);
    verdict_build(m, 3, &v);
    CHECK_INT(v.speed_kind, SPEED_CLEAR);
    CHECK_CONTAINS(v.speed, "Fastest: amp, 2.00x the throughput of fp32, the next fastest");
    CHECK_CONTAINS(v.speed, " Not ranked: broken (no completed run).");
    CHECK_INT(m[2].fastest, -1);
    /* nothing measured at all */
    m[0] = member("a", NULL, NULL, 0, 0);
    verdict_build(m, 1, &v);
    CHECK_INT(v.speed_kind, SPEED_NONE);
    CHECK_INT(v.accuracy_kind, ACC_NONE);
    CHECK_STR(v.accuracy, "Accuracy: not measured (no run was evaluated).");
}

int main(void) {
    TEST_RUN(test_steady_rate);
    TEST_RUN(test_steady_edges);
    TEST_RUN(test_stats);
    TEST_RUN(test_clear_winner);
    TEST_RUN(test_within_noise);
    TEST_RUN(test_too_short);
    TEST_RUN(test_single_seed);
    TEST_RUN(test_other_cases);
    return test_main_end();
}
