/* test_loader.c: augmentation maths against hand-computed cases and torchvision, and the
 * loader's determinism (0/1/4 workers, batch sizes, world sizes, resume), dtypes,
 * evaluation mode, the caller's allocator and clean shutdown. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/augment.h"
#include "data/loader.h"
#include "util/half.h"
#include "tests/test.h"

static void test_crop_flip(void) {
    uint8_t src[16], dst[16], tmp[16];
    for (int i = 0; i < 16; i++) src[i] = (uint8_t)(i + 1);  /* 4x4, one channel */
    augment_opts_t o = {true, 4, 1, true, 0};
    augment_params_t p = {0, 2, false, 0};
    augment_apply(&o, &p, src, 1, 4, 4, dst, tmp);
    /* out[y][x] = src[y - 1][x + 1], zero outside */
    uint8_t want[16] = {0, 0, 0, 0, 2, 3, 4, 0, 6, 7, 8, 0, 10, 11, 12, 0};
    CHECK(memcmp(dst, want, 16) == 0);
    p = (augment_params_t){1, 1, true, 0};  /* centred crop, flipped */
    augment_apply(&o, &p, src, 1, 4, 4, dst, tmp);
    uint8_t want2[16] = {4, 3, 2, 1, 8, 7, 6, 5, 12, 11, 10, 9, 16, 15, 14, 13};
    CHECK(memcmp(dst, want2, 16) == 0);
    p = (augment_params_t){2, 0, true, 0};  /* crop then flip: out[y][x] = crop[y][3 - x] */
    augment_apply(&o, &p, src, 1, 4, 4, dst, tmp);
    uint8_t want3[16] = {7, 6, 5, 0, 11, 10, 9, 0, 15, 14, 13, 0, 0, 0, 0, 0};
    CHECK(memcmp(dst, want3, 16) == 0);
    /* 2 channels stay together; a smaller crop gives a smaller image */
    uint8_t s2[2 * 9], d2[2 * 4], t2[8];
    for (int i = 0; i < 18; i++) s2[i] = (uint8_t)i;
    augment_opts_t o2 = {true, 2, 0, false, 0};
    int oh, ow;
    augment_out_shape(&o2, 3, 3, &oh, &ow);
    CHECK_INT(oh, 2);
    CHECK_INT(ow, 2);
    p = (augment_params_t){1, 1, false, 0};
    augment_apply(&o2, &p, s2, 2, 3, 3, d2, t2);
    uint8_t want4[8] = {8, 9, 10, 11, 14, 15, 16, 17};
    CHECK(memcmp(d2, want4, 8) == 0);
    /* evaluation: centre crop offsets in padded coordinates */
    augment_params_t ev = augment_eval_params(&o, 4, 4);
    CHECK_INT(ev.top, 1);
    CHECK_INT(ev.left, 1);
    CHECK(!ev.flip);
}

static void test_rotation_hand(void) {
    uint8_t src[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, dst[9], tmp[9];
    augment_opts_t o = {false, 0, 0, false, 90};
    augment_params_t p = {0, 0, false, 90.0};  /* counter-clockwise */
    augment_apply(&o, &p, src, 1, 3, 3, dst, tmp);
    uint8_t ccw[9] = {3, 6, 9, 2, 5, 8, 1, 4, 7};
    CHECK(memcmp(dst, ccw, 9) == 0);
    p.angle = -90.0;
    augment_apply(&o, &p, src, 1, 3, 3, dst, tmp);
    uint8_t cw[9] = {7, 4, 1, 8, 5, 2, 9, 6, 3};
    CHECK(memcmp(dst, cw, 9) == 0);
    /* 45 degrees on 5x5 of 100s: the centre keeps 100; corner (0,0) samples (2, -0.828):
     * only the row-0 neighbour is inside, weight 0.1716, times the 0.1716 mask -> 2.94 -> 3 */
    uint8_t s5[25], d5[25], t5[25];
    memset(s5, 100, sizeof s5);
    p.angle = 45.0;
    augment_apply(&o, &p, s5, 1, 5, 5, d5, t5);
    CHECK_INT(d5[12], 100);
    CHECK_INT(d5[0], 3);
    CHECK_INT(d5[2], 100);
}

/* F.rotate(img, 17.5, BILINEAR, fill=[0.0]) on a 3x8x8 uint8 tensor with
 * img[c, y, x] = (37y + 11x + 71c) % 256, printed as HWC (torchvision 0.14). */
static const uint8_t tv_rot[192] = {0,1,2,4,16,28,17,53,89,45,116,187,67,138,209,88,159,230,110,181,33,1,2,0,12,83,154,34,105,176,56,127,198,77,148,219,99,170,173,120,191,117,142,213,40,26,31,7,44,115,186,66,137,208,88,159,230,109,180,140,131,202,17,152,223,38,174,175,60,97,4,40,76,147,218,98,169,170,120,191,115,141,212,54,163,189,49,184,134,70,206,77,92,209,43,114,108,179,248,130,201,23,152,223,38,173,244,59,195,49,81,216,31,102,238,53,124,81,75,146,73,108,31,162,187,48,184,132,70,205,76,91,216,42,113,151,63,134,95,85,156,38,107,178,30,6,11,194,9,80,216,31,102,237,52,123,194,74,145,24,95,166,46,117,188,68,139,210,3,0,1,204,41,112,148,63,134,93,84,155,38,106,177,23,59,95,9,21,33,1,2,3};

static void test_rotation_torchvision(void) {
    uint8_t src[192], dst[192], tmp[192];
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++)
            for (int c = 0; c < 3; c++) src[(y * 8 + x) * 3 + c] = (uint8_t)((y * 37 + x * 11 + c * 71) % 256);
    augment_opts_t o = {false, 0, 0, false, 20};
    augment_params_t p = {0, 0, false, 17.5};
    augment_apply(&o, &p, src, 3, 8, 8, dst, tmp);
    int off_by_one = 0, worse = 0;
    for (int i = 0; i < 192; i++) {
        int d = abs((int)dst[i] - (int)tv_rot[i]);
        off_by_one += d == 1;
        worse += d > 1;
    }
    printf("rotation vs torchvision: %d of 192 values differ by 1 (float rounding), %d by more\n",
           off_by_one, worse);
    CHECK_INT(worse, 0);
    CHECK(off_by_one <= 4);
}

static void test_draw_and_normalize(void) {
    augment_opts_t o = {true, 32, 4, true, 15};
    augment_params_t a = augment_draw(&o, 32, 32, 1, 0, 17), b = augment_draw(&o, 32, 32, 1, 0, 17);
    CHECK(a.top == b.top && a.left == b.left && a.flip == b.flip && a.angle == b.angle);
    int flips = 0, tops[9] = {0};
    double amin = 1e9, amax = -1e9;
    for (int i = 0; i < 4000; i++) {
        augment_params_t p = augment_draw(&o, 32, 32, 1, 3, i);
        CHECK(p.top >= 0 && p.top <= 8 && p.left >= 0 && p.left <= 8);
        if (p.top >= 0 && p.top <= 8) tops[p.top]++;
        flips += p.flip;
        if (p.angle < amin) amin = p.angle;
        if (p.angle > amax) amax = p.angle;
    }
    CHECK(flips > 1800 && flips < 2200);
    for (int t = 0; t < 9; t++) CHECK(tops[t] > 350 && tops[t] < 550);
    CHECK(amin >= -15.0 && amin < -14.5);
    CHECK(amax <= 15.0 && amax > 14.5);
    augment_params_t c = augment_draw(&o, 32, 32, 1, 1, 17);
    CHECK(c.angle != a.angle);
    uint8_t px[4] = {0, 255, 128, 51};
    float mean[2] = {0.5f, 0.2f}, std[2] = {0.25f, 0.5f}, out[4];
    augment_normalize(px, 2, 2, mean, std, out);
    CHECK_NEAR(out[0], -2.0, 1e-6, 0);
    CHECK_NEAR(out[1], 1.6, 1e-6, 0);
    CHECK_NEAR(out[2], (128 / 255.0 - 0.5) / 0.25, 1e-6, 0);
    CHECK_NEAR(out[3], 0.0, 1e-6, 0);
}

static dataset_t *make_ds(int n) {
    uint8_t *px = malloc((size_t)n * 3072);
    int32_t *lab = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) {
        lab[i] = i % 10;
        for (int j = 0; j < 3072; j++) px[(size_t)i * 3072 + j] = (uint8_t)(i * 31 + j * 7 + (j >> 5));
    }
    dataset_t *d = NULL;
    err_t e = {0};
    dataset_from_memory("t", px, lab, n, 3, 32, 32, 10, &d, &e);
    free(px);
    free(lab);
    return d;
}

static loader_opts_t train_opts(int batch, int workers) {
    loader_opts_t o = {0};
    o.batch_size = batch;
    o.workers = workers;
    o.shuffle = true;
    o.world_size = 1;
    o.seed = 99;
    o.augment = (augment_opts_t){true, 32, 4, true, 15};
    o.n_norm = 3;
    o.mean[0] = 0.4914f; o.mean[1] = 0.4822f; o.mean[2] = 0.4465f;
    o.std[0] = 0.2470f; o.std[1] = 0.2435f; o.std[2] = 0.2616f;
    o.dtype = LOADER_F32;
    return o;
}

/* Runs one epoch and stores each sample's output at out[id] (3072 floats) and the order of
 * ids in order[] (if non-NULL). Returns the number of samples seen. */
static int run_epoch(const dataset_t *d, const loader_opts_t *o, int64_t epoch, int64_t start,
                     float *out, int64_t *order) {
    loader_t *l = NULL;
    err_t e = {0};
    if (loader_create(d, o, &l, &e)) { fprintf(stderr, "%s\n", e.msg); return -1; }
    CHECK_INT(loader_start_epoch(l, epoch, start, &e), 0);
    loader_batch_t *b;
    int seen = 0, rc;
    int64_t expect = start;
    while ((rc = loader_next(l, &b, &e)) == 1) {
        CHECK_INT(b->index, expect);
        expect++;
        CHECK(b->data_wait_s >= 0);
        for (int j = 0; j < b->n; j++) {
            int64_t id = b->sample_ids[j];
            CHECK_INT(b->labels[j], id % 10);
            memcpy(out + id * 3072, (float *)b->images + (size_t)j * 3072, 3072 * sizeof(float));
            if (order) order[seen] = id;
            seen++;
        }
    }
    CHECK_INT(rc, 0);
    CHECK_INT(expect, loader_num_batches(l));
    loader_free(l);
    return seen;
}

static void test_loader_determinism(void) {
    enum { N = 203 };
    dataset_t *d = make_ds(N);
    float *ref = calloc((size_t)N * 3072, sizeof(float)), *got = calloc((size_t)N * 3072, sizeof(float));
    int64_t ref_order[N], order[N];
    loader_opts_t o = train_opts(16, 0);
    CHECK_INT(run_epoch(d, &o, 2, 0, ref, ref_order), N);
    int workers[2] = {1, 4};
    for (int w = 0; w < 2; w++) {
        o = train_opts(16, workers[w]);
        memset(got, 0, (size_t)N * 3072 * sizeof(float));
        CHECK_INT(run_epoch(d, &o, 2, 0, got, order), N);
        CHECK(memcmp(ref, got, (size_t)N * 3072 * sizeof(float)) == 0);
        CHECK(memcmp(ref_order, order, sizeof order) == 0);
    }
    /* another batch size, with 4 workers and a 3-slot ring */
    o = train_opts(7, 4);
    o.prefetch = 3;
    memset(got, 0, (size_t)N * 3072 * sizeof(float));
    CHECK_INT(run_epoch(d, &o, 2, 0, got, order), N);
    CHECK(memcmp(ref, got, (size_t)N * 3072 * sizeof(float)) == 0);
    CHECK(memcmp(ref_order, order, sizeof order) == 0);
    /* world size 2: each rank's samples are augmented as in world size 1 */
    for (int r = 0; r < 2; r++) {
        o = train_opts(8, 2);
        o.world_size = 2;
        o.rank = r;
        memset(got, 0, (size_t)N * 3072 * sizeof(float));
        int seen = run_epoch(d, &o, 2, 0, got, order);
        CHECK_INT(seen, 102);
        for (int k = 0; k < seen; k++)
            CHECK(memcmp(ref + order[k] * 3072, got + order[k] * 3072, 3072 * sizeof(float)) == 0);
    }
    /* resume at batch 5 of 13: exactly the tail of the uninterrupted epoch */
    o = train_opts(16, 2);
    memset(got, 0, (size_t)N * 3072 * sizeof(float));
    CHECK_INT(run_epoch(d, &o, 2, 5, got, order), N - 80);
    CHECK(memcmp(ref_order + 80, order, (N - 80) * sizeof(int64_t)) == 0);
    for (int k = 0; k < N - 80; k++)
        CHECK(memcmp(ref + order[k] * 3072, got + order[k] * 3072, 3072 * sizeof(float)) == 0);
    /* another epoch: other order and other augmentation */
    o = train_opts(16, 1);
    CHECK_INT(run_epoch(d, &o, 3, 0, got, order), N);
    CHECK(memcmp(ref_order, order, sizeof order) != 0);
    CHECK(memcmp(ref, got, 3072 * sizeof(float)) != 0);
    /* an augmented sample equals augment_apply + normalisation done by hand */
    {
        augment_params_t p = augment_draw(&o.augment, 32, 32, 99, 2, 11);
        uint8_t aug[3072], tmp[3072];
        augment_apply(&o.augment, &p, dataset_get(d, 11, NULL), 3, 32, 32, aug, tmp);
        float want[3072];
        augment_normalize(aug, 1024, 3, o.mean, o.std, want);
        CHECK(memcmp(want, ref + 11 * 3072, sizeof want) == 0);
    }
    free(ref);
    free(got);
    dataset_free(d);
}

static void test_eval_and_dtypes(void) {
    enum { N = 45 };
    dataset_t *d = make_ds(N);
    float *ref = calloc((size_t)N * 3072, sizeof(float));
    loader_opts_t o = train_opts(10, 2);
    o.eval = true;
    int total = 0;
    for (int r = 0; r < 4; r++) {
        o.world_size = 4;
        o.rank = r;
        total += run_epoch(d, &o, 0, 0, ref, NULL);
    }
    CHECK_INT(total, N);  /* every sample once, no padding */
    for (int i = 0; i < N; i++) {
        float want[3072];
        augment_normalize(dataset_get(d, i, NULL), 1024, 3, o.mean, o.std, want);
        CHECK(memcmp(want, ref + (size_t)i * 3072, sizeof want) == 0);
    }
    /* dtypes: same values, rounded or stored as 2-byte halves */
    loader_dtype_t dts[4] = {LOADER_F32_ROUND_F16, LOADER_F32_ROUND_BF16, LOADER_F16, LOADER_BF16};
    for (int t = 0; t < 4; t++) {
        loader_opts_t q = train_opts(N, 1);
        q.eval = true;
        q.dtype = dts[t];
        loader_t *l = NULL;
        err_t e = {0};
        CHECK_INT(loader_create(d, &q, &l, &e), 0);
        CHECK_INT(loader_start_epoch(l, 0, 0, &e), 0);
        loader_batch_t *b;
        CHECK_INT(loader_next(l, &b, &e), 1);
        CHECK_INT(b->n, N);
        int bad = 0;
        for (size_t i = 0; i < (size_t)N * 3072; i++) {
            float v = ref[i];
            switch (dts[t]) {
            case LOADER_F32_ROUND_F16: bad += ((float *)b->images)[i] != round_f16(v); break;
            case LOADER_F32_ROUND_BF16: bad += ((float *)b->images)[i] != round_bf16(v); break;
            case LOADER_F16: bad += ((uint16_t *)b->images)[i] != f32_to_f16(v); break;
            default: bad += ((uint16_t *)b->images)[i] != f32_to_bf16(v); break;
            }
        }
        CHECK_INT(bad, 0);
        CHECK_INT(loader_next(l, &b, &e), 0);
        loader_free(l);
    }
    free(ref);
    dataset_free(d);
}

typedef struct { int allocs, frees; } counter_t;
static void *count_alloc(void *ctx, size_t n) { ((counter_t *)ctx)->allocs++; return malloc(n); }
static void count_free(void *ctx, void *p) { ((counter_t *)ctx)->frees++; free(p); }

static void test_allocator_shutdown_errors(void) {
    dataset_t *d = make_ds(100);
    counter_t cnt = {0, 0};
    loader_allocator_t a = {count_alloc, count_free, &cnt};
    loader_opts_t o = train_opts(8, 3);
    o.allocator = &a;
    o.drop_last_batch = true;
    loader_t *l = NULL;
    err_t e = {0};
    CHECK_INT(loader_create(d, &o, &l, &e), 0);
    CHECK_INT(cnt.allocs, 2 * 6);  /* images + labels for 6 ring slots */
    CHECK_INT(loader_num_batches(l), 12);
    /* abandon epochs midway, with workers busy, then free */
    loader_batch_t *b;
    for (int ep = 0; ep < 3; ep++) {
        CHECK_INT(loader_start_epoch(l, ep, 0, &e), 0);
        CHECK_INT(loader_next(l, &b, &e), 1);
        CHECK_INT(b->index, 0);
        CHECK_INT(b->n, 8);
    }
    loader_free(l);
    CHECK_INT(cnt.frees, cnt.allocs);
    /* free right after create, before any epoch */
    CHECK_INT(loader_create(d, &o, &l, &e), 0);
    loader_free(l);
    /* bad options */
    o.augment.crop_size = 41;
    CHECK_INT(loader_create(d, &o, &l, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "size 41 with padding 4 does not fit a 32x32 image");
    o = train_opts(8, 0);
    o.n_norm = 2;
    CHECK_INT(loader_create(d, &o, &l, &e), -1);
    CHECK_CONTAINS(e.msg, "data.normalize has 2 values, expected 3");
    o = train_opts(200, 0);
    o.drop_last_batch = true;
    CHECK_INT(loader_create(d, &o, &l, &e), -1);
    CHECK_CONTAINS(e.msg, "make no full batch of 200");
    o = train_opts(8, 0);
    CHECK_INT(loader_create(d, &o, &l, &e), 0);
    CHECK_INT(loader_start_epoch(l, 0, 14, &e), -1);
    CHECK_CONTAINS(e.msg, "start batch 14 is outside 0..13");
    loader_free(l);
    dataset_free(d);
}

/* data_wait_s: the synchronous loader waits for every batch (it fills it); a prefetching
 * loader whose consumer is slower than the workers hands out batches already filled. */
static void test_data_wait(void) {
    dataset_t *d = make_ds(64);
    err_t e = {0};
    loader_opts_t o = train_opts(8, 0);
    loader_t *l = NULL;
    CHECK_INT(loader_create(d, &o, &l, &e), 0);
    loader_start_epoch(l, 0, 0, &e);
    loader_batch_t *b;
    double sync_wait = 0;
    while (loader_next(l, &b, &e) == 1) sync_wait += b->data_wait_s;
    loader_free(l);
    CHECK(sync_wait > 0);
    o = train_opts(8, 1);
    o.prefetch = 8;
    CHECK_INT(loader_create(d, &o, &l, &e), 0);
    loader_start_epoch(l, 0, 0, &e);
    struct timespec nap = {0, 100 * 1000 * 1000};
    nanosleep(&nap, NULL);  /* the worker fills the whole ring meanwhile */
    int fast = 0, n = 0;
    while (loader_next(l, &b, &e) == 1) {
        fast += b->data_wait_s < 0.02;
        n++;
        nanosleep(&nap, NULL);
    }
    printf("data_wait: synchronous epoch total %.4f s; prefetched batches under 20 ms: %d of %d\n",
           sync_wait, fast, n);
    CHECK_INT(n, 8);
    CHECK(fast >= 6);
    loader_free(l);
    dataset_free(d);
}

int main(void) {
    TEST_RUN(test_crop_flip);
    TEST_RUN(test_rotation_hand);
    TEST_RUN(test_rotation_torchvision);
    TEST_RUN(test_draw_and_normalize);
    TEST_RUN(test_loader_determinism);
    TEST_RUN(test_eval_and_dtypes);
    TEST_RUN(test_allocator_shutdown_errors);
    TEST_RUN(test_data_wait);
    return test_main_end();
}
