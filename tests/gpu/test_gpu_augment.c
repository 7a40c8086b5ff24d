/* test_gpu_augment.c: the GPU augmentation kernel against the CPU loader's functions
 * (data/augment.c augment_draw + augment_apply + augment_normalize) on the same dataset
 * indices, seed and epoch: crop + flip bit for bit, rotation bit for bit up to a
 * vanishing fraction of pixels (cos/sin of the angle in double on two libms), evaluation
 * centre crop, fp16 output, gathered labels. Issue 17: RandAugment / TrivialAugmentWide
 * with random erasing (each mode) against data/autoaugment.c + data/erasing.c (bit for
 * bit up to the erasing's libm caveat, a vanishing fraction), and cuda_mixup_batch against
 * data/mixup.c (images and soft targets bit for bit; fp16 the rounding of the fp32 result).
 * Skipped (77) without a GPU.
 */
#include "data/augment.h"
#include "data/autoaugment.h"
#include "data/erasing.h"
#include "data/mixup.h"
#include "model/cuda/augment.h"
#include "tests/gpu/gpu_test_util.h"

enum { NI = 16, H = 32, W = 32, C = 3, B = 12 };

typedef struct fixture {
    backend_t *gpu;
    uint8_t *pixels;          /* host, NI x H x W x C */
    int32_t labels[NI];
    void *dpix, *dlab, *didx, *dout, *dolab;
    int64_t idx[B];
} fixture_t;

static fixture_t fixture_make(void) {
    fixture_t f;
    memset(&f, 0, sizeof f);
    pair_t p = pair_make(true, false);
    backend_free(p.cpu);
    f.gpu = p.gpu;
    f.pixels = (uint8_t *)malloc((size_t)NI * H * W * C);
    rng_t r = rng_make(5, RNG_STREAM_MISC, 1, 0);
    for (size_t i = 0; i < (size_t)NI * H * W * C; i++) f.pixels[i] = (uint8_t)rng_below(&r, 256);
    for (int i = 0; i < NI; i++) f.labels[i] = 100 + i;
    int64_t idx[B] = {3, 0, 15, 7, 7, 1, 12, 9, 4, 4, 11, 2};
    memcpy(f.idx, idx, sizeof idx);
    backend_t *g = f.gpu;
    f.dpix = g->ops->alloc(g, (size_t)NI * H * W * C);
    f.dlab = g->ops->alloc(g, sizeof f.labels);
    f.didx = g->ops->alloc(g, sizeof f.idx);
    f.dout = g->ops->alloc(g, (size_t)B * H * W * C * 4);
    f.dolab = g->ops->alloc(g, B * 4);
    OK(g, g->ops->upload(g, f.dpix, f.pixels, (size_t)NI * H * W * C));
    OK(g, g->ops->upload(g, f.dlab, f.labels, sizeof f.labels));
    OK(g, g->ops->upload(g, f.didx, f.idx, sizeof f.idx));
    return f;
}

static void fixture_free(fixture_t *f) {
    free(f->pixels);
    backend_free(f->gpu);
}

static cuda_augment_desc_t desc_of(const augment_opts_t *o, bool train, uint64_t seed, int64_t epoch) {
    cuda_augment_desc_t d;
    memset(&d, 0, sizeof d);
    d.c = C; d.h = H; d.w = W;
    d.train = train;
    d.random_crop = o->random_crop;
    d.crop_size = o->crop_size;
    d.crop_padding = o->crop_padding;
    d.horizontal_flip = o->horizontal_flip;
    d.rotation = o->rotation;
    const float mean[3] = {0.5071f, 0.4865f, 0.4409f}, std[3] = {0.2673f, 0.2564f, 0.2762f};
    memcpy(d.mean, mean, sizeof mean);
    memcpy(d.std, std, sizeof std);
    d.seed = seed;
    d.epoch = epoch;
    return d;
}

/* The CPU loader's result for the batch (normalised floats, B x oh x ow x C). */
static float *cpu_batch(const fixture_t *f, const augment_opts_t *o, const cuda_augment_desc_t *d,
                        int *oh, int *ow) {
    augment_out_shape(o, H, W, oh, ow);
    size_t per = (size_t)*oh * *ow * C;
    float *out = hbuf((int64_t)(B * per));
    uint8_t *dst = (uint8_t *)malloc(per), *scratch = (uint8_t *)malloc(per);
    for (int b = 0; b < B; b++) {
        augment_params_t pr = d->train ? augment_draw(o, H, W, d->seed, d->epoch, f->idx[b])
                                       : augment_eval_params(o, H, W);
        augment_apply(o, &pr, f->pixels + (size_t)f->idx[b] * H * W * C, C, H, W, dst, scratch);
        augment_normalize(dst, (int64_t)*oh * *ow, C, d->mean, d->std, out + b * per);
    }
    free(dst);
    free(scratch);
    return out;
}

/* Runs the GPU kernel for d and returns its floats (fp32 or widened fp16). */
static float *gpu_batch(fixture_t *f, const cuda_augment_desc_t *d, dtype_t dt, int64_t n) {
    backend_t *g = f->gpu;
    OK(g, cuda_augment_batch(g, d, (const uint8_t *)f->dpix, NI, (const int32_t *)f->dlab,
                             (const int64_t *)f->didx, B, dt, f->dout, (int32_t *)f->dolab));
    float *out = hbuf(n);
    if (dt == DT_F32) {
        OK(g, g->ops->download(g, out, f->dout, (size_t)n * 4));
    } else {
        uint16_t *h = (uint16_t *)malloc((size_t)n * 2);
        OK(g, g->ops->download(g, h, f->dout, (size_t)n * 2));
        for (int64_t i = 0; i < n; i++) out[i] = f16_to_f32(h[i]);
        free(h);
    }
    return out;
}

static int64_t count_diff(const float *a, const float *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

static void test_crop_flip_exact(void) {
    gpu_or_skip();
    fixture_t f = fixture_make();
    augment_opts_t o = {true, 32, 4, true, 0.0};
    for (int64_t epoch = 0; epoch < 3; epoch++) {
        cuda_augment_desc_t d = desc_of(&o, true, 42, epoch);
        int oh, ow;
        float *want = cpu_batch(&f, &o, &d, &oh, &ow);
        int64_t n = (int64_t)B * oh * ow * C;
        float *got = gpu_batch(&f, &d, DT_F32, n);
        CHECK_INT(count_diff(got, want, n), 0);
        free(want);
        free(got);
    }
    int32_t lab[B];
    OK(f.gpu, f.gpu->ops->download(f.gpu, lab, f.dolab, sizeof lab));
    for (int b = 0; b < B; b++) CHECK_INT(lab[b], 100 + f.idx[b]);
    fixture_free(&f);
}

static void test_rotation_matches(void) {
    gpu_or_skip();
    fixture_t f = fixture_make();
    augment_opts_t o = {true, 32, 4, true, 15.0}, norot = {true, 32, 4, true, 0.0};
    cuda_augment_desc_t d = desc_of(&o, true, 7, 1), dn = desc_of(&norot, true, 7, 1);
    int oh, ow;
    float *want = cpu_batch(&f, &o, &d, &oh, &ow);
    int64_t n = (int64_t)B * oh * ow * C;
    float *got = gpu_batch(&f, &d, DT_F32, n);
    float *plain = gpu_batch(&f, &dn, DT_F32, n);
    int64_t diff = count_diff(got, want, n);
    if (diff) fprintf(stderr, "  rotation: %lld of %lld values differ\n", (long long)diff, (long long)n);
    CHECK(diff <= n / 10000);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - want[i]));
    CHECK(worst <= 1.0 / 255.0 / 0.2564 + 1e-6);   /* at most one uint8 step */
    CHECK(count_diff(got, plain, n) > n / 4);      /* the rotation did rotate */
    free(want); free(got); free(plain);
    fixture_free(&f);
}

static void test_eval_and_half(void) {
    gpu_or_skip();
    fixture_t f = fixture_make();
    augment_opts_t o = {true, 28, 4, true, 15.0};
    cuda_augment_desc_t d = desc_of(&o, false, 3, 0);
    int oh, ow;
    float *want = cpu_batch(&f, &o, &d, &oh, &ow);
    CHECK_INT(oh, 28);
    int64_t n = (int64_t)B * oh * ow * C;
    float *got = gpu_batch(&f, &d, DT_F32, n);
    CHECK_INT(count_diff(got, want, n), 0);
    float *goth = gpu_batch(&f, &d, DT_F16, n);
    for (int64_t i = 0; i < n; i++) want[i] = round_f16(want[i]);
    CHECK_INT(count_diff(goth, want, n), 0);
    free(want); free(got); free(goth);
    fixture_free(&f);
}

/* The CPU loader's per-sample pipeline with the issue-17 ops: geometry, auto-augment,
 * normalisation, erasing (B x oh x ow x C floats). */
static float *cpu_recipe_batch(const fixture_t *f, const augment_opts_t *o, const cuda_augment_desc_t *d,
                               const autoaug_opts_t *aa, const aa_entry_t *table, const erasing_opts_t *er) {
    int oh, ow;
    augment_out_shape(o, H, W, &oh, &ow);
    size_t per = (size_t)oh * ow * C;
    float *out = hbuf((int64_t)(B * per));
    uint8_t *dst = (uint8_t *)malloc(per), *scratch = (uint8_t *)malloc(per);
    for (int b = 0; b < B; b++) {
        augment_params_t pr = augment_draw(o, H, W, d->seed, d->epoch, f->idx[b]);
        augment_apply(o, &pr, f->pixels + (size_t)f->idx[b] * H * W * C, C, H, W, dst, scratch);
        if (aa->kind) autoaug_apply(aa, table, d->seed, d->epoch, f->idx[b], dst, scratch, C, oh, ow);
        augment_normalize(dst, (int64_t)oh * ow, C, d->mean, d->std, out + b * per);
        erasing_apply(er, d->seed, d->epoch, f->idx[b], out + b * per, C, oh, ow);
    }
    free(dst);
    free(scratch);
    return out;
}

static void test_autoaug_erasing(void) {
    gpu_or_skip();
    fixture_t f = fixture_make();
    backend_t *g = f.gpu;
    augment_opts_t o = {true, 32, 4, true, 0.0};
    autoaug_opts_t kinds[2] = {{AUTOAUG_RAND, 3, 14}, {AUTOAUG_TRIVIAL, 2, 9}};
    static aa_entry_t table[AA_TABLE_SIZE];
    void *dtable = g->ops->alloc(g, sizeof table), *dscratch = g->ops->alloc(g, 2 * (size_t)B * H * W * C);
    int64_t n = (int64_t)B * H * W * C;
    for (int k = 0; k < 2; k++)
        for (int mode = 0; mode < 3; mode++)
            for (int64_t epoch = 0; epoch < 3; epoch++) {
                autoaug_build_table(kinds[k].kind, H, W, table);
                OK(g, g->ops->upload(g, dtable, table, sizeof table));
                erasing_opts_t er = {0.6, (erase_mode_t)mode, mode == 1 ? 2 : 1};
                cuda_augment_desc_t d = desc_of(&o, true, 42 + (uint64_t)k, epoch);
                d.auto_kind = kinds[k].kind;
                d.aa_num_ops = kinds[k].num_ops;
                d.aa_magnitude = kinds[k].magnitude;
                d.aa_table = dtable;
                d.aa_scratch = (uint8_t *)dscratch;
                d.erase_prob = er.prob;
                d.erase_mode = er.mode;
                d.erase_count = er.count;
                float *want = cpu_recipe_batch(&f, &o, &d, &kinds[k], table, &er);
                float *got = gpu_batch(&f, &d, DT_F32, n);
                int64_t diff = count_diff(got, want, n);
                if (diff) fprintf(stderr, "  kind %d erase mode %d epoch %lld: %lld of %lld values differ\n", k,
                                  mode, (long long)epoch, (long long)diff, (long long)n);
                CHECK(diff <= n / 10000);
                free(want);
                free(got);
            }
    g->ops->release(g, dtable);
    g->ops->release(g, dscratch);
    fixture_free(&f);
}

static void test_mixup_matches(void) {
    gpu_or_skip();
    fixture_t f = fixture_make();
    backend_t *g = f.gpu;
    augment_opts_t o = {true, 32, 4, true, 0.0};
    int64_t n = (int64_t)B * H * W * C;
    enum { K = 120 };
    void *dmix = g->ops->alloc(g, (size_t)n * 4), *dsamples = g->ops->alloc(g, B * sizeof(mix_sample_t));
    void *dtargets = g->ops->alloc(g, B * K * sizeof(float)), *dout = g->ops->alloc(g, (size_t)n * 4);
    int32_t labels[B];
    for (int b = 0; b < B; b++) labels[b] = 100 + (int32_t)f.idx[b];   /* the fixture's label of the sample */
    for (int mode = 0; mode < 3; mode++)
        for (int64_t batch = 0; batch < 4; batch++) {
            mixup_opts_t mo = {0.4, 1.0, 0.9, 0.5, (mixup_mode_t)mode, 0.1, K};
            cuda_augment_desc_t d = desc_of(&o, true, 3, 1);
            int oh, ow;
            float *want = cpu_batch(&f, &o, &d, &oh, &ow);
            mix_sample_t s[B];
            mixup_draw(&mo, 3, 1, batch, 1, B, H, W, s);
            float on, off, tw[B * K], tg[B * K];
            mixup_on_off(0.1, K, &on, &off);
            mixup_apply(s, B, H, W, C, want);
            mixup_targets(s, B, labels, K, on, off, tw);
            OK(g, cuda_augment_batch(g, &d, (const uint8_t *)f.dpix, NI, (const int32_t *)f.dlab,
                                     (const int64_t *)f.didx, B, DT_F32, dmix, (int32_t *)f.dolab));
            OK(g, g->ops->upload(g, dsamples, s, sizeof s));
            for (int half = 0; half < 2; half++) {
                dtype_t dt = half ? DT_F16 : DT_F32;
                OK(g, cuda_mixup_batch(g, dsamples, B, H, W, C, (const float *)dmix, dt, dout, (const int32_t *)f.dolab,
                                       K, on, off, (float *)dtargets));
                float *got = hbuf(n);
                if (dt == DT_F32) {
                    OK(g, g->ops->download(g, got, dout, (size_t)n * 4));
                } else {
                    uint16_t *h = (uint16_t *)malloc((size_t)n * 2);
                    OK(g, g->ops->download(g, h, dout, (size_t)n * 2));
                    for (int64_t i = 0; i < n; i++) got[i] = f16_to_f32(h[i]);
                    free(h);
                }
                int64_t bad = 0;
                for (int64_t i = 0; i < n; i++) bad += got[i] != (half ? round_f16(want[i]) : want[i]);
                CHECK_INT(bad, 0);
                OK(g, g->ops->download(g, tg, dtargets, sizeof tg));
                CHECK(memcmp(tg, tw, sizeof tg) == 0);
                free(got);
            }
            free(want);
        }
    void *ptrs[] = {dmix, dsamples, dtargets, dout};
    for (int i = 0; i < 4; i++) g->ops->release(g, ptrs[i]);
    fixture_free(&f);
}

int main(void) {
    gpu_or_skip();
    TEST_RUN(test_crop_flip_exact);
    TEST_RUN(test_rotation_matches);
    TEST_RUN(test_eval_and_half);
    TEST_RUN(test_autoaug_erasing);
    TEST_RUN(test_mixup_matches);
    return test_main_end();
}
