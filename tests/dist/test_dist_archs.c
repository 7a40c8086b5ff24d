/* test_dist_archs.c: dropout in a whole run follows the sample, not the process: a Wide
 * ResNet with dropout 0.3 (wrn16_8 at width 1, 8x8 synthetic images, shuffled, no
 * augmentation (test_dist_equivalence.c says why), global batch 8, 10 steps) trained
 *   - in DDP with 2 ranks (shm) and SyncBN ends at the weights of one process, and DP with
 *     2 replicas at those of one process with train.grad_accum 2 (each replica / micro-
 *     batch normalises its 4 samples), within test_dist_equivalence's bound (relative L2
 *     1e-4 over all params: the gradient sums differ in rounding only). A mask that
 *     depended on the rank, replica or micro-batch instead of the sample would move them
 *     like the control does: the same one-process run with dropout 0.2 instead of 0.3
 *     lands more than 1e-3 away;
 *   - interrupted by SIGINT in the middle of its first epoch and resumed (`runner resume`)
 *     ends BIT-identical to the uninterrupted run: params, BN buffers, momentum and the
 *     final metrics row; so does a 2-rank DDP run with 2 loader workers against the
 *     uninterrupted DDP run.
 */
#include "tests/dist/dist_util.h"

#include <signal.h>

static char tmp[512];

/* dist_util.h's base experiment (40 samples, batch 8, 2 epochs: 10 steps), one process,
 * with the Wide ResNet: these keys on every run. */
#define WRN "--set parallel.mode=single --set parallel.world_size=1 --set model.arch=wrn16_8 " \
            "--set model.width=1 --set model.dropout=0.3 "

static char exp_path[700];
static char single_dir[4096];

static const char *run(const char *sets, int slot) {
    char root[700], all[1000];
    snprintf(root, sizeof root, "%s/r%d", tmp, slot);
    snprintf(all, sizeof all, WRN "%s", sets ? sets : "");
    return dist_run(exp_path, root, all, slot);
}

static void ddp_and_dp_equal_one_process(void) {
    const char *s = run(NULL, 0);
    CHECK(s != NULL);
    if (!s) return;
    snprintf(single_dir, sizeof single_dir, "%s", s);
    const char *ddp = run("--set parallel.mode=ddp --set parallel.world_size=2 --set parallel.sync_bn=true", 1);
    const char *dp = run("--set parallel.mode=dp --set parallel.world_size=2", 2);
    const char *acc = run("--set train.grad_accum=2", 5);
    const char *control = run("--set model.dropout=0.2", 3);
    CHECK(ddp && dp && acc && control);
    if (!ddp || !dp || !acc || !control) return;
    double m, rel;
    CHECK(dist_compare_section2(ddp, single_dir, "params", INFINITY, 0, &m, &rel) >= 0);
    printf("ddp (2 ranks, SyncBN) vs one process: params relative L2 %.3g\n", rel);
    CHECK(rel <= 1e-4);
    CHECK(dist_compare_section2(dp, acc, "params", INFINITY, 0, &m, &rel) >= 0);
    printf("dp (2 replicas) vs one process with grad_accum 2: params relative L2 %.3g\n", rel);
    CHECK(rel <= 1e-4);
    CHECK(dist_compare_section2(control, single_dir, "params", INFINITY, 0, &m, &rel) >= 0);
    printf("control (dropout 0.2 instead of 0.3) vs one process: params relative L2 %.3g\n", rel);
    CHECK(rel >= 1e-3);
}

/* SIGINT after step 3 of 10 (epoch 1 has 5), then `runner resume`: bit for bit. */
static void interrupted_and_resumed_is_bit_exact(const char *const *sets, int n, int slot, const char *ref) {
    char root[700], log[800], dir[4096], args[4400];
    snprintf(root, sizeof root, "%s/i%d", tmp, slot);
    snprintf(log, sizeof log, "%s/i%d.log", tmp, slot);
    const char *all[8] = {"parallel.mode=single", "parallel.world_size=1", "model.arch=wrn16_8", "model.width=1",
                          "model.dropout=0.3"};
    int k = 5;
    for (int i = 0; i < n && k < 8; i++) all[k++] = sets[i];
    CHECK_INT(cli_interrupt_at(exp_path, root, log, "da", all, k, 3, SIGINT, dir, sizeof dir), 130);
    CHECK(dir[0] != '\0');
    if (!dir[0]) return;
    static char out[1 << 16];
    snprintf(args, sizeof args, "resume %s", dir);
    int rc = run_runner(args, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    if (!sets) CHECK_CONTAINS(out, "continuing at step");   /* DDP: in the ranks' logs */
    char plan[4400];
    snprintf(plan, sizeof plan, "%s/plan.json", dir);
    char *pj = test_read_file(plan, NULL);
    CHECK_CONTAINS(pj, sets ? "\"mode\": \"ddp\"" : "\"mode\": \"single\"");
    free(pj);
    const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
    dist_check_same_sections(dir, ref, sections, 3);
    dist_check_same_cells(dir, ref, "metrics.csv", 2, 2, 0, 6);
}

static void resume_single(void) {
    if (single_dir[0]) interrupted_and_resumed_is_bit_exact(NULL, 0, 0, single_dir);
}

static void resume_ddp_two_workers(void) {
    const char *ref = run("--set parallel.mode=ddp --set parallel.world_size=2 --set data.workers=2", 4);
    CHECK(ref != NULL);
    if (ref) {
        char copy[4096];
        snprintf(copy, sizeof copy, "%s", ref);
        const char *sets[] = {"parallel.mode=ddp", "parallel.world_size=2", "data.workers=2"};
        interrupted_and_resumed_is_bit_exact(sets, 3, 1, copy);
    }
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    dist_write_exp(exp_path, sizeof exp_path, tmp, "da", true, "{random_crop: false, horizontal_flip: false, rotation: 0}",
                   2);
    TEST_RUN(ddp_and_dp_equal_one_process);
    TEST_RUN(resume_single);
    TEST_RUN(resume_ddp_two_workers);
    int rc = test_main_end();
    test_remove_dir_if_passed(tmp);
    return rc;
}
