/* test_recipe_parts.c: the pieces of issue 17 that need no training run.
 * Early stopping (runner/early_stop.c) decides as PyTorch Lightning's EarlyStopping does:
 * min_delta, patience, mode auto/min/max, equal values are no improvement, a non-finite
 * value stops at once, off never stops, and a copy of the state (what a checkpoint holds)
 * continues the count. The background checkpoint writer (runner/ckpt_writer.c): a job's
 * file reads back, last.ckpt is a hard link to it, numbered files are listed newest
 * first (numerically) and pruned to keep_last, a failed write is reported by the next
 * wait (then cleared), and a killed writer's temporary files are removed at start. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/ckpt_writer.h"
#include "runner/early_stop.h"
#include "tests/test.h"

/* Feeds values (epochs 1, 2, ...) and returns the epoch that stopped (0: none). */
static int run_stop(early_stop_t *s, const double *v, int n) {
    for (int i = 0; i < n; i++)
        if (early_stop_update(s, v[i], i + 1)) return i + 1;
    return 0;
}

static void early_stopping_decisions(void) {
    early_stop_t s;
    /* val_loss, min_delta 0.1, patience 2: 0.95 is no improvement on 1.0 (needs < 0.9),
     * 0.85 is; then 0.8 and 0.79 are not (need < 0.75): stop at epoch 5 */
    early_stop_init(&s, METRIC_VAL_LOSS, STOP_MODE_AUTO, 2, 0.1);
    const double loss[] = {1.0, 0.95, 0.85, 0.8, 0.79, 0.1};
    CHECK_INT(run_stop(&s, loss, 6), 5);
    CHECK(s.minimise);
    CHECK_NEAR(s.best, 0.85, 0, 0);
    CHECK_INT(s.best_epoch, 3);
    CHECK_STR(s.reason, "early stopping: val_loss did not decrease by more than 0.1 in the last 2 evaluations "
                        "(best 0.85 at epoch 3)");
    /* a stopped state stays stopped */
    CHECK(early_stop_update(&s, 0.0, 7));
    /* val_top1 is maximised; an equal value is no improvement */
    early_stop_init(&s, METRIC_VAL_TOP1_EMA, STOP_MODE_AUTO, 1, 0.0);
    const double acc[] = {0.5, 0.5};
    CHECK_INT(run_stop(&s, acc, 2), 2);
    CHECK(!s.minimise);
    CHECK_CONTAINS(s.reason, "val_top1_ema did not increase");
    /* mode min overrides auto */
    early_stop_init(&s, METRIC_VAL_TOP1, STOP_MODE_MIN, 1, 0.0);
    const double up[] = {0.5, 0.4, 0.6};
    CHECK_INT(run_stop(&s, up, 3), 3);
    /* not finite: at once */
    early_stop_init(&s, METRIC_TRAIN_LOSS, STOP_MODE_AUTO, 100, 0.0);
    const double nan_run[] = {2.0, NAN};
    CHECK_INT(run_stop(&s, nan_run, 2), 2);
    CHECK_CONTAINS(s.reason, "train_loss = nan at epoch 2 is not finite");
    /* off */
    early_stop_init(&s, METRIC_NONE, STOP_MODE_AUTO, 1, 0.0);
    const double any[] = {1, 2, 3, NAN};
    CHECK_INT(run_stop(&s, any, 4), 0);
    /* resume: the state after epoch 2 (best, its epoch, the count) continues the count */
    early_stop_init(&s, METRIC_VAL_LOSS, STOP_MODE_AUTO, 2, 0.1);
    CHECK_INT(run_stop(&s, loss, 2), 0);
    early_stop_t saved = s, resumed;
    early_stop_init(&resumed, METRIC_VAL_LOSS, STOP_MODE_AUTO, 2, 0.1);
    resumed.best = saved.best;
    resumed.best_epoch = saved.best_epoch;
    resumed.wait = saved.wait;
    CHECK(!early_stop_update(&resumed, 0.85, 3));
    CHECK(!early_stop_update(&resumed, 0.8, 4));
    CHECK(early_stop_update(&resumed, 0.79, 5));
}

/* A job writing dir/name with one section of n floats, linked as last.ckpt. */
static int submit(ckpt_writer_t *w, const char *dir, const char *name, float value, int keep, const char *prefix,
                  err_t *e) {
    float *b = ckpt_writer_buffer(w, 1000 * sizeof(float), e);
    if (!b) return -1;
    for (int i = 0; i < 1000; i++) b[i] = value;
    ckpt_job_t j;
    memset(&j, 0, sizeof j);
    snprintf(j.path, sizeof j.path, "%s/%s", dir, name);
    snprintf(j.links[0], sizeof j.links[0], "%s/last.ckpt", dir);
    if (keep > 0) {
        snprintf(j.prune_dir, sizeof j.prune_dir, "%s", dir);
        snprintf(j.prune_prefix, sizeof j.prune_prefix, "%s", prefix);
        j.prune_keep = keep;
    }
    j.n = 2;
    snprintf(j.sections[0].name, CKPT_NAME_MAX, "meta");
    char *meta = strdup("{\"step\": 1}");
    j.owned[0] = meta;
    j.sections[0].data = meta;
    j.sections[0].size = strlen(meta);
    snprintf(j.sections[1].name, CKPT_NAME_MAX, "params");
    j.sections[1].data = b;
    j.sections[1].size = 1000 * sizeof(float);
    j.config_hash = 42;
    return ckpt_writer_submit(w, &j, e);
}

static void checkpoint_writer(void) {
    char dir[512], path[1024], leftover[1024];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    snprintf(leftover, sizeof leftover, "%s/last.ckpt.tmp-12345", dir);
    test_write_file(leftover, "half a checkpoint");
    err_t e = {0};
    ckpt_writer_t *w = ckpt_writer_create(NULL, dir, &e);
    CHECK(w != NULL);
    if (!w) return;
    CHECK(access(leftover, F_OK) != 0);
    const int steps[] = {2, 4, 6, 8, 10};
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "step_%d.ckpt", steps[i]);
        CHECK_INT(submit(w, dir, name, (float)steps[i], 2, "step_", &e), 0);
    }
    CHECK_INT(ckpt_writer_wait(w, &e), 0);
    int64_t nums[8];
    CHECK_INT(ckpt_list_numbered(dir, "step_", nums, 8), 2);
    CHECK_INT(nums[0], 10);
    CHECK_INT(nums[1], 8);
    /* last.ckpt is the newest file, as a hard link, and reads back */
    struct stat a, b;
    snprintf(path, sizeof path, "%s/last.ckpt", dir);
    CHECK_INT(stat(path, &a), 0);
    snprintf(path, sizeof path, "%s/step_10.ckpt", dir);
    CHECK_INT(stat(path, &b), 0);
    CHECK(a.st_ino == b.st_ino);
    ckpt_t *c = ckpt_read(path, &e);
    CHECK(c != NULL);
    if (c) {
        float v[1000];
        CHECK_INT(ckpt_get(c, "params", v, sizeof v, &e), 0);
        CHECK(v[0] == 10.0f && v[999] == 10.0f);
        CHECK_INT(c->config_hash, 42);
        ckpt_free(c);
    }
    /* numeric order: epoch_10 is newer than epoch_9 */
    CHECK_INT(submit(w, dir, "epoch_9.ckpt", 9, 0, "", &e), 0);
    CHECK_INT(submit(w, dir, "epoch_10.ckpt", 10, 0, "", &e), 0);
    CHECK_INT(ckpt_writer_wait(w, &e), 0);
    CHECK_INT(ckpt_list_numbered(dir, "epoch_", nums, 8), 2);
    CHECK_INT(nums[0], 10);
    /* a write that fails is reported by the next wait, once */
    char missing[700];
    snprintf(missing, sizeof missing, "%s/no/such/dir", dir);
    CHECK_INT(submit(w, missing, "step_12.ckpt", 12, 0, "", &e), 0);
    CHECK_INT(ckpt_writer_wait(w, &e), -1);
    CHECK_CONTAINS(e.msg, "step_12.ckpt");
    err_clear(&e);
    CHECK_INT(ckpt_writer_wait(w, &e), 0);
    ckpt_writer_free(w);
}

int main(void) {
    TEST_RUN(early_stopping_decisions);
    TEST_RUN(checkpoint_writer);
    return test_main_end();
}
