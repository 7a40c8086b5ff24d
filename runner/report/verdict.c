/* verdict.c: sample statistics, Welch's t-test and the verdict's wording (verdict.h).
 * The t distribution's quantile comes from its CDF, the regularized incomplete beta
 * function evaluated by its continued fraction (modified Lentz), solved by bisection. */
#include "runner/report/verdict.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/report/steady.h"

void stats_summarize(const double *v, int n, stat_summary_t *out) {
    *out = (stat_summary_t){.mean = NAN, .std = NAN, .min = NAN, .max = NAN};
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i])) continue;
        if (!out->n || v[i] < out->min) out->min = v[i];
        if (!out->n || v[i] > out->max) out->max = v[i];
        sum += v[i];
        out->n++;
    }
    if (!out->n) return;
    out->mean = sum / out->n;
    if (out->n < 2) return;
    double ss = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) ss += (v[i] - out->mean) * (v[i] - out->mean);
    out->std = sqrt(ss / (out->n - 1));
}

/* The continued fraction of the incomplete beta function I_x(a, b), for x below
 * (a + 1) / (a + b + 2) where it converges fast. */
static double beta_fraction(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    if (fabs(d) < tiny) d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 300; m++) {
        double num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));   /* even step */
        d = 1 + num * d;
        c = 1 + num / c;
        d = 1 / (fabs(d) < tiny ? tiny : d);
        c = fabs(c) < tiny ? tiny : c;
        h *= d * c;
        num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));   /* odd step */
        d = 1 + num * d;
        c = 1 + num / c;
        d = 1 / (fabs(d) < tiny ? tiny : d);
        c = fabs(c) < tiny ? tiny : c;
        double step = d * c;
        h *= step;
        if (fabs(step - 1) < 1e-14) break;
    }
    return h;
}

/* The regularized incomplete beta function I_x(a, b). */
static double incomplete_beta(double a, double b, double x) {
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    double front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
    return 1 - front * beta_fraction(b, a, 1 - x) / b;
}

double stats_t95(double df) {
    if (!(df >= 1)) return NAN;
    if (isinf(df) || df > 1e7) return 1.959963984540054;
    /* two-sided tail beyond t: I_{df / (df + t^2)}(df / 2, 1 / 2); it falls as t grows */
    double lo = 0, hi = 1000;
    for (int i = 0; i < 200 && hi - lo > 1e-12; i++) {
        double t = 0.5 * (lo + hi);
        double tail = incomplete_beta(df / 2, 0.5, df / (df + t * t));
        if (tail > 0.05) lo = t;
        else hi = t;
    }
    return 0.5 * (lo + hi);
}

/* Welch-Satterthwaite degrees of freedom of the difference of two means. */
static double welch_df(double se_a, double df_a, double se_b, double df_b) {
    double va = se_a * se_a, vb = se_b * se_b;
    double den = (va > 0 ? va * va / df_a : 0) + (vb > 0 ? vb * vb / df_b : 0);
    return den > 0 ? (va + vb) * (va + vb) / den : INFINITY;
}

int stats_differ(double mean_a, double se_a, double df_a, double mean_b, double se_b, double df_b) {
    if (!isfinite(mean_a) || !isfinite(mean_b) || !(se_a >= 0) || !(se_b >= 0) || !(df_a >= 1) || !(df_b >= 1))
        return -1;
    double se = sqrt(se_a * se_a + se_b * se_b);
    if (se == 0) return mean_a != mean_b;
    return fabs(mean_a - mean_b) / se > stats_t95(welch_df(se_a, df_a, se_b, df_b));
}

/* ---- wording ---- */

/* Appends printf text to buf (cap bytes). */
static void add(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *buf, size_t cap, const char *fmt, ...) {
    size_t l = strlen(buf);
    if (l + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + l, cap - l, fmt, ap);
    va_end(ap);
}

/* A rate as people write it: 1234, 98.7, 5.43. */
static const char *rate_text(char *buf, size_t cap, double v) {
    snprintf(buf, cap, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.2f", v);
    return buf;
}

/* Appends "a, b and c" for the members whose flag is set. */
static void add_names(char *buf, size_t cap, const verdict_member_t *m, int n, const bool *set) {
    int total = 0, done = 0;
    for (int i = 0; i < n; i++) total += set[i];
    for (int i = 0; i < n; i++) {
        if (!set[i]) continue;
        if (done == 6 && total > 7) {
            add(buf, cap, " and %d more", total - done);
            return;
        }
        add(buf, cap, "%s%s", done == 0 ? "" : done == total - 1 ? " and " : ", ", m[i].name);
        done++;
    }
}

/* The ratio of two members' mean rates with its 95% interval, taken on the log of the
 * ratio (whose standard error is the relative errors added in quadrature), so it stays
 * positive and symmetric in which member is on top. */
static void ratio_of(const verdict_member_t *a, const verdict_member_t *b, double *r, double *lo, double *hi) {
    *r = a->ips.mean / b->ips.mean;
    double ra = a->ips_se / a->ips.mean, rb = b->ips_se / b->ips.mean;
    double half = stats_t95(welch_df(a->ips_se, a->ips_df, b->ips_se, b->ips_df)) * sqrt(ra * ra + rb * rb);
    *lo = isfinite(half) ? *r * exp(-half) : NAN;
    *hi = isfinite(half) ? *r * exp(half) : NAN;
}

/* Appends who had too few steady-state steps (the k members set in sel), one group per
 * count so that equal counts are said once: "every member had 18 steady-state steps",
 * "a and b had 12 and c had 15 steady-state steps". */
static void add_short_counts(char *buf, size_t cap, const verdict_member_t *m, int n, const bool *sel, int k) {
    int measured = 0, groups = 0;
    bool first_of[VERDICT_MAX_MEMBERS];
    for (int i = 0; i < n; i++) {
        measured += m[i].ips.n > 0;
        first_of[i] = sel[i];
        for (int j = 0; j < i && first_of[i]; j++)
            if (sel[j] && m[j].min_steady_steps == m[i].min_steady_steps) first_of[i] = false;
        groups += first_of[i];
    }
    int64_t last = 0;
    if (groups == 1 && k >= 2 && k == measured) {
        for (int i = 0; i < n; i++)
            if (first_of[i]) last = m[i].min_steady_steps;
        add(buf, cap, "every member had %lld", (long long)last);
    } else {
        for (int i = 0, g = 0; i < n; i++) {
            if (!first_of[i]) continue;
            bool grp[VERDICT_MAX_MEMBERS];
            for (int j = 0; j < n; j++) grp[j] = sel[j] && m[j].min_steady_steps == m[i].min_steady_steps;
            add(buf, cap, "%s", g == 0 ? "" : g == groups - 1 ? " and " : ", ");
            add_names(buf, cap, m, n, grp);
            last = m[i].min_steady_steps;
            add(buf, cap, " had %lld", (long long)last);
            g++;
        }
    }
    add(buf, cap, " steady-state step%s", groups == 1 && last == 1 ? "" : "s");
}

/* Why the throughput cannot be ranked, or SPEED_CLEAR when it can (m[i].ips.n > 0 for
 * the measured ones). */
static verdict_speed_t speed_blockers(const verdict_member_t *m, int n, char *buf, size_t cap) {
    bool sel[VERDICT_MAX_MEMBERS];
    int k = 0;
    for (int i = 0; i < n; i++) k += (sel[i] = m[i].ips.n > 0 && m[i].min_steady_steps >= 0 &&
                                         m[i].min_steady_steps < STEADY_MIN_STEPS);
    if (k) {
        add(buf, cap, "Too short to rank throughput: ");
        add_short_counts(buf, cap, m, n, sel, k);
        add(buf, cap, " in a run; at least %d are needed (the first %d steps of each epoch are warm-up "
            "and do not count). Run more steps (train.max_steps or train.epochs).",
            (int)STEADY_MIN_STEPS, (int)STEADY_WARMUP_STEPS);
        return SPEED_TOO_SHORT;
    }
    for (int i = 0; i < n; i++) k += (sel[i] = m[i].ips.n > 0 && m[i].min_steady_steps < 0);
    if (k) {
        add(buf, cap, "Throughput not ranked: ");
        add_names(buf, cap, m, n, sel);
        add(buf, cap, k == 1 ? " has no timing.csv (a run directory from an older runner), so its rate was not "
                               "measured from every step."
                             : " have no timing.csv (run directories from an older runner), so their rate was "
                               "not measured from every step.");
        return SPEED_UNMEASURED;
    }
    for (int i = 0; i < n; i++) k += (sel[i] = m[i].ips.n > 0 && !(m[i].ips_se >= 0));
    if (k) {
        add(buf, cap, "Too short to rank throughput: the noise of ");
        add_names(buf, cap, m, n, sel);
        add(buf, cap, " is unknown (a single run whose timing.csv has fewer than %d steady-state read-back "
            "windows). Run more steps, or set repeats: 2 or more.", (int)STEADY_MIN_BLOCKS);
        return SPEED_TOO_SHORT;
    }
    return SPEED_CLEAR;
}

static void speed_verdict(verdict_member_t *m, int n, verdict_t *v) {
    char a[32], b[32];
    int measured = 0;
    for (int i = 0; i < n; i++) {
        measured += m[i].ips.n > 0;
        m[i].fastest = -1;
    }
    if (!measured) {
        v->speed_kind = SPEED_NONE;
        add(v->speed, sizeof v->speed, "Throughput: not measured (no run recorded its steps).");
        return;
    }
    v->speed_kind = speed_blockers(m, n, v->speed, sizeof v->speed);
    if (v->speed_kind != SPEED_CLEAR) return;
    int f = -1;
    for (int i = 0; i < n; i++)
        if (m[i].ips.n > 0 && (f < 0 || m[i].ips.mean > m[f].ips.mean)) f = i;
    if (measured == 1) {
        v->speed_kind = SPEED_ONE;
        add(v->speed, sizeof v->speed, "Throughput: %s ran at %s images/s; there is nothing to compare it with.",
            m[f].name, rate_text(a, sizeof a, m[f].ips.mean));
        return;
    }
    int s = -1;
    bool tie[VERDICT_MAX_MEMBERS];
    int ties = 0;
    for (int i = 0; i < n; i++) {
        tie[i] = false;
        if (i == f || m[i].ips.n == 0) continue;
        if (s < 0 || m[i].ips.mean > m[s].ips.mean) s = i;
        tie[i] = stats_differ(m[f].ips.mean, m[f].ips_se, m[f].ips_df, m[i].ips.mean, m[i].ips_se, m[i].ips_df) != 1;
        ties += tie[i];
        m[i].fastest = tie[i];
    }
    m[f].fastest = 1;
    v->fastest = f;
    v->next = s;
    ratio_of(&m[f], &m[s], &v->ratio, &v->ratio_lo, &v->ratio_hi);
    if (!ties) {
        v->speed_kind = SPEED_CLEAR;
        add(v->speed, sizeof v->speed, "Fastest: %s, %.2fx the throughput of %s, the next fastest "
            "(95%% interval %.2fx to %.2fx; %s vs %s images/s).", m[f].name, v->ratio, m[s].name, v->ratio_lo,
            v->ratio_hi, rate_text(a, sizeof a, m[f].ips.mean), rate_text(b, sizeof b, m[s].ips.mean));
    } else {
        v->speed_kind = SPEED_TIE;
        add(v->speed, sizeof v->speed, "No clear fastest: %s (%s images/s) is ahead, but ", m[f].name,
            rate_text(a, sizeof a, m[f].ips.mean));
        add_names(v->speed, sizeof v->speed, m, n, tie);
        add(v->speed, sizeof v->speed, " %s within noise of it (%s is %.2fx %s, 95%% interval %.2fx to %.2fx).",
            ties == 1 ? "is" : "are", m[f].name, v->ratio, m[s].name, v->ratio_lo, v->ratio_hi);
    }
    bool none[VERDICT_MAX_MEMBERS];
    int k = 0;
    for (int i = 0; i < n; i++) k += (none[i] = m[i].ips.n == 0);
    if (k) {
        add(v->speed, sizeof v->speed, " Not ranked: ");
        add_names(v->speed, sizeof v->speed, m, n, none);
        add(v->speed, sizeof v->speed, " (no completed run).");
    }
}

/* "41.52% +- 0.21 over 3 seeds" or "41.52% from one seed". */
static const char *top1_text(char *buf, size_t cap, const stat_summary_t *s) {
    if (s->n >= 2) snprintf(buf, cap, "%.2f%% \xc2\xb1 %.2f over %d seeds", 100 * s->mean, 100 * s->std, s->n);
    else snprintf(buf, cap, "%.2f%% from one seed", 100 * s->mean);
    return buf;
}

static void accuracy_verdict(verdict_member_t *m, int n, verdict_t *v) {
    char *out = v->accuracy;
    size_t cap = sizeof v->accuracy;
    char a[64], b[64];
    int ref = -1, with = 0;
    for (int i = 0; i < n; i++) {
        m[i].accuracy_differs = -1;
        if (m[i].final_top1.n > 0) {
            with++;
            if (ref < 0) ref = i;
        }
    }
    v->reference = ref;
    if (ref < 0) {
        v->accuracy_kind = ACC_NONE;
        add(out, cap, "Accuracy: not measured (no run was evaluated).");
        return;
    }
    m[ref].accuracy_differs = 0;
    if (with == 1) {
        v->accuracy_kind = ACC_ONE;
        add(out, cap, "Accuracy: final val top-1 of %s %s.", m[ref].name, top1_text(a, sizeof a, &m[ref].final_top1));
        return;
    }
    bool diff[VERDICT_MAX_MEMBERS], unknown[VERDICT_MAX_MEMBERS];
    int n_diff = 0, n_unknown = 0, lo = ref, hi = ref;
    for (int i = 0; i < n; i++) {
        diff[i] = unknown[i] = false;
        if (i == ref || m[i].final_top1.n == 0) continue;
        if (m[i].final_top1.mean < m[lo].final_top1.mean) lo = i;
        if (m[i].final_top1.mean > m[hi].final_top1.mean) hi = i;
        const stat_summary_t *x = &m[ref].final_top1, *y = &m[i].final_top1;
        int d = x->n >= 2 && y->n >= 2 ? stats_differ(x->mean, x->std / sqrt(x->n), x->n - 1, y->mean,
                                                      y->std / sqrt(y->n), y->n - 1) : -1;
        m[i].accuracy_differs = d;
        n_diff += (diff[i] = d == 1);
        n_unknown += (unknown[i] = d < 0);
    }
    if (n_unknown == with - 1) {
        v->accuracy_kind = ACC_UNKNOWN;
        bool all_single = true;
        for (int i = 0; i < n; i++) all_single &= m[i].final_top1.n < 2;
        char why[300];
        if (all_single) snprintf(why, sizeof why, "one seed per member");
        else if (m[ref].final_top1.n < 2) snprintf(why, sizeof why, "the reference, %.200s, has one seed", m[ref].name);
        else snprintf(why, sizeof why, "the other members have one seed each");
        if (m[hi].final_top1.mean == m[lo].final_top1.mean)
            add(out, cap, "Accuracy noise unknown: %s; every member's final val top-1 is %.2f%%, but how much it "
                "varies with the seed is unknown. Set repeats: 3 or more in the matrix file.", why,
                100 * m[lo].final_top1.mean);
        else
            add(out, cap, "Accuracy noise unknown: %s, so the final val top-1 spread of %.2f points (%.2f%% for "
                "%s to %.2f%% for %s) cannot be told from seed noise. Set repeats: 3 or more in the matrix file.",
                why, 100 * (m[hi].final_top1.mean - m[lo].final_top1.mean), 100 * m[lo].final_top1.mean,
                m[lo].name, 100 * m[hi].final_top1.mean, m[hi].name);
        return;
    }
    if (n_diff) {
        v->accuracy_kind = ACC_DIFFERS;
        add(out, cap, "Accuracy differs beyond the seed spread (Welch's t-test, 95%%): final val top-1 ");
        int done = 0;
        for (int i = 0; i < n && done < 4; i++)
            if (diff[i]) add(out, cap, "%s%s %s", done++ ? ", " : "", m[i].name, top1_text(a, sizeof a, &m[i].final_top1));
        if (n_diff > done) add(out, cap, " and %d more", n_diff - done);
        add(out, cap, " vs %s %s.", m[ref].name, top1_text(b, sizeof b, &m[ref].final_top1));
    } else {
        v->accuracy_kind = ACC_SAME;
        add(out, cap, "Accuracy is the same within the seed spread: no member's final val top-1 differs from "
            "%s's %s (Welch's t-test, 95%%); ", m[ref].name, top1_text(a, sizeof a, &m[ref].final_top1));
        if (m[lo].final_top1.mean == m[hi].final_top1.mean)
            add(out, cap, "every member's mean is %.2f%%.", 100 * m[lo].final_top1.mean);
        else
            add(out, cap, "the members' means range from %.2f%% to %.2f%%.", 100 * m[lo].final_top1.mean,
                100 * m[hi].final_top1.mean);
    }
    if (n_unknown) {
        add(out, cap, " Noise unknown for ");
        add_names(out, cap, m, n, unknown);
        add(out, cap, " (one seed).");
    }
}

void verdict_build(verdict_member_t *m, int n, verdict_t *v) {
    memset(v, 0, sizeof *v);
    if (n > VERDICT_MAX_MEMBERS) n = VERDICT_MAX_MEMBERS;
    v->fastest = v->next = v->reference = -1;
    v->ratio = v->ratio_lo = v->ratio_hi = NAN;
    for (int i = 0; i < n; i++) {
        m[i].speedup = m[i].speedup_lo = m[i].speedup_hi = NAN;
        if (i == 0 && m[0].ips.n > 0) m[0].speedup = 1;   /* the reference; no interval with itself */
        if (i > 0 && m[0].ips.n > 0 && m[i].ips.n > 0)
            ratio_of(&m[i], &m[0], &m[i].speedup, &m[i].speedup_lo, &m[i].speedup_hi);
    }
    speed_verdict(m, n, v);
    accuracy_verdict(m, n, v);
    snprintf(v->method, sizeof v->method,
             "Throughput is the steady-state rate: the images of every step over their time, leaving out the "
             "first %d steps of each epoch (warm-up) and evaluation. With repeats, a member's rate is the mean "
             "over its seeds and its noise their spread; a single run's noise is the spread over %d blocks of "
             "its steps. Means are compared with Welch's t-test at 95%%; accuracy is each member's final val "
             "top-1 against %s.",
             (int)STEADY_WARMUP_STEPS, (int)STEADY_BLOCKS, v->reference >= 0 ? m[v->reference].name : "the first member");
}
