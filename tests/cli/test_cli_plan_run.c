/* test_cli_plan_run.c: what `runner plan` says is what the run does, and the run's
 * processes are recognisable.
 *
 * - The run directory: for a new run the plan shows <root>/<name>/<YYYYmmdd-HHMMSS>-<id>
 *   and says the name is chosen when the run starts (the run then creates it there); for
 *   a run that resumes, the plan's directory is the one the run resumes. Before, the plan
 *   printed a made-up name the run did not use.
 * - The plan writes nothing: with HOME, XDG_CACHE_HOME and RUNNER_CACHE_DIR in a fresh
 *   directory, `runner plan` of an image folder leaves every file of the tree as it was
 *   (before, it wrote the image index cache).
 * - The time estimate: "unknown until the first steps run" with the compute the steps
 *   need when no run of this setup has been measured; after one, "about ... (estimate:
 *   N images/s as measured by <that run>", and plan --json's estimated_seconds: the images
 *   the steps train (a partial last batch of an epoch counted as partial) over that rate.
 * - ps/top: the runner shows as "runner" (/proc/PID/comm), DDP ranks as "runner[rank N]"
 *   (before: "exe", the re-execution through /proc/self/exe), cmdline as started.
 * - --set parallel.mode=single on a ddp experiment makes world_size 1; a world size given
 *   with it on the command line is still an error.
 */
#include <dirent.h>
#include <sys/stat.h>

#include "tests/fault/fault_util.h"

static char tmp[512], out[1 << 17];

/* tmp/pr.yaml: fault_util.h's experiment named pr, with train.epochs and parallel.mode
 * single or ddp (world size 2): 4 steps per epoch. */
static void write_exp(char *path, size_t len, int epochs, const char *mode) {
    fault_write_exp(path, len, tmp, "pr", epochs, mode);
}

/* The value of the line starting with prefix in text, up to the end of the line. */
static const char *line_after(const char *text, const char *prefix, char *buf, size_t len) {
    const char *p = text ? strstr(text, prefix) : NULL;
    buf[0] = '\0';
    if (p) snprintf(buf, len, "%.*s", (int)strcspn(p + strlen(prefix), "\n"), p + strlen(prefix));
    return buf;
}

static void plan_shows_the_run_dir_and_an_estimate(void) {
    char exp[700], root[700], args[4096], want[4400], dir[4096], line[4096];
    write_exp(exp, sizeof exp, 2, "single");
    snprintf(root, sizeof root, "%s/runs", tmp);
    snprintf(args, sizeof args, "plan %s --set output.root=%s", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(want, sizeof want, "run dir      %s/pr/<YYYYmmdd-HHMMSS>-<id> (new: created when the run starts, named "
             "by its start time and a random id)", root);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof want, "time         unknown until the first steps run: no finished run under %s has this "
             "device, model, input, batch and precision to measure a rate from (the 8 steps need ~", root);
    CHECK_CONTAINS(out, want);
    /* the run creates its directory where the plan said */
    snprintf(args, sizeof args, "%s --set output.root=%s", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    line_after(out, "runner: run directory ", dir, sizeof dir);
    snprintf(want, sizeof want, "%s/pr/", root);
    CHECK(!strncmp(dir, want, strlen(want)));
    const char *id = dir + strlen(want);   /* YYYYmmdd-HHMMSS-xxxxxx */
    CHECK(strlen(id) == 22 && id[8] == '-' && id[15] == '-');
    /* measured now: the plan estimates from it */
    snprintf(args, sizeof args, "plan %s --set output.root=%s --set train.epochs=4 "
             "--set checkpoint.resume=never", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    line_after(out, "time         ", line, sizeof line);
    CHECK(!strncmp(line, "about ", 6));
    snprintf(want, sizeof want, " for 16 steps (estimate: ");
    CHECK_CONTAINS(line, want);
    snprintf(want, sizeof want, " images/s as measured by %s, same device, model, input, batch and precision; "
             "evaluation and start-up not included)", dir);
    CHECK_CONTAINS(line, want);
    snprintf(args, sizeof args, "plan --json %s --set output.root=%s --set train.epochs=4 "
             "--set checkpoint.resume=never", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    size_t n = strlen(out);
    char *copy = strdup(out);
    double est = cli_json_number_of(copy, n, "estimated_seconds");
    CHECK(est > 0 && est < 600);
    /* a run that will resume: the plan names the directory the run then resumes */
    char log[700];
    snprintf(log, sizeof log, "%s/r2.log", tmp);
    const char *sets[] = {"train.epochs=40", "checkpoint.every_steps=2"};
    snprintf(root, sizeof root, "%s/r2", tmp);
    CHECK_INT(cli_interrupt_at(exp, root, log, "pr", sets, 2, 6, SIGINT, dir, sizeof dir), 130);
    snprintf(args, sizeof args, "plan %s --set output.root=%s --set train.epochs=40 "
             "--set checkpoint.every_steps=2", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(want, sizeof want, "run dir      %s (resumes)\n", dir);
    CHECK_CONTAINS(out, want);
    snprintf(args, sizeof args, "%s --set output.root=%s --set train.epochs=40 "
             "--set checkpoint.every_steps=2 --set train.max_steps=12", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(want, sizeof want, "runner: resuming %s\n", dir);
    CHECK_CONTAINS(out, want);
}

/* Every file under dir with its size and mtime, one per line (find's listing). */
static char *tree_listing(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cd %s && find . -printf '%%p %%s %%T@\\n' | sort", dir);
    static char buf[1 << 16];
    if (test_run_cmd(cmd, buf, sizeof buf) != 0) return NULL;
    return strdup(buf);
}

static void plan_writes_nothing(void) {
    char home[700], cmd[4096], exp[800];
    snprintf(home, sizeof home, "%s/home", tmp);
    /* an image folder: 2 classes x (3 train + 1 val) copies of a small PNG */
    snprintf(cmd, sizeof cmd,
             "set -e; mkdir -p %s/cache; for s in train/a train/b val/a val/b; do mkdir -p %s/img/$s; "
             "for i in 1 2 3; do tail -c +6 %s/tests/fuzz/corpus/image/seed-rgb.png > %s/img/$s/$i.png; done; done",
             home, home, test_source_dir(), home);
    CHECK_INT(system(cmd), 0);
    snprintf(exp, sizeof exp, "%s/folder.yaml", home);
    snprintf(cmd, sizeof cmd, "name: folder\ndevice: cpu\ndata: {dataset: image_folder, root: %s/img, image_size: 8, "
             "resize: 8, workers: 1}\nmodel: {arch: resnet20}\ntrain: {epochs: 1, batch_size: 2}\n"
             "parallel: {mode: single}\noutput: {root: %s/runs}\n", home, home);
    test_write_file(exp, cmd);
    char *before = tree_listing(home);
    snprintf(cmd, sizeof cmd, "HOME=%s XDG_CACHE_HOME=%s/cache RUNNER_CACHE_DIR= %s plan %s", home, home,
             test_runner_exe(), exp);
    CHECK_INT(test_run_cmd(cmd, out, sizeof out), 0);
    CHECK_CONTAINS(out, "images       train 6 in 2 classes (3 each)");
    CHECK_CONTAINS(out, "(built in memory: the plan writes nothing; the run caches it there)");
    char *after = tree_listing(home);
    CHECK(before && after && !strcmp(before, after));
    if (before && after && strcmp(before, after)) fprintf(stderr, "before:\n%s\nafter:\n%s\n", before, after);
    free(before);
    free(after);
}

/* /proc/PID/<file> into buf (whose files report no size: read to the end); its length. */
static size_t proc_file(pid_t pid, const char *file, char *buf, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t n = 0;
    ssize_t r;
    while (fd >= 0 && n + 1 < len && (r = read(fd, buf + n, len - 1 - n)) > 0) n += (size_t)r;
    if (fd >= 0) close(fd);
    buf[n] = '\0';
    return n;
}

/* /proc/PID/comm without its newline. */
static const char *comm_of(pid_t pid, char *buf, size_t len) {
    proc_file(pid, "comm", buf, len);
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

static void processes_are_named_runner(void) {
    char exp[700], root[700], set[760], log[800], name[64];
    write_exp(exp, sizeof exp, 200, "single");
    const char *modes[] = {"single", "ddp"};
    for (int m = 0; m < 2; m++) {
        snprintf(root, sizeof root, "%s/names_%s", tmp, modes[m]);
        snprintf(set, sizeof set, "output.root=%s", root);
        snprintf(log, sizeof log, "%s/names_%s.log", tmp, modes[m]);
        char mode[64];
        snprintf(mode, sizeof mode, "parallel.mode=%s", modes[m]);
        const char *args[] = {exp, "--set", set, "--set", mode, NULL};
        pid_t pid = fault_spawn(args, NULL, log);
        CHECK(cli_wait_steps(root, "pr", 2) != NULL);
        CHECK_STR(comm_of(pid, name, sizeof name), "runner");
        char cl[4096];
        size_t n = proc_file(pid, "cmdline", cl, sizeof cl);
        CHECK(n > 7 && !strcmp(cl, "runner") && !strcmp(cl + 7, exp));   /* argv as started */
        if (m == 1) {
            pid_t kids[4];
            int nk = dist_children_of(pid, kids, 4), seen = 0;
            CHECK_INT(nk, 2);
            for (int i = 0; i < nk; i++) {
                char v[16], want[32];
                snprintf(want, sizeof want, "runner[rank %s]", dist_proc_env(kids[i], "RANK", v, sizeof v));
                seen += !strcmp(comm_of(kids[i], name, sizeof name), want);
            }
            CHECK_INT(seen, 2);
        }
        kill(pid, SIGINT);
        CHECK_INT(fault_wait(pid), 130);
    }
}

static void mode_single_sets_world_size(void) {
    char exp[700], args[4096];
    write_exp(exp, sizeof exp, 2, "ddp, world_size: 2");
    snprintf(args, sizeof args, "plan %s --set parallel.mode=single", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "mode         single, world size 1, comm none");
    snprintf(args, sizeof args, "plan %s --set parallel.mode=single --set parallel.world_size=2", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "runner: --set parallel.world_size=2: parallel.world_size 2 with parallel.mode single; use "
                        "mode ddp or dp, or world_size 1");
}

/* The estimate counts the images the steps train: 40 training images in batches of 32
 * are 2 steps an epoch of 40 images, not 64 (the last batch is partial). Before, the
 * plan took steps x batch, so a small image folder (32 images, batch 64: every step half
 * full) was estimated at twice its time. */
static void estimate_counts_partial_batches(void) {
    char exp[700], root[700], args[4096];
    snprintf(exp, sizeof exp, "%s/partial.yaml", tmp);
    test_write_file(exp, "device: cpu\ndata: {dataset: synthetic, synthetic: {train_size: 40, val_size: 8, "
                         "image: [3, 8, 8], classes: 4}, workers: 0}\nmodel: {arch: resnet20}\n"
                         "train: {epochs: 1, batch_size: 32}\nparallel: {mode: single}\n");
    snprintf(root, sizeof root, "%s/partial_runs", tmp);
    const char *dir = cli_run(exp, root, NULL, 0, out, sizeof out);
    CHECK(dir != NULL);
    if (!dir) return;
    double ips = cli_json_number(dir, "summary.json", "images_per_second");
    CHECK(ips > 0);
    snprintf(args, sizeof args, "plan --json %s --set output.root=%s --set train.epochs=4 "
             "--set checkpoint.resume=never", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    double est = cli_json_number_of(strdup(out), strlen(out), "estimated_seconds");
    CHECK_NEAR(est, 4 * 40 / ips, 1e-6, 1e-9);   /* 8 steps, 160 images */
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(estimate_counts_partial_batches);
    TEST_RUN(plan_shows_the_run_dir_and_an_estimate);
    TEST_RUN(plan_writes_nothing);
    TEST_RUN(processes_are_named_runner);
    TEST_RUN(mode_single_sets_world_size);
    int rc = test_main_end();
    if (rc == 0) test_remove_dir_if_passed(tmp);
    return rc;
}
