/* test_cli_continue.c: extending a finished run (README "Continue a run, or extend a
 * finished one").
 *
 * - A run stopped by train.max_steps is "completed". The same command with a larger
 *   train.max_steps continues it (no second run directory): it says so, records the change
 *   in config_changes.jsonl, and ends equal bit for bit to a run that had the larger
 *   max_steps from the start: weights, BN buffers, momentum, and metrics.csv / steps.csv
 *   rows (timings aside; the row of the epoch max_steps cut is replaced by the whole
 *   epoch's). Before, it started a new run directory with only "(new)" as explanation.
 * - Once that step count is reached, the same command starts a new run, and the plan says
 *   why and what to type to continue the old one.
 * - A larger train.epochs continues a completed constant-schedule run, equal to a longer
 *   run; with cosine (whose learning rate follows train.epochs) it is a new run, and the
 *   plan prints the `runner resume DIR --set train.epochs=N` line, which works.
 */
#include "tests/fault/fault_util.h"

static char tmp[512], out[1 << 17];

/* The training state and the CSV rows (timing columns aside) of two runs agree. */
static void check_same_run(const char *a, const char *b) {
    static const char *const sections[] = {"params", "buffers", "optim.momentum_buffer"};
    cli_check_same_sections(a, b, sections, 3);
    static const int metric_cols[] = {0, 1, 2, 3, 4, 5, 6, 7}, step_cols[] = {0, 1, 2, 3, 4};
    cli_check_same_csv(a, b, "metrics.csv", metric_cols, 8);
    cli_check_same_csv(a, b, "steps.csv", step_cols, 5);
}

static void larger_max_steps_continues(void) {
    char exp[700], root[700], ref_root[700], args[4096], run[4096];
    fault_write_exp(exp, sizeof exp, tmp, "ms", 4, "single");   /* 4 steps per epoch, 16 in all */
    snprintf(root, sizeof root, "%s/runs", tmp);
    char root_ms[800];
    snprintf(root_ms, sizeof root_ms, "%s/ms", root);
    const char *d = cli_run(exp, root, "--set train.max_steps=6", 0, out, sizeof out);
    CHECK(d != NULL);
    if (!d) return;
    snprintf(run, sizeof run, "%s", d);
    CHECK_INT(cli_json_number(run, "summary.json", "steps"), 6);
    /* the plan already says what the run will do */
    snprintf(args, sizeof args, "plan %s --set output.root=%s --set train.max_steps=10", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    char want[4400];
    snprintf(want, sizeof want, "run dir      %s (resumes: continues the completed run, train.max_steps 6 -> 10, "
             "from step 6 to 10)", run);
    CHECK_CONTAINS(out, want);
    d = cli_run(exp, root, "--set train.max_steps=10", 1, out, sizeof out);
    CHECK(d != NULL && !strcmp(d, run));   /* the same directory: no new run */
    CHECK_INT(fault_dir_entries(root_ms), 1);
    snprintf(want, sizeof want, "runner: continuing the completed run %s: train.max_steps 6 -> 10, from step 6 to "
             "10. To start a new run instead: --set checkpoint.resume=never", run);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "continuing at step 6 (epoch 2)");
    CHECK_INT(cli_json_number(run, "summary.json", "steps"), 10);
    snprintf(args, sizeof args, "%s/config_changes.jsonl", run);
    char *changes = test_read_file(args, NULL);
    CHECK_CONTAINS(changes, "{\"key\":\"train.max_steps\",\"from\":\"6\",\"to\":\"10\",\"hashed\":false}");
    free(changes);
    /* equal to a run with max_steps 10 from the start */
    snprintf(ref_root, sizeof ref_root, "%s/ref", tmp);
    const char *ref = cli_run(exp, ref_root, "--set train.max_steps=10", 2, out, sizeof out);
    CHECK(ref != NULL);
    if (ref) check_same_run(ref, run);
    /* reached: the same command is a new run, and the plan says how to go on instead */
    snprintf(args, sizeof args, "plan %s --set output.root=%s --set train.max_steps=10", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(want, sizeof want, "run dir      %s/ms/<YYYYmmdd-HHMMSS>-<id> (new: ", root);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof want, "the newest run of ms, %s, completed all its 10 steps, so this is a new run; to "
             "train that one further instead, run this command with a larger train.max_steps or train.epochs "
             "(e.g. --set train.max_steps=20)", run);
    CHECK_CONTAINS(out, want);
}

static void larger_epochs_continues_unless_cosine(void) {
    char exp[700], root[700], ref_root[700], args[4096], run[4096], want[4400];
    /* constant: continued, equal to a 3-epoch run */
    fault_write_exp(exp, sizeof exp, tmp, "ep", 2, "single");
    snprintf(root, sizeof root, "%s/runs", tmp);
    const char *d = cli_run(exp, root, NULL, 3, out, sizeof out);
    CHECK(d != NULL);
    if (!d) return;
    snprintf(run, sizeof run, "%s", d);
    d = cli_run(exp, root, "--set train.epochs=3", 4, out, sizeof out);
    CHECK(d != NULL && !strcmp(d, run));
    CHECK_CONTAINS(out, "train.epochs 2 -> 3, from step 8 to 12");
    CHECK_INT(cli_json_number(run, "summary.json", "steps"), 12);
    snprintf(ref_root, sizeof ref_root, "%s/ref", tmp);
    const char *ref = cli_run(exp, ref_root, "--set train.epochs=3", 5, out, sizeof out);
    CHECK(ref != NULL);
    if (ref) check_same_run(ref, run);

    /* cosine: a new run; the plan gives the command that continues the old one anyway */
    fault_write_exp(exp, sizeof exp, tmp, "cos", 2, "single");
    char root_cos[800];
    snprintf(root_cos, sizeof root_cos, "%s/cos", root);
    d = cli_run(exp, root, "--set schedule.name=cosine", 6, out, sizeof out);
    CHECK(d != NULL);
    if (!d) return;
    snprintf(run, sizeof run, "%s", d);
    snprintf(args, sizeof args, "plan %s --set output.root=%s --set schedule.name=cosine --set train.epochs=3", exp,
             root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "(new: created when the run starts");
    snprintf(want, sizeof want, "not continuing the completed run %s: its cosine schedule decays to train.epochs 2, "
             "so continuing it to 3 epochs would not equal a 3-epoch run; this is a new run. To continue that run "
             "anyway (the learning rate then follows the 3-epoch cosine from step 8 on): runner resume %s --set "
             "train.epochs=3", run, run);
    CHECK_CONTAINS(out, want);
    snprintf(args, sizeof args, "resume %s --set train.epochs=3", run);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_INT(cli_json_number(run, "summary.json", "steps"), 12);
    CHECK_INT(fault_dir_entries(root_cos), 1);
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(larger_max_steps_continues);
    TEST_RUN(larger_epochs_continues_unless_cosine);
    int rc = test_main_end();
    if (rc == 0) test_remove_dir_if_passed(tmp);
    return rc;
}
