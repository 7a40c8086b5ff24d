/* test_fault_disk.c: a run that cannot write (a full disk, I/O errors) stops with one
 * message naming the file and the error and exit code 1, leaves every earlier checkpoint
 * intact and loadable and nothing half-written behind, and resumes from there to the
 * same weights and metrics as a run that never failed.
 *
 * The faults come from faultfs.so (LD_PRELOAD; see faultfs.c): ENOSPC part-way through
 * writing an epoch checkpoint and a step checkpoint (checkpoint.every_steps: the
 * background writer), EIO from its fsync, EIO from the rename that puts it in place,
 * ENOSPC in the middle of a metrics.csv row, EIO writing steps.csv. And where a tmpfs
 * can be mounted (unshare -rm), a real one too small for the third checkpoint. */
#include "tests/fault/fault_util.h"

static char tmp[512], exp_path[700], ref[4200];
static char out[1 << 16];
static long ckpt_bytes;

/* The lines of the log file that start with "runner: " (errors, not progress). */
static int error_lines(const char *log, char *first, size_t cap) {
    char *s = test_read_file(log, NULL);
    int n = 0;
    first[0] = 0;
    for (char *l = s; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl) *nl = 0;
        if (!strncmp(l, "runner: ", 8) && strncmp(l, "runner: run directory", 21) &&
            strncmp(l, "runner: resuming", 16)) {
            if (!n) snprintf(first, cap, "%s", l);
            n++;
        }
        l = nl ? nl + 1 : l + strlen(l);
    }
    free(s);
    return n;
}

static void reference_run(void) {
    fault_write_exp(exp_path, sizeof exp_path, tmp, "disk", 5, "single, world_size: 1");
    char args[2048];
    snprintf(args, sizeof args, "%s --set output.root=%s/ref", exp_path, tmp);
    int rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    char root[700];
    snprintf(root, sizeof root, "%s/ref", tmp);
    const char *d = only_run_dir(root, "disk");
    CHECK(d != NULL);
    snprintf(ref, sizeof ref, "%s", d ? d : "");
    char p[4400];
    snprintf(p, sizeof p, "%s/checkpoints/epoch_5.ckpt", ref);
    struct stat st;
    ckpt_bytes = stat(p, &st) == 0 ? (long)st.st_size : 0;
    CHECK(ckpt_bytes > 100000);
}

/* Runs the experiment under faultfs with env, expects exit 1 and one error line holding
 * want_file and want_err; checks what is left; resumes without the fault and compares the
 * result with the reference. */
static void fault_case(const char *label, const char *const *env, const char *want_file, const char *want_err,
                       int want_ckpts) {
    fprintf(stderr, "-- %s\n", label);
    char root[700], log[800], set[760];
    snprintf(root, sizeof root, "%s/%s", tmp, label);
    snprintf(log, sizeof log, "%s/%s.log", tmp, label);
    snprintf(set, sizeof set, "output.root=%s", root);
    const char *args[] = {exp_path, "--set", set, NULL};
    int rc = fault_wait(fault_spawn(args, env, log));
    CHECK_INT(rc, 1);
    char first[2048];
    int n = error_lines(log, first, sizeof first);
    CHECK_INT(n, 1);
    CHECK_CONTAINS(first, want_file);
    CHECK_CONTAINS(first, want_err);
    const char *d = only_run_dir(root, "disk");
    CHECK(d != NULL);
    if (!d) return;
    char run[4200];
    snprintf(run, sizeof run, "%s", d);
    int nck = fault_checkpoints_loadable(run);               /* every one loads */
    CHECK(nck >= want_ckpts);                                 /* epoch_1, epoch_2, last (+ best) */
    CHECK_INT(fault_count_files(run, ".tmp-"), 0);            /* nothing half-written left */
    char p[4400];
    snprintf(p, sizeof p, "%s/metrics.csv", run);
    size_t len = 0;
    char *m = test_read_file(p, &len);
    CHECK(m && len > 0 && m[len - 1] == '\n');                /* no torn row */
    free(m);
    /* resume without the fault: same weights and metrics as the reference */
    snprintf(log, sizeof log, "%s/%s.resume.log", tmp, label);
    const char *rargs[] = {"resume", run, NULL};
    rc = fault_wait(fault_spawn(rargs, NULL, log));
    CHECK_INT(rc, 0);
    if (rc) { char *s = test_read_file(log, NULL); fprintf(stderr, "%s\n", s ? s : ""); free(s); }
    fault_check_same_run(ref, run);
}

static void checkpoint_write_enospc(void) {
    char after[64];
    snprintf(after, sizeof after, "FAULTFS_AFTER=%ld", ckpt_bytes / 2);
    const char *env[] = {"LD_PRELOAD=" FAULTFS_SO, "FAULTFS_PATH=epoch_3.ckpt", "FAULTFS_OP=write", after, NULL};
    fault_case("ckpt_enospc", env, "epoch_3.ckpt", "No space left on device", 3);
}

/* A step checkpoint (checkpoint.every_steps) fails in the background writer. */
static void step_checkpoint_enospc(void) {
    char after[64];
    snprintf(after, sizeof after, "FAULTFS_AFTER=%ld", ckpt_bytes / 3);
    const char *env[] = {"LD_PRELOAD=" FAULTFS_SO, "FAULTFS_PATH=step_6.ckpt", "FAULTFS_OP=write", after, NULL};
    fault_case("step_ckpt_enospc", env, "step_6.ckpt", "No space left on device", 2);
}

static void checkpoint_fsync_eio(void) {
    const char *env[] = {"LD_PRELOAD=" FAULTFS_SO, "FAULTFS_PATH=epoch_3.ckpt", "FAULTFS_OP=fsync",
                         "FAULTFS_ERRNO=EIO", NULL};
    fault_case("ckpt_fsync_eio", env, "epoch_3.ckpt", "Input/output error", 3);
}

static void checkpoint_rename_eio(void) {
    const char *env[] = {"LD_PRELOAD=" FAULTFS_SO, "FAULTFS_PATH=epoch_3.ckpt", "FAULTFS_OP=rename",
                         "FAULTFS_ERRNO=EIO", NULL};
    fault_case("ckpt_rename_eio", env, "epoch_3.ckpt", "Input/output error", 3);
}

/* The disk fills in the middle of the third metrics row. */
static void metrics_row_enospc(void) {
    char p[4400];
    snprintf(p, sizeof p, "%s/metrics.csv", ref);
    char *m = test_read_file(p, NULL);
    long at = 0;
    for (int lines = 0; m && m[at] && lines < 3; at++) lines += m[at] == '\n';
    free(m);
    char after[64];
    snprintf(after, sizeof after, "FAULTFS_AFTER=%ld", at + 10);
    const char *env[] = {"LD_PRELOAD=" FAULTFS_SO, "FAULTFS_PATH=metrics.csv", "FAULTFS_OP=write", after, NULL};
    fault_case("metrics_enospc", env, "metrics.csv", "No space left on device", 3);
}

static void steps_row_eio(void) {
    const char *env[] = {"LD_PRELOAD=" FAULTFS_SO, "FAULTFS_PATH=steps.csv", "FAULTFS_OP=write",
                         "FAULTFS_AFTER=900", "FAULTFS_ERRNO=EIO", NULL};
    fault_case("steps_eio", env, "steps.csv", "Input/output error", 0);
}

/* A real full file system: a tmpfs with room for the run files, two checkpoints and half
 * a third, mounted in a private mount namespace (skipped where that is not allowed). */
static void real_tmpfs_full(void) {
    char probe[1200];
    snprintf(probe, sizeof probe, "unshare -rm sh -c 'mount -t tmpfs -o size=64k none %s && umount %s' 2>&1", tmp,
             tmp);
    if (test_run_cmd(probe, out, sizeof out) != 0) {
        fprintf(stderr, "note: cannot mount a tmpfs here (%s); the faultfs cases cover this\n", out);
        return;
    }
    char mnt[700], copy[700], cmd[4096];
    snprintf(mnt, sizeof mnt, "%s/tmpfs", tmp);
    snprintf(copy, sizeof copy, "%s/tmpfs_copy", tmp);
    mkdir(mnt, 0755);
    long kb = (ckpt_bytes * 5 / 2 + 96 * 1024) / 1024;
    /* run inside the namespace, then copy what is on the tmpfs out before it goes away */
    snprintf(cmd, sizeof cmd,
             "unshare -rm sh -c 'mount -t tmpfs -o size=%ldk none %s && %s %s --set output.root=%s > %s/tmpfs.log 2>&1;"
             " rc=$?; cp -a %s %s; exit $rc'",
             kb, mnt, test_runner_exe(), exp_path, mnt, tmp, mnt, copy);
    int rc = test_run_cmd(cmd, out, sizeof out);
    CHECK_INT(rc, 1);
    char log[800], first[2048];
    snprintf(log, sizeof log, "%s/tmpfs.log", tmp);
    CHECK_INT(error_lines(log, first, sizeof first), 1);
    CHECK_CONTAINS(first, ".ckpt");
    CHECK_CONTAINS(first, "No space left on device");
    const char *d = only_run_dir(copy, "disk");
    CHECK(d != NULL);
    if (!d) return;
    char run[4200];
    snprintf(run, sizeof run, "%s", d);
    CHECK(fault_checkpoints_loadable(run) >= 2);
    CHECK_INT(fault_count_files(run, ".tmp-"), 0);
    snprintf(log, sizeof log, "%s/tmpfs.resume.log", tmp);
    const char *rargs[] = {"resume", run, NULL};
    CHECK_INT(fault_wait(fault_spawn(rargs, NULL, log)), 0);
    CHECK(fault_same_section(ref, run, "params"));
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(reference_run);
    TEST_RUN(checkpoint_write_enospc);
    TEST_RUN(step_checkpoint_enospc);
    TEST_RUN(checkpoint_fsync_eio);
    TEST_RUN(checkpoint_rename_eio);
    TEST_RUN(metrics_row_enospc);
    TEST_RUN(steps_row_eio);
    TEST_RUN(real_tmpfs_full);
    return test_main_end();
}
