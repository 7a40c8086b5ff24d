/* test_recipe.c: issue 17's data recipe on the CPU side, beyond the reference comparisons
 * of aug_vs_reference.py: hand-computed ops (posterize, solarize, equalize, autocontrast,
 * translate), the draws (deterministic per key, distributed as documented, independent of
 * earlier draws), Beta(a, a) moments, mixup's modes and odd batches, and the loader: mixed
 * batches and soft targets identical for 0 and 3 workers and when an epoch is started at a
 * later batch (resume), fp16 output the rounding of the fp32 one, evaluation untouched. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/autoaugment.h"
#include "data/erasing.h"
#include "data/loader.h"
#include "data/mixup.h"
#include "util/half.h"
#include "tests/test.h"

static void test_ops_by_hand(void) {
    /* 2x2 single channel: posterize to 2 bits keeps the top two bits */
    uint8_t img[4] = {0xff, 0x7f, 0x40, 0x3f}, tmp[4];
    aa_entry_t e;
    autoaug_resolve(AA_POSTERIZE, 2.0, 2, 2, &e);
    CHECK_INT(e.ival, 0xc0);
    autoaug_apply_entry(&e, img, tmp, 1, 2, 2);
    CHECK(img[0] == 0xc0 && img[1] == 0x40 && img[2] == 0x40 && img[3] == 0);
    /* solarize at 128: values >= 128 inverted */
    uint8_t s[4] = {0, 127, 128, 255};
    autoaug_resolve(AA_SOLARIZE, 128.0, 2, 2, &e);
    autoaug_apply_entry(&e, s, tmp, 1, 2, 2);
    CHECK(s[0] == 0 && s[1] == 127 && s[2] == 127 && s[3] == 0);
    /* autocontrast stretches [10, 20] to [0, 255]; a flat channel is left alone */
    uint8_t a[8] = {10, 7, 15, 7, 20, 7, 12, 7}, t8[8];
    autoaug_resolve(AA_AUTOCONTRAST, 0.0, 2, 2, &e);
    autoaug_apply_entry(&e, a, t8, 2, 2, 2);
    CHECK(a[0] == 0 && a[2] == 127 && a[4] == 255 && a[6] == 51 && a[1] == 7 && a[7] == 7);
    /* equalize of {0 x2, 100, 200}: step = (4 - 1) / 255 = 0 -> unchanged */
    uint8_t q[4] = {0, 0, 100, 200};
    autoaug_resolve(AA_EQUALIZE, 0.0, 2, 2, &e);
    autoaug_apply_entry(&e, q, tmp, 1, 2, 2);
    CHECK(q[0] == 0 && q[2] == 100 && q[3] == 200);
    /* translate right by 1 on a 1x3 row (torchvision: out[x] = in[x - 1], zero fill) */
    uint8_t r[3] = {1, 2, 3}, t3[3];
    autoaug_resolve(AA_TRANSLATE_X, 1.9, 1, 3, &e);   /* int(1.9) = 1 */
    autoaug_apply_entry(&e, r, t3, 1, 1, 3);
    CHECK(r[0] == 0 && r[1] == 1 && r[2] == 2);
    /* brightness 1 + 0 is the identity; 1 - 0.5 halves (truncating) */
    uint8_t b[2] = {201, 3}, t2[2];
    autoaug_resolve(AA_BRIGHTNESS, -0.5, 1, 2, &e);
    autoaug_apply_entry(&e, b, t2, 1, 1, 2);
    CHECK(b[0] == 100 && b[1] == 1);
    /* the tables: torchvision's RandAugment bin 9 values */
    CHECK_NEAR(autoaug_magnitude(AUTOAUG_RAND, AA_ROTATE, 9, 32, 32), 9.0, 1e-6, 0);
    CHECK_NEAR(autoaug_magnitude(AUTOAUG_RAND, AA_SHEAR_X, 9, 32, 32), 0.09, 1e-7, 0);
    CHECK_NEAR(autoaug_magnitude(AUTOAUG_RAND, AA_TRANSLATE_X, 30, 32, 32), 150.0 / 331.0 * 32, 1e-5, 0);
    CHECK_NEAR(autoaug_magnitude(AUTOAUG_RAND, AA_POSTERIZE, 9, 32, 32), 7.0, 0, 0);
    CHECK_NEAR(autoaug_magnitude(AUTOAUG_TRIVIAL, AA_POSTERIZE, 30, 32, 32), 2.0, 0, 0);
    CHECK_NEAR(autoaug_magnitude(AUTOAUG_TRIVIAL, AA_SOLARIZE, 30, 32, 32), 0.0, 0, 0);
    CHECK_NEAR(autoaug_magnitude(AUTOAUG_TRIVIAL, AA_ROTATE, 30, 32, 32), 135.0, 0, 0);
}

static void test_aa_draws(void) {
    int32_t a[AA_MAX_OPS], b[AA_MAX_OPS];
    int count[AA_NUM_OPS] = {0}, bins[AA_BINS] = {0}, neg = 0, signed_ops = 0;
    for (int64_t i = 0; i < 14000; i++) {
        CHECK_INT(aa_draw(5, 2, i, AUTOAUG_RAND, 2, 9, a), 2);
        for (int k = 0; k < 2; k++) {
            int op = a[k] / 2 / AA_BINS, bin = a[k] / 2 % AA_BINS;
            count[op]++;
            CHECK(bin == (aa_has_bins(op) ? 9 : 0));
            if (aa_signed(op)) signed_ops++, neg += a[k] & 1;
            CHECK(aa_signed(op) || !(a[k] & 1));
        }
        CHECK_INT(aa_draw(5, 2, i, AUTOAUG_TRIVIAL, 2, 9, b), 1);
        int op = b[0] / 2 / AA_BINS;
        if (aa_has_bins(op)) bins[b[0] / 2 % AA_BINS]++;
    }
    for (int op = 0; op < AA_NUM_OPS; op++) CHECK(count[op] > 1700 && count[op] < 2300);   /* 2000 each */
    CHECK(neg > signed_ops * 0.45 && neg < signed_ops * 0.55);
    for (int k = 0; k < AA_BINS; k++) CHECK(bins[k] > 250 && bins[k] < 450);               /* ~352 each */
    /* a pure function of the key; another sample or epoch draws differently */
    aa_draw(5, 2, 7, AUTOAUG_RAND, 4, 9, a);
    aa_draw(5, 2, 7, AUTOAUG_RAND, 4, 9, b);
    CHECK(memcmp(a, b, 4 * sizeof a[0]) == 0);
    int differ = 0;
    for (int64_t i = 0; i < 50; i++) {
        aa_draw(5, 2, i, AUTOAUG_RAND, 4, 9, a);
        aa_draw(5, 3, i, AUTOAUG_RAND, 4, 9, b);
        differ += memcmp(a, b, 4 * sizeof a[0]) != 0;
    }
    CHECK(differ > 45);
}

static void test_erase_draws(void) {
    erase_box_t boxes[ERASE_MAX_COUNT], again[ERASE_MAX_COUNT];
    int erased = 0, multi = 0;
    double area = 0;
    for (int64_t i = 0; i < 4000; i++) {
        int n = erase_draw(9, 1, i, 0.25, 1, 32, 32, boxes);
        erased += n > 0;
        if (n) area += boxes[0].h * boxes[0].w;
        CHECK(n <= 1);
        for (int k = 0; k < n; k++)
            CHECK(boxes[k].top >= 0 && boxes[k].left >= 0 && boxes[k].top + boxes[k].h <= 32 &&
                  boxes[k].left + boxes[k].w <= 32 && boxes[k].h < 32 && boxes[k].w < 32);
        int m = erase_draw(9, 1, i, 1.0, 3, 32, 32, boxes);
        CHECK(m >= 1 && m <= 3);
        multi += m > 1;
        CHECK_INT(erase_draw(9, 1, i, 1.0, 3, 32, 32, again), m);
        CHECK(memcmp(boxes, again, (size_t)m * sizeof boxes[0]) == 0);
    }
    CHECK(erased > 900 && erased < 1100);   /* prob 0.25 of 4000 */
    /* target area uniform in [0.02, 1/3] of 1024 px: mean ~181 (rounding, rejections aside) */
    area /= erased;
    CHECK(area > 150 && area < 210);
    CHECK(multi > 2400);                     /* count uniform in 1..3 */
    CHECK_INT(erase_draw(9, 1, 0, 0.0, 1, 32, 32, boxes), 0);
    /* erasing_apply writes exactly the box; values of pixel mode differ per element */
    float img[8 * 8 * 3];
    for (int i = 0; i < 8 * 8 * 3; i++) img[i] = 7.0f;
    erasing_opts_t o = {1.0, ERASE_PIXEL, 1};
    int n = erasing_apply(&o, 9, 1, 5, img, 3, 8, 8);
    CHECK_INT(n, erase_draw(9, 1, 5, 1.0, 1, 8, 8, boxes));
    int changed = 0;
    for (int i = 0; i < 8 * 8 * 3; i++) changed += img[i] != 7.0f;
    CHECK_INT(changed, n ? boxes[0].h * boxes[0].w * 3 : 0);
}

static void test_beta(void) {
    double alphas[] = {0.2, 1.0, 4.0};
    for (int k = 0; k < 3; k++) {
        rng_t r = rng_make(1, RNG_STREAM_MISC, (uint64_t)k, 0);
        double s = 0, s2 = 0;
        int n = 20000;
        for (int i = 0; i < n; i++) {
            double v = mixup_beta(&r, alphas[k]);
            CHECK(v >= 0.0 && v <= 1.0);
            s += v;
            s2 += v * v;
        }
        double mean = s / n, var = s2 / n - mean * mean, want = 1.0 / (4.0 * (2.0 * alphas[k] + 1.0));
        CHECK_NEAR(mean, 0.5, 0.01, 0);
        CHECK_NEAR(var, want, 0, 0.05);
    }
}

static void test_mixup_modes(void) {
    enum { N = 9, H = 4, W = 5, C = 2, K = 3 };
    mixup_opts_t o = {0.4, 1.0, 1.0, 0.5, MIXUP_BATCH, 0.1, K};
    mix_sample_t s[N], s2[N];
    /* batch mode: one lam and method for all; same key, same draws; another rank differs */
    int cuts = 0, mixed_rank = 0;
    for (int b = 0; b < 200; b++) {
        mixup_draw(&o, 3, 1, b, 0, N, H, W, s);
        mixup_draw(&o, 3, 1, b, 0, N, H, W, s2);
        CHECK(memcmp(s, s2, sizeof s) == 0);
        for (int i = 1; i < N; i++) CHECK(s[i].w_self == s[0].w_self && s[i].kind == s[0].kind);
        for (int i = 0; i < N; i++) CHECK_INT(s[i].partner, N - 1 - i);
        cuts += s[0].kind == 2;
        mixup_draw(&o, 3, 1, b, 1, N, H, W, s2);
        mixed_rank += s2[0].w_self != s[0].w_self;
        if (s[0].kind == 2)   /* corrected lam is 1 - box area / image area */
            CHECK(s[0].w_self == (float)(1.0 - (double)((s[0].yh - s[0].yl) * (s[0].xh - s[0].xl)) / (H * W)));
    }
    CHECK(cuts > 70 && cuts < 130);
    CHECK(mixed_rank > 190);
    /* prob 0: nothing mixed */
    o.prob = 0.0;
    mixup_draw(&o, 3, 1, 0, 0, N, H, W, s);
    for (int i = 0; i < N; i++) CHECK(s[i].kind == 0 && s[i].w_self == 1.0f && s[i].w_other == 0.0f);
    /* elem: per-sample lams; pair: partners share theirs, the odd middle sample stays */
    o.prob = 1.0;
    o.mode = MIXUP_ELEM;
    mixup_draw(&o, 3, 1, 0, 0, N, H, W, s);
    int distinct = 0;
    for (int i = 1; i < N; i++) distinct += s[i].w_self != s[0].w_self;
    CHECK(distinct >= N - 2);
    o.mode = MIXUP_PAIR;
    mixup_draw(&o, 3, 1, 0, 0, N, H, W, s);
    for (int i = 0; i < N / 2; i++) CHECK(s[i].w_self == s[N - 1 - i].w_self && s[i].kind == s[N - 1 - i].kind);
    CHECK(s[N / 2].kind == 0 && s[N / 2].w_self == 1.0f);
    /* applying: pair values from the originals; the odd middle sample mixes with itself */
    float x[N * H * W * C], orig[N * H * W * C];
    for (int i = 0; i < N * H * W * C; i++) orig[i] = x[i] = (float)(i % 97) * 0.25f - 3.0f;
    mixup_set_batch(0.75, 0, 0, 0, N, H, W, s);
    mixup_apply(s, N, H, W, C, x);
    size_t per = H * W * C;
    for (int i = 0; i < N; i++)
        for (size_t e = 0; e < per; e++) {
            float want = orig[i * per + e] * 0.75f + orig[(N - 1 - i) * per + e] * 0.25f;
            CHECK(x[i * per + e] == want);
        }
    /* cutmix box: rows/cols from the partner inside, own outside */
    memcpy(x, orig, sizeof x);
    mixup_set_batch(0.5, 1, 2, 2, N, H, W, s);   /* ratio 0.707: cut 2 x 3 around (2, 2) */
    CHECK(s[0].yl == 1 && s[0].yh == 3 && s[0].xl == 1 && s[0].xh == 3);
    CHECK(s[0].w_self == 0.8f);                   /* 1 - 4 / 20 */
    mixup_apply(s, N, H, W, C, x);
    CHECK(x[0 * per + (1 * W + 1) * C] == orig[(N - 1) * per + (1 * W + 1) * C]);
    CHECK(x[0 * per + 0] == orig[0]);
    CHECK(memcmp(x + (N / 2) * per, orig + (N / 2) * per, per * sizeof(float)) == 0);
    /* targets: rows sum to 1; an unmixed sample is the smoothed one-hot */
    int32_t labels[N] = {0, 1, 2, 0, 1, 2, 0, 1, 2};
    float t[N * K], on, off;
    mixup_on_off(0.1, K, &on, &off);
    CHECK(off == (float)(0.1 / 3) && on == (float)(1.0 - 0.1 + 0.1 / 3));
    mixup_targets(s, N, labels, K, on, off, t);
    for (int i = 0; i < N; i++) CHECK_NEAR(t[i * K] + t[i * K + 1] + t[i * K + 2], 1.0, 1e-6, 0);
    CHECK(t[0] == on * 0.8f + off * 0.2f && t[2] == off * 0.8f + on * 0.2f);
    mixup_set_batch(1.0, 0, 0, 0, N, H, W, s);
    mixup_targets(s, N, labels, K, on, off, t);
    CHECK(t[0] == on && t[1] == off && t[2] == off);
}

static dataset_t *make_ds(int n) {
    uint8_t *px = malloc((size_t)n * 16 * 16 * 3);
    int32_t *lab = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) {
        lab[i] = i % 5;
        for (int j = 0; j < 768; j++) px[(size_t)i * 768 + j] = (uint8_t)(i * 29 + j * 13 + (j >> 4));
    }
    dataset_t *d = NULL;
    err_t e = {0};
    dataset_from_memory("t", px, lab, n, 3, 16, 16, 5, &d, &e);
    free(px);
    free(lab);
    return d;
}

static loader_opts_t recipe_opts(int workers) {
    loader_opts_t o = {0};
    o.batch_size = 6;
    o.workers = workers;
    o.shuffle = true;
    o.world_size = 1;
    o.seed = 4;
    o.augment = (augment_opts_t){true, 16, 2, true, 0};
    o.n_norm = 3;
    for (int k = 0; k < 3; k++) o.mean[k] = 0.5f, o.std[k] = 0.25f;
    o.autoaug = (autoaug_opts_t){AUTOAUG_RAND, 2, 9};
    o.erasing = (erasing_opts_t){0.5, ERASE_PIXEL, 1};
    o.mixup = (mixup_opts_t){0.2, 1.0, 1.0, 0.5, MIXUP_ELEM, 0.1, 5};
    return o;
}

/* All batches of epoch `epoch` from batch `from` on: images and targets concatenated. */
static float *epoch_bytes(const dataset_t *ds, loader_opts_t o, int64_t epoch, int64_t from, size_t *len) {
    loader_t *l = NULL;
    err_t e = {0};
    if (loader_create(ds, &o, &l, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return NULL;
    }
    loader_start_epoch(l, epoch, from, &e);
    size_t cap = 1 << 20, n = 0;
    float *out = malloc(cap * sizeof(float));
    loader_batch_t *b;
    while (loader_next(l, &b, &e) == 1) {
        size_t im = (size_t)b->n * b->h * b->w * b->c, tg = b->targets ? (size_t)b->n * 5 : 0;
        for (size_t i = 0; i < im; i++)
            out[n++] = b->dtype == LOADER_F16 ? f16_to_f32(((uint16_t *)b->images)[i]) : ((float *)b->images)[i];
        if (tg) memcpy(out + n, b->targets, tg * sizeof(float));
        n += tg;
    }
    loader_free(l);
    *len = n;
    return out;
}

static void test_loader_recipe(void) {
    dataset_t *ds = make_ds(40);
    size_t n0, n3, nr, nf, np;
    float *a = epoch_bytes(ds, recipe_opts(0), 2, 0, &n0), *b = epoch_bytes(ds, recipe_opts(3), 2, 0, &n3);
    CHECK(a && b && n0 == n3 && n0 == 40 * (768 + 5));
    CHECK(memcmp(a, b, n0 * sizeof(float)) == 0);
    /* resuming at batch 3 gives the uninterrupted epoch's batches 3.. */
    float *r = epoch_bytes(ds, recipe_opts(2), 2, 3, &nr);
    size_t skip = 3 * 6 * (768 + 5);
    CHECK_INT(nr, n0 - skip);
    CHECK(memcmp(r, a + skip, nr * sizeof(float)) == 0);
    /* every batch has targets summing to 1 per row, some rows mixed */
    int soft = 0;
    for (size_t off = 0; off < n0;) {
        int bn = off + 6 * (768 + 5) <= n0 ? 6 : 4;
        float *t = a + off + (size_t)bn * 768;
        for (int i = 0; i < bn; i++) {
            float s = 0, mx = 0;
            for (int k = 0; k < 5; k++) s += t[i * 5 + k], mx = t[i * 5 + k] > mx ? t[i * 5 + k] : mx;
            CHECK_NEAR(s, 1.0, 1e-5, 0);
            soft += mx < (float)(1.0 - 0.1 + 0.1 / 5);
        }
        off += (size_t)bn * (768 + 5);
    }
    CHECK(soft > 10);
    /* features off: other images (the recipe does change them) */
    loader_opts_t plain = recipe_opts(0);
    plain.autoaug.kind = AUTOAUG_NONE;
    plain.erasing.prob = 0;
    plain.mixup.alpha = plain.mixup.cutmix_alpha = 0;
    float *p = epoch_bytes(ds, plain, 2, 0, &np);
    CHECK_INT(np, 40 * 768);
    size_t diff = 0;
    for (size_t ao = 0, po = 0; po < np;) {
        size_t bn = np - po >= 6 * 768 ? 6 : (np - po) / 768;
        for (size_t k = 0; k < bn * 768; k++) diff += p[po + k] != a[ao + k];
        ao += bn * (768 + 5);
        po += bn * 768;
    }
    CHECK(diff > np / 4);
    /* fp16 output is the fp32 batch rounded once, after mixing (targets stay fp32) */
    loader_opts_t h = recipe_opts(1);
    h.dtype = LOADER_F16;
    float *f = epoch_bytes(ds, h, 2, 0, &nf);
    CHECK_INT(nf, n0);
    size_t bad = 0;
    for (size_t off = 0; off < nf;) {
        size_t bn = nf - off >= 6 * (768 + 5) ? 6 : (nf - off) / (768 + 5);
        for (size_t k = 0; k < bn * 768; k++) bad += f[off + k] != round_f16(a[off + k]);
        for (size_t k = bn * 768; k < bn * (768 + 5); k++) bad += f[off + k] != a[off + k];
        off += bn * (768 + 5);
    }
    CHECK_INT(bad, 0);
    /* evaluation loaders ignore the recipe */
    loader_opts_t ev = recipe_opts(0);
    ev.eval = true;
    ev.shuffle = false;
    loader_t *l = NULL;
    err_t e = {0};
    CHECK_INT(loader_create(ds, &ev, &l, &e), 0);
    loader_start_epoch(l, 0, 0, &e);
    loader_batch_t *bt;
    CHECK_INT(loader_next(l, &bt, &e), 1);
    CHECK(bt->targets == NULL);
    CHECK(((float *)bt->images)[0] == (((float)(0 * 29) / 255.0f) - 0.5f) / 0.25f);
    loader_free(l);
    /* bad options are refused with the key named */
    loader_opts_t bad_o = recipe_opts(0);
    bad_o.mixup.prob = 1.5;
    CHECK_INT(loader_create(ds, &bad_o, &l, &e), -1);
    CHECK_CONTAINS(e.msg, "data.mixup");
    free(a);
    free(b);
    free(r);
    free(p);
    free(f);
    dataset_free(ds);
}

int main(void) {
    TEST_RUN(test_ops_by_hand);
    TEST_RUN(test_aa_draws);
    TEST_RUN(test_erase_draws);
    TEST_RUN(test_beta);
    TEST_RUN(test_mixup_modes);
    TEST_RUN(test_loader_recipe);
    return test_main_end();
}
