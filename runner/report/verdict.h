/* verdict.h: what a comparison says in words: which member is fastest, by how much, and
 * whether accuracy differs beyond the seeds' spread (docs/comparisons.md, "The verdict").
 *
 * A member is one configuration, run once or repeated over seeds (compare's repeats:, or
 * runs of one experiment given to `runner report`). Its throughput is the mean of its
 * runs' steady-state rates (steady.h); the uncertainty of that mean is the standard error
 * over its runs (two or more), or for a single run the within-run standard error over
 * blocks of its steps. Two means differ when Welch's t-test says so at 95% (two-sided;
 * Welch-Satterthwaite degrees of freedom). Throughput is ranked only when every member
 * has at least STEADY_MIN_STEPS steady-state steps in each run and a noise estimate;
 * otherwise the verdict says the comparison is too short. Accuracy (final val top-1) of
 * each member is tested against the reference member (the first with a value) when both
 * have two or more seeds; with one seed the verdict says its noise is unknown.
 * This file only computes and words; report.c collects the numbers from run directories.
 */
#ifndef RUNNER_REPORT_VERDICT_H
#define RUNNER_REPORT_VERDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Mean, spread and range of the finite values of a sample. */
typedef struct stat_summary {
    int n;                     /* finite values */
    double mean, std, min, max; /* std: sample standard deviation (n - 1), NaN when n < 2;
                                  all NaN when n == 0 */
} stat_summary_t;

void stats_summarize(const double *v, int n, stat_summary_t *out);

/* The two-sided 95% critical value of Student's t with df degrees of freedom (df >= 1;
 * fractional df interpolated in 1/df; 1.96 for infinite df). NaN for df < 1 or NaN. */
double stats_t95(double df);

/* Welch's t-test at 95% on two means with standard errors se_a, se_b and degrees of
 * freedom df_a, df_b: 1 when they differ, 0 when not, -1 when unknown (an se is NaN).
 * Two exact means (both se 0) differ when they are not equal. */
int stats_differ(double mean_a, double se_a, double df_a, double mean_b, double se_b, double df_b);

enum { VERDICT_TEXT = 1536, VERDICT_MAX_MEMBERS = 256 };

/* One member: filled by the caller, except the fields marked out. */
typedef struct verdict_member {
    const char *name;
    int runs;                  /* runs of the member, measured or not */
    stat_summary_t ips;        /* steady-state images/s over its runs */
    double ips_se, ips_df;     /* uncertainty of ips.mean and its degrees of freedom: over
                                  runs (n >= 2), else within its one run; NaN unknown */
    int64_t min_steady_steps;  /* fewest steady-state steps of its measured runs; -1 when a
                                  run's rate was not measured from every step */
    stat_summary_t final_top1, best_top1;   /* fractions in [0, 1], over its runs */
    /* out */
    double speedup, speedup_lo, speedup_hi; /* mean images/s over member 0's, 95% interval */
    int fastest;               /* 1: the fastest or within noise of it; 0: slower; -1: not ranked */
    int accuracy_differs;      /* vs the reference: 1 differs, 0 not (the reference itself
                                  too), -1 unknown */
} verdict_member_t;

typedef enum {
    SPEED_NONE,       /* nothing measured */
    SPEED_ONE,        /* one measured member: nothing to rank */
    SPEED_CLEAR,      /* one member is faster than every other */
    SPEED_TIE,        /* the fastest is within noise of another member */
    SPEED_TOO_SHORT,  /* too few steady-state steps, or no noise estimate */
    SPEED_UNMEASURED  /* a member's rate was not measured from every step (old run) */
} verdict_speed_t;

typedef enum {
    ACC_NONE,         /* no member has a val top-1 */
    ACC_ONE,          /* one member: nothing to compare */
    ACC_SAME,         /* no member differs from the reference beyond the spread */
    ACC_DIFFERS,      /* some member does */
    ACC_UNKNOWN       /* no comparison could be judged (single seeds) */
} verdict_accuracy_t;

typedef struct verdict {
    verdict_speed_t speed_kind;
    verdict_accuracy_t accuracy_kind;
    int fastest, next;          /* member indices (SPEED_CLEAR/TIE), else -1 */
    int reference;              /* the accuracy reference, -1 when none */
    double ratio, ratio_lo, ratio_hi;  /* fastest over next, 95% interval */
    char speed[VERDICT_TEXT];   /* one paragraph each, plain text */
    char accuracy[VERDICT_TEXT];
    char method[VERDICT_TEXT];  /* how the numbers were obtained */
} verdict_t;

/* Ranks and words members m[0..n) (their out fields are set too); n <= VERDICT_MAX_MEMBERS
 * (members past it are left out). */
void verdict_build(verdict_member_t *m, int n, verdict_t *v);

#ifdef __cplusplus
}
#endif
#endif
