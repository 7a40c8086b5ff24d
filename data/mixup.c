/* mixup.c: the draws, the in-place mixing and the soft targets of timm's Mixup (see
 * mixup.h). Pairs (i, n - 1 - i) are rewritten together from their original values, so no
 * copy of the batch is needed. Not here: where the batch comes from (loader.c, or the GPU
 * path in runner/train_step.c, which uploads what mixup_draw returns). */
#include "data/mixup.h"

#include <math.h>
#include <string.h>

bool mixup_enabled(const mixup_opts_t *o) { return o->alpha > 0.0 || o->cutmix_alpha > 0.0; }

/* log of a Gamma(a) draw, a > 0 (Marsaglia and Tsang 2000; a < 1: G(a) = G(a + 1) U^(1/a)). */
static double log_gamma_draw(rng_t *r, double a) {
    double boost = 0.0;
    if (a < 1.0) {
        double u = 1.0 - rng_uniform_f64(r);   /* (0, 1] */
        boost = log(u) / a;
        a += 1.0;
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1.0 + c * x;
        if (v <= 0.0) continue;
        v = v * v * v;
        double u = 1.0 - rng_uniform_f64(r);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return log(d * v) + boost;
    }
}

double mixup_beta(rng_t *r, double a) {
    double lx = log_gamma_draw(r, a), ly = log_gamma_draw(r, a);
    return 1.0 / (1.0 + exp(ly - lx));
}

static int clip(int v, int hi) { return v < 0 ? 0 : (v > hi ? hi : v); }

double mixup_box(int h, int w, double ratio, int cy, int cx, int *yl, int *yh, int *xl, int *xh) {
    int cut_h = (int)((double)h * ratio), cut_w = (int)((double)w * ratio);
    *yl = clip(cy - cut_h / 2, h);
    *yh = clip(cy + cut_h / 2, h);
    *xl = clip(cx - cut_w / 2, w);
    *xh = clip(cx + cut_w / 2, w);
    return 1.0 - (double)((*yh - *yl) * (*xh - *xl)) / (double)(h * w);
}

/* Method and lam of one mixing decision: *cut (0/1) and the Beta draw. */
static double draw_lam(const mixup_opts_t *o, rng_t *r, int *cut) {
    if (o->alpha > 0.0 && o->cutmix_alpha > 0.0) {
        *cut = rng_uniform_f64(r) < o->switch_prob;
        return mixup_beta(r, *cut ? o->cutmix_alpha : o->alpha);
    }
    *cut = o->alpha > 0.0 ? 0 : 1;
    return mixup_beta(r, o->alpha > 0.0 ? o->alpha : o->cutmix_alpha);
}

static void unmixed(mix_sample_t *s, int i, int n) {
    memset(s, 0, sizeof *s);
    s->w_self = 1.0f;
    s->w_other = 0.0f;
    s->partner = n - 1 - i;
}

void mixup_set_batch(double lam, int cut, int cy, int cx, int n, int h, int w, mix_sample_t *s) {
    for (int i = 0; i < n; i++) unmixed(&s[i], i, n);
    if (lam == 1.0) return;
    mix_sample_t m = {0};
    m.kind = cut ? 2 : 1;
    if (cut) lam = mixup_box(h, w, sqrt(1.0 - lam), cy, cx, &m.yl, &m.yh, &m.xl, &m.xh);
    m.w_self = (float)lam;
    m.w_other = (float)(1.0 - lam);
    for (int i = 0; i < n; i++) {
        s[i] = m;
        s[i].partner = n - 1 - i;
    }
}

void mixup_set_elem(int i, bool pair, float lam, int cut, int cy, int cx, int n, int h, int w, mix_sample_t *s) {
    mix_sample_t *x = &s[i];
    unmixed(x, i, n);
    if (lam != 1.0f) {
        x->kind = cut ? 2 : 1;
        /* numpy 1.x: 1 - float32 is a float64, so the ratio is computed in double */
        if (cut) lam = (float)mixup_box(h, w, sqrt(1.0 - (double)lam), cy, cx, &x->yl, &x->yh, &x->xl, &x->xh);
        x->w_self = lam;
        x->w_other = 1.0f - lam;
    }
    if (pair) {
        s[n - 1 - i] = *x;
        s[n - 1 - i].partner = i;
    }
}

/* batch mode: one lam (a double, as timm's Python float) for the whole batch */
static void draw_batch(const mixup_opts_t *o, rng_t *r, int n, int h, int w, mix_sample_t *s) {
    int cut = 0, cy = 0, cx = 0;
    double lam = 1.0;
    if (rng_uniform_f64(r) < o->prob) {
        lam = draw_lam(o, r, &cut);
        if (lam != 1.0 && cut) {
            cy = (int)rng_below(r, (uint32_t)h);
            cx = (int)rng_below(r, (uint32_t)w);
        }
    }
    mixup_set_batch(lam, cut, cy, cx, n, h, w, s);
}

/* elem / pair mode: lam per sample (per pair), float32 as timm's numpy array */
static void draw_elem(const mixup_opts_t *o, rng_t *r, int n, int h, int w, bool pairs, mix_sample_t *s) {
    for (int i = 0; i < n; i++) unmixed(&s[i], i, n);
    int m = pairs ? n / 2 : n;
    for (int i = 0; i < m; i++) {
        int cut, cy = 0, cx = 0;
        float lam = (float)draw_lam(o, r, &cut);
        if (!(rng_uniform_f64(r) < o->prob)) lam = 1.0f;
        if (lam != 1.0f && cut) {
            cy = (int)rng_below(r, (uint32_t)h);
            cx = (int)rng_below(r, (uint32_t)w);
        }
        mixup_set_elem(i, pairs, lam, cut, cy, cx, n, h, w, s);
    }
}

void mixup_draw(const mixup_opts_t *o, uint64_t seed, int64_t epoch, int64_t batch, int rank, int n, int h,
                int w, mix_sample_t *s) {
    rng_t r = rng_make(seed, RNG_STREAM_MIXUP, (uint64_t)epoch, (uint64_t)batch + ((uint64_t)rank << 32));
    if (o->mode == MIXUP_BATCH) draw_batch(o, &r, n, h, w, s);
    else draw_elem(o, &r, n, h, w, o->mode == MIXUP_PAIR, s);
}

void mixup_apply(const mix_sample_t *s, int n, int h, int w, int c, float *x) {
    size_t per = (size_t)h * w * c;
    for (int i = 0; i <= (n - 1) / 2; i++) {
        int j = n - 1 - i;
        const mix_sample_t *si = &s[i], *sj = &s[j];
        if (si->kind == 0 && sj->kind == 0) continue;
        float *a = x + (size_t)i * per, *b = x + (size_t)j * per;
        for (int y = 0; y < h; y++)
            for (int xx = 0; xx < w; xx++)
                for (int ch = 0; ch < c; ch++) {
                    size_t e = ((size_t)y * w + xx) * c + ch;
                    float va = a[e], vb = b[e];
                    a[e] = mix_value(si, y, xx, va, vb);
                    if (j != i) b[e] = mix_value(sj, y, xx, vb, va);
                }
    }
}

void mixup_on_off(double smoothing, int classes, float *on, float *off) {
    double off_d = smoothing / classes;
    *off = (float)off_d;
    *on = (float)(1.0 - smoothing + off_d);
}

void mixup_targets(const mix_sample_t *s, int n, const int32_t *labels, int classes, float on, float off,
                   float *t) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < classes; j++)
            t[(size_t)i * classes + j] = mix_target(&s[i], labels[i], labels[s[i].partner], j, on, off);
}
