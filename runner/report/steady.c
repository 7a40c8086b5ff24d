/* steady.c: the steady-state rate and its within-run spread (steady.h). */
#include "runner/report/steady.h"

#include <math.h>

bool steady_is_warmup(int64_t since_start) { return since_start < STEADY_WARMUP_STEPS; }

void steady_add(steady_sums_t *s, int64_t since_start, int64_t steps, double images, double seconds) {
    if (steady_is_warmup(since_start)) {
        s->warmup_steps += steps;
        s->warmup_images += images;
        s->warmup_seconds += seconds;
    } else {
        s->steady_steps += steps;
        s->steady_images += images;
        s->steady_seconds += seconds;
    }
}

double steady_rate(const steady_sums_t *s) {
    return s->steady_steps > 0 && s->steady_seconds > 0 ? s->steady_images / s->steady_seconds : NAN;
}

/* A window timing.csv could not have written (NaN, negative): left out entirely. */
static bool window_ok(const steady_window_t *w) {
    return isfinite(w->images) && isfinite(w->seconds) && w->steps > 0 && w->images >= 0 && w->seconds >= 0;
}

void steady_measure(const steady_window_t *w, size_t n, steady_measure_t *out) {
    *out = (steady_measure_t){.rate = NAN, .block_std = NAN, .se = NAN};
    size_t windows = 0;
    for (size_t i = 0; i < n; i++) {
        if (!window_ok(&w[i])) continue;
        steady_add(&out->sums, w[i].since_start, w[i].steps, w[i].images, w[i].seconds);
        windows += !steady_is_warmup(w[i].since_start);
    }
    out->rate = steady_rate(&out->sums);
    if (windows < STEADY_MIN_BLOCKS || !isfinite(out->rate)) return;
    int B = windows < STEADY_BLOCKS ? (int)windows : STEADY_BLOCKS;
    double img[STEADY_BLOCKS] = {0}, sec[STEADY_BLOCKS] = {0};
    int64_t before = 0, total = out->sums.steady_steps;
    for (size_t i = 0; i < n; i++) {
        if (!window_ok(&w[i]) || steady_is_warmup(w[i].since_start)) continue;
        int b = (int)((double)B * (double)before / (double)total);
        if (b >= B) b = B - 1;
        img[b] += w[i].images;
        sec[b] += w[i].seconds;
        before += w[i].steps;
    }
    double rates[STEADY_BLOCKS], mean = 0;
    int k = 0;
    for (int b = 0; b < B; b++)
        if (sec[b] > 0) mean += (rates[k++] = img[b] / sec[b]);
    if (k < STEADY_MIN_BLOCKS) return;
    mean /= k;
    double ss = 0;
    for (int b = 0; b < k; b++) ss += (rates[b] - mean) * (rates[b] - mean);
    out->blocks = k;
    out->block_std = sqrt(ss / (k - 1));
    out->se = out->block_std / sqrt((double)k);
}
