/* test_dist_aug.c: issue 17's data recipe end to end on the CPU: runs with
 * RandAugment / TrivialAugmentWide, random erasing (each mode) and mixup / cutmix (each
 * mode) on, in single (fp16 AMP, two micro-batches per step), DP (2 replicas) and DDP
 * (2 ranks, bf16 AMP), are interrupted with SIGINT mid-epoch and resumed with
 * `runner resume`, and end BIT-identical to the uninterrupted run: params, BN buffers and
 * momentum of last.ckpt, every steps.csv loss/accuracy and every metrics row up to its
 * timing columns. That holds only if every draw (auto-augment ops, erasing boxes and
 * values, mixup lam/boxes) is keyed by where the sample or micro-batch is, not by how
 * far the process got. Also: resolved.yaml carries the keys, and the soft-target loss
 * shows (train top-1 is scored against the dominant label, and the recipe changes the
 * trained weights). */
#include "tests/dist/dist_util.h"

#include <signal.h>

static char tmp[512];

static const char *base =
    "name: %s\n"
    "seed: 5\n"
    "device: cpu\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 320, val_size: 16, image: [3, 8, 8], classes: 4}\n"
    "  workers: 1\n"
    "  augment: {random_crop: {size: 8, padding: 1}, horizontal_flip: true, rotation: 0, %s}\n"
    "  mixup: %s\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.01, momentum: 0.9, weight_decay: 5.0e-4}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: 2, batch_size: 8, label_smoothing: 0.1%s}\n"
    "%s\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 1, resume: never}\n";

/* Reference run, interrupted run, resume; then the bitwise comparisons. */
static void interrupt_resume(const char *name, const char *aug, const char *mixup, const char *train_extra,
                             const char *rest, int steps_total) {
    char exp[700], text[4096], root[800], log[800];
    snprintf(text, sizeof text, base, name, aug, mixup, train_extra, rest);
    snprintf(exp, sizeof exp, "%s/%s.yaml", tmp, name);
    test_write_file(exp, text);
    snprintf(root, sizeof root, "%s/ref", tmp);
    const char *r = dist_run(exp, root, "", 0);
    CHECK(r != NULL);
    if (!r) return;
    char ref[4096];
    snprintf(ref, sizeof ref, "%s", r);
    CHECK_INT(cli_json_number(ref, "summary.json", "steps"), steps_total);

    snprintf(root, sizeof root, "%s/int", tmp);
    snprintf(log, sizeof log, "%s/%s.log", tmp, name);
    char dir[4096];
    int rc = cli_interrupt_at(exp, root, log, name, NULL, 0, 3, SIGINT, dir, sizeof dir);   /* after 3 steps */
    CHECK_INT(rc, 130);
    CHECK(dir[0] != '\0');
    if (!dir[0] || rc != 130) return;
    double stopped = cli_json_number(dir, "summary.json", "steps");
    fprintf(stderr, "  %s: interrupted at step %g of %d\n", name, stopped, steps_total);
    CHECK(stopped >= 3 && stopped < steps_total);

    char args[4400], out[1 << 16];
    snprintf(args, sizeof args, "resume %s", dir);
    rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "%s\n", out);
        return;
    }
    CHECK_INT(cli_json_number(dir, "summary.json", "steps"), steps_total);
    const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
    dist_check_same_sections(dir, ref, sections, 3);   /* bit for bit */
    char a[4300], b[4300];
    snprintf(b, sizeof b, "%s/steps.csv", dir);
    CHECK_INT(dist_count_lines(b), steps_total + 1);
    dist_check_same_cells(ref, dir, "steps.csv", 1, steps_total, 3, 4);   /* loss, top1 */
    dist_check_same_cells(ref, dir, "metrics.csv", 1, 2, 0, 7);
    snprintf(a, sizeof a, "%s/resolved.yaml", ref);
    char *y = test_read_file(a, NULL);
    CHECK_CONTAINS(y, "  mixup:\n");
    CHECK_CONTAINS(y, "    random_erasing:\n");
    free(y);
}

/* single, fp16 AMP on the CPU, 2 micro-batches per step (each mixed on its own) */
static void single_amp(void) {
    interrupt_resume("single",
                     "auto: randaugment, randaugment: {num_ops: 2, magnitude: 9}, "
                     "random_erasing: {prob: 0.5, mode: pixel}",
                     "{alpha: 0.2, cutmix_alpha: 1.0, mode: elem}", ", grad_accum: 2",
                     "amp: {enabled: true, dtype: fp16, init_scale: 1024}\nparallel: {mode: single}", 80);
}

/* DP: the whole micro-batch mixed on the host, then scattered */
static void dp_mode(void) {
    interrupt_resume("dp", "auto: trivialaugment, random_erasing: {prob: 0.6, mode: rand, count: 2}",
                     "{alpha: 0.0, cutmix_alpha: 1.0, mode: pair, prob: 0.8}", "",
                     "parallel: {mode: dp, world_size: 2}", 80);
}

/* DDP: each rank mixes its own micro-batch with its own key */
static void ddp_mode(void) {
    interrupt_resume("ddp",
                     "auto: randaugment, randaugment: {num_ops: 3, magnitude: 14}, "
                     "random_erasing: {prob: 0.5, mode: const}",
                     "{alpha: 0.4, cutmix_alpha: 1.0, switch_prob: 0.3, mode: batch}", "",
                     "amp: {enabled: true, dtype: bf16}\nparallel: {mode: ddp, world_size: 2}", 80);
}

/* The soft-target path is what trains: the recipe's weights differ from the same run
 * without it, and the train top-1 (dominant label) stays a fraction in [0, 1]. */
/* Runs a one-epoch single-mode variant of the base experiment; its run dir (slot) or NULL. */
static const char *one_epoch(const char *name, const char *aug, const char *mixup, int slot) {
    char exp[700], text[4096], root[800];
    snprintf(text, sizeof text, base, name, aug, mixup, "", "parallel: {mode: single}");
    snprintf(exp, sizeof exp, "%s/%s.yaml", tmp, name);
    test_write_file(exp, text);
    snprintf(root, sizeof root, "%s/%s", tmp, name);
    return dist_run(exp, root, "--set train.epochs=1", slot);
}

static void recipe_changes_training(void) {
    const char *p = one_epoch("plain", "auto: null", "{alpha: 0.0, cutmix_alpha: 0.0}", 1);
    const char *m = one_epoch("mixed", "auto: null", "{alpha: 1.0, cutmix_alpha: 0.0}", 2);
    CHECK(p && m);
    if (!p || !m) return;
    double worst;
    CHECK(dist_compare_section(p, m, "params", 0, 0, &worst) > 0);
    double top1 = cli_json_number(m, "summary.json", "train_top1");
    CHECK(top1 >= 0 && top1 <= 1);
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(single_amp);
    TEST_RUN(dp_mode);
    TEST_RUN(ddp_mode);
    TEST_RUN(recipe_changes_training);
    int rc = test_main_end();
    test_remove_dir_if_passed(tmp);
    return rc;
}
