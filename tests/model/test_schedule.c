/* test_schedule.c: schedule_lr at chosen steps for every schedule, with and without
 * warmup (formulas in model/schedule.h). */
#include "model/schedule.h"
#include "tests/test.h"

static void test_warmup_then_constant(void) {
    schedule_t s = {.kind = SCHEDULE_CONSTANT, .base_lr = 0.4, .warmup_epochs = 2, .epochs = 10};
    /* S = 5 steps per epoch: W = 10 warmup steps */
    CHECK_INT(schedule_warmup_steps(&s, 5), 10);
    CHECK_NEAR(schedule_lr(&s, 0, 5), 0.04, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 4, 5), 0.2, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 9, 5), 0.4, 1e-15, 0);   /* last warmup step reaches base */
    CHECK_NEAR(schedule_lr(&s, 10, 5), 0.4, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 1000, 5), 0.4, 1e-15, 0);
    /* fractional warmup: 0.5 epoch of 7 steps rounds to 4 steps */
    s.warmup_epochs = 0.5;
    CHECK_INT(schedule_warmup_steps(&s, 7), 4);
    CHECK_NEAR(schedule_lr(&s, 0, 7), 0.1, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 3, 7), 0.4, 1e-15, 0);
}

static void test_multistep(void) {
    schedule_t s = {.kind = SCHEDULE_MULTISTEP, .base_lr = 0.1, .warmup_epochs = 1, .epochs = 200,
                    .n_milestones = 3, .milestones = {60, 120, 160}, .gamma = 0.2};
    int64_t S = 391;  /* CIFAR, batch 128 */
    CHECK_NEAR(schedule_lr(&s, 0, S), 0.1 / 391, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 390, S), 0.1, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 391, S), 0.1, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 60 * S - 1, S), 0.1, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 60 * S, S), 0.02, 1e-15, 1e-12);
    CHECK_NEAR(schedule_lr(&s, 120 * S, S), 0.004, 1e-15, 1e-12);
    CHECK_NEAR(schedule_lr(&s, 160 * S + 5, S), 0.0008, 1e-15, 1e-12);
    /* no warmup: step 0 is already base */
    s.warmup_epochs = 0;
    CHECK_NEAR(schedule_lr(&s, 0, S), 0.1, 1e-15, 0);
}

static void test_cosine(void) {
    schedule_t s = {.kind = SCHEDULE_COSINE, .base_lr = 1.0, .warmup_epochs = 1, .epochs = 11,
                    .min_lr = 0.1};
    /* S = 10: W = 10, T = 110, the cosine spans steps 10..110 */
    CHECK_NEAR(schedule_lr(&s, 9, 10), 1.0, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 10, 10), 1.0, 1e-15, 0);
    CHECK_NEAR(schedule_lr(&s, 60, 10), 0.55, 1e-12, 0);         /* halfway */
    CHECK_NEAR(schedule_lr(&s, 35, 10), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.25)), 1e-12, 0);
    CHECK_NEAR(schedule_lr(&s, 110, 10), 0.1, 1e-12, 0);
    CHECK_NEAR(schedule_lr(&s, 500, 10), 0.1, 1e-12, 0);         /* clamped past the end */
    CHECK_STR(schedule_kind_names[SCHEDULE_COSINE], "cosine");
}

int main(void) {
    TEST_RUN(test_warmup_then_constant);
    TEST_RUN(test_multistep);
    TEST_RUN(test_cosine);
    return test_main_end();
}
