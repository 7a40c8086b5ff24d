/* test_sampler.c: DistributedSampler semantics (sizes, padding, order, disjointness, epoch
 * dependence), the exact-once evaluation split, and determinism. Expected index lists for
 * shuffle=false were printed by torch.utils.data.DistributedSampler (PyTorch 1.13). */
#include <stdlib.h>
#include <string.h>

#include "data/sampler.h"
#include "tests/test.h"

typedef struct {
    int n, w, drop_last, per_rank;
    int idx[8][4];
} golden_t;

/* list(DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=False, drop_last=dl)) */
static const golden_t golden[] = {
    {10, 3, 0, 4, {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}},
    {10, 3, 1, 3, {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}}},
    {2, 4, 0, 1, {{0}, {1}, {0}, {1}}},
    {7, 7, 1, 1, {{0}, {1}, {2}, {3}, {4}, {5}, {6}}},
    {5, 2, 0, 3, {{0, 2, 4}, {1, 3, 0}}},
    {1, 3, 0, 1, {{0}, {0}, {0}}},
    {9, 4, 1, 2, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
};

static void test_unshuffled_matches_pytorch(void) {
    err_t e = {0};
    for (size_t g = 0; g < sizeof golden / sizeof golden[0]; g++) {
        const golden_t *t = &golden[g];
        CHECK_INT(sampler_num_samples(t->n, t->w, t->drop_last), t->per_rank);
        for (int r = 0; r < t->w; r++) {
            sampler_t s;
            sampler_opts_t o = {t->n, t->w, r, false, t->drop_last, false, 1};
            CHECK_INT(sampler_init(&s, &o, &e), 0);
            CHECK_INT(sampler_set_epoch(&s, 3, &e), 0);
            CHECK_INT(s.num_samples, t->per_rank);
            CHECK_INT(s.total_size, t->per_rank * t->w);
            for (int k = 0; k < t->per_rank; k++) CHECK_INT(s.indices[k], t->idx[r][k]);
            sampler_deinit(&s);
        }
    }
}

/* Shuffled: per (N, W, drop_last): sizes by the rule, union over ranks = the epoch's
 * permutation padded from its start (or truncated), ranks disjoint except padding. */
static void test_shuffled_properties(void) {
    int cases[][3] = {{100, 1, 0}, {100, 3, 0}, {100, 3, 1}, {101, 4, 0}, {101, 4, 1},
                      {7, 8, 0}, {50000, 8, 0}, {3, 2, 1}};
    err_t e = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c][0], w = cases[c][1], dl = cases[c][2];
        int64_t per = dl ? n / w : (n + w - 1) / w;
        CHECK_INT(sampler_num_samples(n, w, dl), per);
        int64_t total = per * w;
        int64_t *order = malloc(sizeof(int64_t) * (size_t)total);
        int *count = calloc((size_t)n, sizeof(int));
        for (int r = 0; r < w; r++) {
            sampler_t s;
            sampler_opts_t o = {n, w, r, true, dl, false, 1234};
            CHECK_INT(sampler_init(&s, &o, &e), 0);
            CHECK_INT(sampler_set_epoch(&s, 5, &e), 0);
            CHECK_INT(s.num_samples, per);
            for (int64_t k = 0; k < per; k++) {
                order[r + k * w] = s.indices[k];
                CHECK(s.indices[k] >= 0 && s.indices[k] < n);
                count[s.indices[k]]++;
            }
            sampler_deinit(&s);
        }
        /* the first min(n, total) positions are a permutation prefix: all distinct */
        int64_t distinct = total < n ? total : n;
        int64_t seen = 0;
        for (int i = 0; i < n; i++) seen += count[i] > 0;
        CHECK_INT(seen, distinct);
        /* padding repeats the order from its start */
        for (int64_t p = n; p < total; p++) CHECK_INT(order[p], order[p % n]);
        if (!dl && n >= w) for (int i = 0; i < n; i++) CHECK(count[i] == 1 || count[i] == 2);
        if (dl) for (int i = 0; i < n; i++) CHECK(count[i] <= 1);
        free(order);
        free(count);
    }
}

static void test_epoch_and_seed(void) {
    err_t e = {0};
    sampler_t a, b;
    sampler_opts_t o = {1000, 2, 1, true, false, false, 42};
    CHECK_INT(sampler_init(&a, &o, &e), 0);
    CHECK_INT(sampler_init(&b, &o, &e), 0);
    sampler_set_epoch(&a, 0, &e);
    sampler_set_epoch(&b, 0, &e);
    CHECK(memcmp(a.indices, b.indices, 500 * sizeof(int64_t)) == 0);
    sampler_set_epoch(&b, 1, &e);
    int same = 0;
    for (int i = 0; i < 500; i++) same += a.indices[i] == b.indices[i];
    CHECK(same < 20);
    sampler_set_epoch(&b, 0, &e);  /* back to epoch 0: identical again */
    CHECK(memcmp(a.indices, b.indices, 500 * sizeof(int64_t)) == 0);
    sampler_deinit(&b);
    o.seed = 43;
    CHECK_INT(sampler_init(&b, &o, &e), 0);
    sampler_set_epoch(&b, 0, &e);
    same = 0;
    for (int i = 0; i < 500; i++) same += a.indices[i] == b.indices[i];
    CHECK(same < 20);
    sampler_deinit(&a);
    sampler_deinit(&b);
}

static void test_eval_split(void) {
    err_t e = {0};
    int cases[][2] = {{10, 3}, {10000, 8}, {2, 4}, {7, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c][0], w = cases[c][1];
        int *count = calloc((size_t)n, sizeof(int));
        int64_t next = 0;
        for (int r = 0; r < w; r++) {
            sampler_t s;
            sampler_opts_t o = {n, w, r, true, true, true, 9};
            CHECK_INT(sampler_init(&s, &o, &e), 0);
            CHECK_INT(sampler_set_epoch(&s, 2, &e), 0);
            CHECK_INT(s.num_samples, n / w + (r < n % w));
            for (int64_t k = 0; k < s.num_samples; k++) {
                CHECK_INT(s.indices[k], next); /* contiguous, in order */
                next++;
                count[s.indices[k]]++;
            }
            sampler_deinit(&s);
        }
        CHECK_INT(next, n);
        for (int i = 0; i < n; i++) CHECK_INT(count[i], 1);
        free(count);
    }
    int64_t b, cnt;
    sampler_eval_range(10, 3, 2, &b, &cnt);
    CHECK_INT(b, 7);
    CHECK_INT(cnt, 3);
}

static void test_errors(void) {
    err_t e = {0};
    sampler_t s;
    sampler_opts_t o = {10, 2, 2, true, false, false, 1};
    CHECK_INT(sampler_init(&s, &o, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "rank 2 is outside world size 2");
    sampler_opts_t o2 = {3, 4, 0, true, true, false, 1};
    CHECK_INT(sampler_init(&s, &o2, &e), -1);
    CHECK_CONTAINS(e.msg, "3 samples cannot be split over 4 ranks with drop_last");
}

int main(void) {
    TEST_RUN(test_unshuffled_matches_pytorch);
    TEST_RUN(test_shuffled_properties);
    TEST_RUN(test_epoch_and_seed);
    TEST_RUN(test_eval_split);
    TEST_RUN(test_errors);
    return test_main_end();
}
