/* test_cli_newuser.c: the rough edges of a new user's first hour (issue 15), through the
 * runner binary:
 *  - `~`, `~user` and `$VAR` in path keys, `base:` and CLI paths are expanded (before,
 *    `--set output.root=~/runs` made a directory named `~`), and the plan shows the result;
 *  - a changed experiment starts a new run directory and says so; `runner resume DIR
 *    --set ...` continues with the change and records it with its step;
 *  - failed starts (download, world size, init_from) leave no run directory or one whose
 *    summary.json says failed and why; `runner report` lists them instead of refusing;
 *  - data-root messages say where a relative root was looked for, name the .gz files,
 *    never promise a Fashion-MNIST download;
 *  - export after a max_steps run: best.ckpt, summary.json and metrics.csv agree; the
 *    file is 0644 and its metadata describes the model; the printed code builds the
 *    matching torchvision model (checked with Debian's PyTorch when installed);
 *  - `runner plan` shows the threads per rank and warns when they oversubscribe the cores.
 */
#include "tests/cli/cli_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16];
static char tmp[512];

static const char *tiny =
    "name: tiny\n"
    "seed: 3\n"
    "device: cpu\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 96, val_size: 32, image: [3, 8, 8], classes: 4}\n"
    "  workers: 0\n"
    "model: {arch: resnet20}\n"
    "optimizer: {lr: 0.05}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: 1000, batch_size: 16}\n"
    "parallel: {mode: single}\n"
    "logging: {print_every: 1}\n";

/* The lr column (third) of step's row in steps.csv text; NaN when there is none. */
static double step_lr(const char *csv, int step) {
    char key[32];
    snprintf(key, sizeof key, "\n%d,", step);
    const char *p = csv ? strstr(csv, key) : NULL;
    if (!p || !(p = strchr(p + strlen(key), ','))) return NAN;
    return atof(p + 1);
}

/* Number of entries (not . or ..) in dir; -1 when it does not exist. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

static char *exp_path(const char *name, const char *text) {
    static char path[4][700];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, 700, "%s/%s", tmp, name);
    test_write_file(p, text);
    return p;
}

/* 1. `~`, `~user` and `$VAR` expansion. */
static void tilde_and_vars_are_expanded(void) {
    char home[600], args[4096], path[4600];
    snprintf(home, sizeof home, "%s/home", tmp);
    mkdir(home, 0755);
    setenv("HOME", home, 1);
    setenv("RUNNER_T_OUT", tmp, 1);
    const char *exp = exp_path("tiny.yaml", tiny);
    /* the plan shows where the runs go */
    snprintf(args, sizeof args, "plan %s --set output.root=~/runs", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(path, sizeof path, "run dir      %s/runs/tiny/", home);
    CHECK_CONTAINS(out, path);
    /* a real run, started in tmp: the runs are under $HOME, no directory named ~ */
    snprintf(args, sizeof args, "%s --set output.root=~/runs --set train.max_steps=1", exp);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s", tmp, test_runner_exe(), args);
    CHECK_INT(test_run_cmd(cmd, out, sizeof out), 0);
    snprintf(path, sizeof path, "%s/~", tmp);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/runs", home);
    CHECK(only_run_dir(path, "tiny") != NULL);
    /* $VAR and ${VAR}; an unset variable is an error naming it */
    snprintf(args, sizeof args, "plan %s --set 'output.root=${RUNNER_T_OUT}/v'", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(path, sizeof path, "run dir      %s/v/tiny/", tmp);
    CHECK_CONTAINS(out, path);
    snprintf(args, sizeof args, "plan %s --set 'output.root=$RUNNER_T_UNSET/v'", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "output.root: '$RUNNER_T_UNSET/v': environment variable RUNNER_T_UNSET is not set");
    /* in the file, and for data.root: the message names the expanded path */
    const char *fm = exp_path("fm.yaml", "data: {dataset: fashion_mnist, root: ~/fm}\nmodel: {arch: resnet20}\n");
    snprintf(args, sizeof args, "plan %s", fm);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    snprintf(path, sizeof path, "%s/fm/train-images-idx3-ubyte.gz is missing", home);
    CHECK_CONTAINS(out, path);
    /* base: ~/... and a quoted ~ on the command line (report's directories and --output) */
    snprintf(path, sizeof path, "%s/common.yaml", home);
    test_write_file(path, "optimizer: {lr: 0.125}\n");
    const char *child = exp_path("child.yaml", "base: ~/common.yaml\ndata: {dataset: synthetic}\nmodel: {arch: resnet20}\n");
    snprintf(args, sizeof args, "plan %s --json", child);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"lr_base\": 0.125");
    snprintf(path, sizeof path, "%s/runs", home);
    const char *run = only_run_dir(path, "tiny");
    CHECK(run != NULL);
    if (!run) return;
    char rel[4600];
    snprintf(rel, sizeof rel, "~/runs/tiny/%s", strrchr(run, '/') + 1);
    snprintf(args, sizeof args, "report '%s' --output '~/rep'", rel);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(path, sizeof path, "%s/rep/report.html", home);
    CHECK(access(path, R_OK) == 0);
}

/* 2. Edited experiment + the same command: a new run directory, said so; an explicit
 * `runner resume DIR --set` continues with the change, recorded with its step. */
static void changed_config_starts_new_run(void) {
    char root[700], log[800], args[4096], path[4600];
    const char *exp = exp_path("chg.yaml", tiny);
    snprintf(root, sizeof root, "%s/chg", tmp);
    snprintf(log, sizeof log, "%s/chg.log", tmp);
    CHECK_INT(cli_interrupt_at(exp, root, log, "tiny", NULL, 0, 3, SIGINT, NULL, 0), 130);
    const char *d = only_run_dir(root, "tiny");
    CHECK(d != NULL);
    if (!d) return;
    char first[4200];
    snprintf(first, sizeof first, "%s", d);
    snprintf(path, sizeof path, "%s/steps.csv", first);
    int stopped = test_count_lines(path) - 1;
    CHECK(stopped >= 3 && stopped < 40);

    /* the same command with a changed hashed key: a new run directory, and the message */
    snprintf(args, sizeof args, "%s --set output.root=%s --set optimizer.lr=0.01 --set train.max_steps=2", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    char want[4600];
    snprintf(want, sizeof want, "not continuing the unfinished run %s: the configuration changed (optimizer.lr "
             "0.05 -> 0.01); this is a new run. To continue that run with the change instead: runner resume %s "
             "--set optimizer.lr=0.01", first, first);
    CHECK_CONTAINS(out, want);
    snprintf(path, sizeof path, "%s/tiny", root);
    CHECK_INT(count_entries(path), 2);
    snprintf(path, sizeof path, "%s/summary.json", first);
    char *s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, "\"status\": \"interrupted\"");
    free(s);

    /* continuing it with the change is explicit, and recorded with the step */
    snprintf(args, sizeof args, "resume %s --set optimizer.lr=0.01 --set train.max_steps=40", first);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(want, sizeof want, "configuration changed at step %d: optimizer.lr 0.05 -> 0.01, train.max_steps "
             "null -> 40 (recorded in config_changes.jsonl)", stopped);
    CHECK_CONTAINS(out, want);
    snprintf(path, sizeof path, "%s/config_changes.jsonl", first);
    s = test_read_file(path, NULL);
    snprintf(want, sizeof want, "{\"step\":%d,\"epoch\":%d,", stopped, stopped / 6 + 1);
    CHECK_CONTAINS(s, want);
    CHECK_CONTAINS(s, "{\"key\":\"optimizer.lr\",\"from\":\"0.05\",\"to\":\"0.01\",\"hashed\":true}");
    CHECK_CONTAINS(s, "{\"key\":\"train.max_steps\",\"from\":\"null\",\"to\":\"40\",\"hashed\":false}");
    CHECK_INT(test_count_lines(path), 1);
    free(s);
    snprintf(path, sizeof path, "%s/summary.json", first);
    s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, "\"config_changes\": 1");
    CHECK_CONTAINS(s, "\"steps\": 40");
    free(s);
    snprintf(path, sizeof path, "%s/resolved.yaml", first);
    s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, "lr: 0.01 ");
    free(s);
    /* steps.csv: the lr of each step is the one in force (constant schedule) */
    snprintf(path, sizeof path, "%s/steps.csv", first);
    s = test_read_file(path, NULL);
    CHECK_NEAR(step_lr(s, stopped), 0.05, 1e-12, 0);
    CHECK_NEAR(step_lr(s, stopped + 1), 0.01, 1e-12, 0);
    CHECK_NEAR(step_lr(s, 40), 0.01, 1e-12, 0);
    free(s);
    /* the report says the configuration changed */
    snprintf(args, sizeof args, "report %s --output %s/chgrep", first, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "the configuration changed during the run (config_changes.jsonl)");
}

/* 4. Failed starts: no run directory, or one whose summary says failed and why. */
static void failed_starts_leave_no_empty_dirs(void) {
    char root[700], args[4096], path[4600];
    snprintf(root, sizeof root, "%s/fail", tmp);
    const char *exp = exp_path("fail.yaml", tiny);
    /* a download that cannot happen */
    snprintf(args, sizeof args, "%s --set output.root=%s --set data.dataset=cifar10 --set data.root=%s/nodata "
             "--set data.download=true --set data.download_url=file://%s/nothing.tar.gz", exp, root, tmp, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "nothing.tar.gz");
    snprintf(path, sizeof path, "%s/tiny", root);
    CHECK(count_entries(path) <= 0);
    /* init_from that does not exist */
    snprintf(args, sizeof args, "%s --set output.root=%s --set model.init_from=%s/none.safetensors", exp, root, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "model.init_from:");
    CHECK(count_entries(path) <= 0);
    /* a world size the launcher did not start (as under torchrun) */
    snprintf(args, sizeof args, "env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 %s %s "
             "--set output.root=%s --set parallel.mode=ddp --set parallel.world_size=2",
             test_runner_exe(), exp, root);
    CHECK_INT(test_run_cmd(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "the launcher started 1 ranks (WORLD_SIZE) but");
    CHECK(count_entries(path) <= 0);
    /* init_from that is not a weights file: refused by the plan, before any directory */
    char bad[700];
    snprintf(bad, sizeof bad, "%s/bad.safetensors", tmp);
    test_write_file(bad, "not safetensors");
    snprintf(args, sizeof args, "%s --set output.root=%s --set model.init_from=%s", exp, root, bad);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "model.init_from");
    CHECK(count_entries(path) <= 0);
    /* a run that fails after its directory exists (the loss diverges): summary.json says
     * failed and why */
    snprintf(args, sizeof args, "%s --set output.root=%s --set optimizer.lr=1e30 --set train.max_steps=4", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 1);
    char *failed = only_run_dir(root, "tiny");
    CHECK(failed != NULL);
    if (!failed) return;
    char failed_dir[4200];
    snprintf(failed_dir, sizeof failed_dir, "%s", failed);
    snprintf(path, sizeof path, "%s/summary.json", failed_dir);
    char *s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, "\"status\": \"failed\"");
    CHECK_CONTAINS(s, "\"exit_code\": 1");
    CHECK_CONTAINS(s, "the loss is");
    free(s);
    /* a good run next to it, then the report of both: the failed one is listed */
    snprintf(args, sizeof args, "%s --set output.root=%s --set train.max_steps=2", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "report %s/tiny/* --output %s/failrep", root, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "| failed (exit 1) |");
    CHECK_CONTAINS(out, "| completed |");
    snprintf(path, sizeof path, "%s/failrep/comparison.csv", tmp);
    s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, "the loss is");
    free(s);
    /* a run directory that was killed before it wrote anything is listed too */
    snprintf(path, sizeof path, "%s/tiny/20000101-000000-killed", root);
    mkdir(path, 0755);
    strcat(path, "/logs");
    mkdir(path, 0755);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "| incomplete |");
}

/* 6. Data-root messages. */
static void data_root_messages(void) {
    char args[4096], cmd[8192];
    const char *fm = exp_path("fm2.yaml", "data: {dataset: fashion_mnist, root: fmdata, download: true}\n"
                                          "model: {arch: resnet20}\n");
    snprintf(cmd, sizeof cmd, "cd %s && %s plan %s", tmp, test_runner_exe(), fm);
    CHECK_INT(test_run_cmd(cmd, out, sizeof out), 2);
    CHECK_CONTAINS(out, "fmdata/train-images-idx3-ubyte.gz is missing (data.root: fmdata)");
    snprintf(args, sizeof args, "a relative data.root is looked up in the current directory %s, not next to "
             "the experiment file", tmp);
    CHECK_CONTAINS(out, args);
    CHECK_CONTAINS(out, "fashion_mnist cannot be downloaded by the runner (data.download: true cannot help)");
    CHECK(!strstr(out, "will download"));
    /* cifar can be downloaded: the plan says it will be, with the root it resolves to */
    snprintf(cmd, sizeof cmd, "cd %s && %s plan %s --set data.dataset=cifar10", tmp, test_runner_exe(), fm);
    CHECK_INT(test_run_cmd(cmd, out, sizeof out), 0);
    snprintf(args, sizeof args, "data         cifar10 from fmdata (in %s) (will download)", tmp);
    CHECK_CONTAINS(out, args);
    /* an image folder that is not there: the same note, with the folder the runner looked in */
    snprintf(cmd, sizeof cmd, "cd %s && %s plan %s --set data.dataset=image_folder --set data.root=photos",
             tmp, test_runner_exe(), fm);
    CHECK_INT(test_run_cmd(cmd, out, sizeof out), 2);
    CHECK_CONTAINS(out, "photos/train is not a directory");
    snprintf(args, sizeof args, "a relative data.root is looked up in the current directory %s, not next to "
             "the experiment file", tmp);
    CHECK_CONTAINS(out, args);
}

/* 9. Export after a max_steps run; metadata; the printed PyTorch code. */
static void export_agrees_and_loads(void) {
    char root[700], args[4096], path[4600], dir[4200];
    snprintf(root, sizeof root, "%s/exp", tmp);
    const char *exp = exp_path("gray.yaml",
        "name: gray\ndevice: cpu\n"
        "data: {dataset: synthetic, synthetic: {train_size: 64, val_size: 16, image: [1, 8, 8], classes: 3},"
        " workers: 0, augment: {random_crop: false, horizontal_flip: false, rotation: 0}}\n"
        "model: {arch: resnet18}\n"
        "train: {epochs: 2, batch_size: 8, max_steps: 3}\nparallel: {mode: single}\n");
    snprintf(args, sizeof args, "%s --set output.root=%s", exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    char *d = only_run_dir(root, "gray");
    CHECK(d != NULL);
    if (!d) return;
    snprintf(dir, sizeof dir, "%s", d);
    /* 3 of 8 steps: epoch 1 was evaluated, so it is the best epoch and the summary counts it */
    snprintf(path, sizeof path, "%s/summary.json", dir);
    char *s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, "\"epochs\": 1,");
    CHECK_CONTAINS(s, "\"best_epoch\": 1,");
    free(s);
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    s = test_read_file(path, NULL);
    CHECK_CONTAINS(s, "\n1,3,");
    free(s);
    umask(022);
    snprintf(args, sizeof args, "export %s --checkpoint best", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "resnet18, cifar stem (3x3 conv1, no max-pool), 1 input channel, 3 classes, 8x8 inputs; "
                   "from best.ckpt at step 3");
    CHECK_CONTAINS(out, "the data has 1 channel, so conv1 must be built with 1 input channel (torchvision's "
                   "resnet18() has 3)");
    CHECK_CONTAINS(out, "    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)\n");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644);
    size_t n = 0;
    s = test_read_file(path, &n);
    CHECK(s && n > 8);
    if (s) {
        const char *want[] = {"\"arch\":\"resnet18\"", "\"stem\":\"cifar\"", "\"in_channels\":\"1\"",
                              "\"num_classes\":\"3\"", "\"input_size\":\"8x8\"", "\"mean\":\"[0.5]\"",
                              "\"std\":\"[0.25]\"", "\"class_names\":\"[\\\"0\\\", \\\"1\\\", \\\"2\\\"]\"",
                              "\"dataset\":\"synthetic\"", "\"step\":\"3\""};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            if (!memmem(s, n, want[i], strlen(want[i]))) fprintf(stderr, "metadata lacks %s\n", want[i]);
            CHECK(memmem(s, n, want[i], strlen(want[i])) != NULL);
        }
    }
    free(s);
    if (test_run_cmd("/usr/bin/python3 -c 'import torch, torchvision'", NULL, 0) != 0) {
        fprintf(stderr, "  (PyTorch not installed: the printed code was not run)\n");
        return;
    }
    /* run exactly the code the export printed (safetensors itself is not in Debian: a
     * stand-in with the same two calls is on PYTHONPATH) */
    char py[4700], code[8192] = "";
    const char *p = strstr(out, "    import torch, torchvision\n");
    CHECK(p != NULL);
    if (!p) return;
    for (size_t k = 0; p && !strncmp(p, "    ", 4); ) {   /* the indented lines, unindented */
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) + 1 : strlen(p);
        if (k + l < sizeof code - 512) { memcpy(code + k, p + 4, l - 4); k += l - 4; code[k] = '\0'; }
        p = nl ? nl + 1 : NULL;
    }
    strcat(code, "x = model(torch.zeros(2, 1, 8, 8))\nassert tuple(x.shape) == (2, 3), x.shape\n"
                 "print('printed code loaded: %d parameters' % sum(t.numel() for t in model.parameters()))\n");
    snprintf(py, sizeof py, "%s/snippet.py", tmp);
    test_write_file(py, code);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cd %s && PYTHONPATH=%s/tests/cli/safetensors_shim /usr/bin/python3 %s",
             test_source_dir(), test_source_dir(), py);
    int rc = test_run_cmd(cmd, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    /* the same parameter count as the runner's own model (its plan) */
    snprintf(args, sizeof args, "plan %s", exp);
    char plan_out[4096];
    CHECK_INT(run_runner(args, plan_out, sizeof plan_out), 0);
    const char *pc = strstr(plan_out, "resnet18, ");
    CHECK(pc != NULL);
    if (pc) {
        char want[96];
        snprintf(want, sizeof want, "printed code loaded: %lld parameters", atoll(pc + 10));
        CHECK_CONTAINS(out, want);
        CHECK_CONTAINS(out, "printed code loaded: 11169219 parameters");   /* 11689512 - 512k fc - 9408 conv1 + ... */
    }
    /* and the helper for the CIFAR ResNets, from metadata alone */
    snprintf(args, sizeof args, "%s --set output.root=%s/exp20 --set model.arch=resnet20 --set name=gray20", exp, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(path, sizeof path, "%s/exp20", tmp);
    d = only_run_dir(path, "gray20");
    CHECK(d != NULL);
    if (!d) return;
    snprintf(dir, sizeof dir, "%s", d);
    snprintf(args, sizeof args, "export %s", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "from torchvision_model import load");
    snprintf(cmd, sizeof cmd, "cd %s && /usr/bin/python3 -c \"import sys, torch; sys.path.insert(0, 'scripts'); "
             "from torchvision_model import load; m = load('%s/model.safetensors'); "
             "print('helper loaded', m.runner_metadata['arch'], tuple(m(torch.zeros(1, 1, 8, 8)).shape))\"",
             test_source_dir(), dir);
    rc = test_run_cmd(cmd, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "helper loaded resnet20 (1, 3)");
}

/* 11. Threads per rank and oversubscription, on one core (taskset). */
static void plan_threads_and_oversubscription(void) {
    if (test_run_cmd("taskset -c 0 true", NULL, 0) != 0) {
        fprintf(stderr, "  (taskset not available: oversubscription not checked)\n");
        return;
    }
    char cmd[8192];
    const char *exp = exp_path("th.yaml", "data: {dataset: synthetic}\nmodel: {arch: resnet20}\n"
                                          "train: {batch_size: 64}\n");
    snprintf(cmd, sizeof cmd, "taskset -c 0 %s plan %s --set parallel.world_size=4", test_runner_exe(), exp);
    CHECK_INT(test_run_cmd(cmd, out, sizeof out), 0);
    CHECK_CONTAINS(out, "threads      1 per rank x 4 = 4 on 1 core (oversubscribed)\n");
    CHECK_CONTAINS(out, "warning      4 ranks x 1 thread = 4 compute threads on 1 core: oversubscribed, so each "
                   "step will be slower than with fewer ranks; use parallel.world_size: 1 or less (per host), or "
                   "parallel.mode: single");
    snprintf(cmd, sizeof cmd, "taskset -c 0 %s plan %s --json --set parallel.world_size=4", test_runner_exe(), exp);
    CHECK_INT(test_run_cmd(cmd, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"cpu_cores\": 1,");
    CHECK_CONTAINS(out, "\"oversubscribed\": true,");
    snprintf(cmd, sizeof cmd, "taskset -c 0 %s plan %s --set parallel.mode=single", test_runner_exe(), exp);
    CHECK_INT(test_run_cmd(cmd, out, sizeof out), 0);
    CHECK_CONTAINS(out, "threads      1 per rank x 1 = 1 on 1 core\n");
    CHECK(!strstr(out, "warning"));
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(tilde_and_vars_are_expanded);
    TEST_RUN(changed_config_starts_new_run);
    TEST_RUN(failed_starts_leave_no_empty_dirs);
    TEST_RUN(data_root_messages);
    TEST_RUN(export_agrees_and_loads);
    TEST_RUN(plan_threads_and_oversubscription);
    test_remove_dir_if_passed(tmp);
    return test_main_end();
}
