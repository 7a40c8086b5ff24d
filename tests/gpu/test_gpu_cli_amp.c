/* test_gpu_cli_amp.c: mixed precision on the GPU through the CLI. Skipped (77) without a
 * GPU; see gpu_cli_util.h for the CPU dry run.
 *
 * The experiment: resnet20 on synthetic 3x32x32 images of 4 classes (320 train, 64 val,
 * no augmentation), global batch 16 (20 steps per epoch), SGD lr 0.02 momentum 0.9,
 * amp.enabled with amp.init_scale 1e10 (the schema's upper bound; exactly representable
 * in float, so every halving is exact) and amp.growth_interval 1000 (no growth within
 * the run), one steps.csv row per step.
 *
 *  1. fp16, train.max_steps 3: with the loss gradient scaled by 1e10 / 16 the fp16 logits
 *     gradient overflows (fp16 max 65504), so every one of the 3 steps is skipped:
 *     steps.csv's loss_scale halves from row to row (the first row is 1e10 or 5e9,
 *     whichever of "scale used" and "scale after the step" the row records), the losses
 *     are finite, the checkpoint's meta says loss_scale 1.25e9 (three halvings),
 *     optim_steps 0 and step 3, the params of last.ckpt are BIT FOR BIT the step-0 init
 *     (net_init on the host with the same seed, which is what every backend starts from)
 *     and the momentum buffer is all zeros.
 *  2. fp16, all 20 steps: each row's scale is the previous one or half of it (never
 *     more: growth_interval 1000), the first 3 rows halve, and the scale settles: with K
 *     halvings in all (from meta.loss_scale = 1e10 / 2^K), 3 <= K <= 19 and
 *     meta.optim_steps == 20 - K (a skipped step is not an optimizer step), and training
 *     moved the weights away from the init. (On the CPU backend's fp16 emulation K is 13.)
 *  3. bf16, 20 steps: no loss scaling (the loss_scale cells are empty), meta.optim_steps
 *     20 and loss_scale 1, precision bf16 in summary.json; and it learns: the mean loss of
 *     steps 16-20 is below half that of steps 1-5 (the CPU's bf16 emulation: 1.35 -> 0.14)
 *     and their mean top-1 is at least 0.75 (CPU: 1.0; chance is 0.25).
 */
#include "tests/gpu/gpu_cli_util.h"

enum { STEPS = 20, SEED = 11, CLASSES = 4, HW = 32 };
static const double INIT_SCALE = 1e10;

static char exp_path[700];

static const char *exp_yaml =
    "name: amp\n"
    "seed: 11\n"
    "device: %s\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 320, val_size: 64, image: [3, 32, 32], classes: 4}\n"
    "  workers: 2\n"
    "  augment: {random_crop: false, horizontal_flip: false, rotation: 0}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.02, momentum: 0.9, weight_decay: 5.0e-4}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: 1, batch_size: 16, deterministic: true}\n"
    "amp: {enabled: true, dtype: fp16, init_scale: 1.0e10, growth_interval: 1000, tf32: false}\n"
    "parallel: {mode: single}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 1, resume: never}\n";

/* Exact up to the 10 significant digits steps.csv prints. */
static bool same_scale(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

/* 1 */
static void fp16_overflow_skips_steps(void) {
    char d[4096];
    const char *dir = gc_run(exp_path, "fp16_3", "--set train.max_steps=3", d, sizeof d);
    CHECK(dir != NULL);
    if (!dir) return;
    char buf[64];
    CHECK_STR(gc_json_string(dir, "summary.json", "precision", buf, sizeof buf), "fp16");
    CHECK_STR(gc_json_string(dir, "summary.json", "device", buf, sizeof buf), gc_dev);
    CHECK_INT(cli_json_number(dir, "summary.json", "steps"), 3);
    double s[8], loss[8];
    CHECK_INT(gc_csv_column(dir, "steps.csv", "loss_scale", s, 8), 3);
    CHECK_INT(gc_csv_column(dir, "steps.csv", "loss", loss, 8), 3);
    if (test_failures_) return;
    fprintf(stderr, "  loss_scale column: %.10g %.10g %.10g; losses %.6g %.6g %.6g\n", s[0], s[1], s[2], loss[0],
            loss[1], loss[2]);
    CHECK(same_scale(s[0], INIT_SCALE) || same_scale(s[0], INIT_SCALE / 2));
    CHECK(same_scale(s[1], s[0] / 2));
    CHECK(same_scale(s[2], s[1] / 2));
    for (int i = 0; i < 3; i++) CHECK(isfinite(loss[i]) && loss[i] > 0);
    double ms = cli_meta_number(dir, "loss_scale");
    fprintf(stderr, "  checkpoint meta: loss_scale %.10g, optim_steps %g, step %g\n", ms,
            cli_meta_number(dir, "optim_steps"), cli_meta_number(dir, "step"));
    CHECK(same_scale(ms, INIT_SCALE / 8));
    CHECK_INT(cli_meta_number(dir, "optim_steps"), 0);
    CHECK_INT(cli_meta_number(dir, "step"), 3);
    /* no step was taken: the weights are still the initial ones, bit for bit */
    size_t np = 0, ni = 0, nm = 0;
    float *p = gc_section(dir, "params", &np);
    float *init = gc_init_params("resnet20", 3, CLASSES, HW, SEED, &ni);
    float *mom = gc_section(dir, "optim.momentum_buffer", &nm);
    CHECK(p && init && mom);
    if (p && init && mom) {
        CHECK_INT(np, ni);
        CHECK_INT(nm, np);
        size_t diff = 0, nonzero = 0;
        for (size_t i = 0; i < np && i < ni; i++) diff += memcmp(&p[i], &init[i], sizeof(float)) != 0;
        for (size_t i = 0; i < nm; i++) nonzero += mom[i] != 0.0f;
        fprintf(stderr, "  %zu of %zu params differ from the init; %zu momentum values are not 0\n", diff, np, nonzero);
        CHECK_INT(diff, 0);
        CHECK_INT(nonzero, 0);
    }
    free(p);
    free(init);
    free(mom);
}

/* 2 */
static void fp16_scale_settles(void) {
    char d[4096];
    const char *dir = gc_run(exp_path, "fp16_20", NULL, d, sizeof d);
    CHECK(dir != NULL);
    if (!dir) return;
    double s[32], loss[32];
    CHECK_INT(gc_csv_column(dir, "steps.csv", "loss_scale", s, 32), STEPS);
    CHECK_INT(gc_csv_column(dir, "steps.csv", "loss", loss, 32), STEPS);
    if (test_failures_) return;
    int halvings = 0;
    fprintf(stderr, "  loss_scale column:");
    for (int k = 0; k < STEPS; k++) fprintf(stderr, " %.6g", s[k]);
    fprintf(stderr, "\n");
    CHECK(same_scale(s[0], INIT_SCALE) || same_scale(s[0], INIT_SCALE / 2));
    for (int k = 1; k < STEPS; k++) {
        bool half = same_scale(s[k], s[k - 1] / 2), same = same_scale(s[k], s[k - 1]);
        if (!half && !same) fprintf(stderr, "  row %d: scale %.10g after %.10g\n", k + 1, s[k], s[k - 1]);
        CHECK(half || same);
        if (k < 3) CHECK(half);
        halvings += half;
    }
    for (int k = 0; k < STEPS; k++) CHECK(isfinite(loss[k]));
    double ms = cli_meta_number(dir, "loss_scale");
    int K = (int)lround(log2(INIT_SCALE / ms));
    double steps_taken = cli_meta_number(dir, "optim_steps");
    fprintf(stderr, "  %d halvings between rows; checkpoint: loss_scale %.10g = 1e10 / 2^%d, optim_steps %g\n",
            halvings, ms, K, steps_taken);
    CHECK(same_scale(ms, ldexp(INIT_SCALE, -K)));
    CHECK(K >= 3 && K <= STEPS - 1);
    CHECK_INT(steps_taken, STEPS - K);
    /* the steps that were taken moved the weights */
    size_t np = 0, ni = 0;
    float *p = gc_section(dir, "params", &np);
    float *init = gc_init_params("resnet20", 3, CLASSES, HW, SEED, &ni);
    CHECK(p && init && np == ni);
    if (p && init && np == ni) {
        size_t moved = 0;
        for (size_t i = 0; i < np; i++) moved += p[i] != init[i];
        fprintf(stderr, "  %zu of %zu params moved\n", moved, np);
        CHECK(moved > np / 2);
    }
    free(p);
    free(init);
}

/* 3 */
static void bf16_trains_without_scaling(void) {
    char d[4096];
    const char *dir = gc_run(exp_path, "bf16", "--set amp.dtype=bf16", d, sizeof d);
    CHECK(dir != NULL);
    if (!dir) return;
    char buf[64];
    CHECK_STR(gc_json_string(dir, "summary.json", "precision", buf, sizeof buf), "bf16");
    CHECK_STR(gc_json_string(dir, "summary.json", "status", buf, sizeof buf), "completed");
    CHECK_STR(gc_json_string(dir, "summary.json", "device", buf, sizeof buf), gc_dev);
    double s[32], loss[32], top1[32];
    CHECK_INT(gc_csv_column(dir, "steps.csv", "loss_scale", s, 32), STEPS);
    CHECK_INT(gc_csv_column(dir, "steps.csv", "loss", loss, 32), STEPS);
    CHECK_INT(gc_csv_column(dir, "steps.csv", "top1", top1, 32), STEPS);
    if (test_failures_) return;
    int scaled = 0;
    for (int k = 0; k < STEPS; k++) scaled += !isnan(s[k]);
    CHECK_INT(scaled, 0);
    CHECK_INT(cli_meta_number(dir, "optim_steps"), STEPS);
    CHECK(cli_meta_number(dir, "loss_scale") == 1.0);
    double first = 0, last = 0, last_top1 = 0;
    for (int k = 0; k < 5; k++) {
        first += loss[k] / 5;
        last += loss[STEPS - 5 + k] / 5;
        last_top1 += top1[STEPS - 5 + k] / 5;
    }
    fprintf(stderr, "  bf16: mean loss of steps 1-5 %.4f, of steps 16-20 %.4f (top-1 %.3f)\n", first, last, last_top1);
    for (int k = 0; k < STEPS; k++) CHECK(isfinite(loss[k]));
    CHECK(last < 0.5 * first);
    CHECK(last_top1 >= 0.75);
}

int main(void) {
    gc_setup();
    gc_write_exp(exp_path, sizeof exp_path, "amp", exp_yaml, gc_dev);
    TEST_RUN(fp16_overflow_skips_steps);
    TEST_RUN(fp16_scale_settles);
    TEST_RUN(bf16_trains_without_scaling);
    return gc_finish();
}
