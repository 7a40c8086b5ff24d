/* test_cli_resume.c: SIGINT then `runner resume` ends bit-identical to an uninterrupted
 * run; corrupt and truncated checkpoints are reported and the previous good one is
 * used (or exit 2 when there is none); a checkpoint of another architecture is refused;
 * `runner export` writes safetensors that PyTorch loads with strict=True. */
#include "tests/cli/cli_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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
    "  workers: 2\n"
    "  augment: {random_crop: {size: 8, padding: 1}, horizontal_flip: true, rotation: 10}\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}\n"
    "schedule: {name: multistep, milestones: [2], gamma: 0.5, warmup_epochs: 0.5}\n"
    "train: {epochs: 3, batch_size: 16, label_smoothing: 0.1}\n"
    "parallel: {mode: single, world_size: 1}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 2, resume: never}\n";

static char ref_dir[4096], run_dir[4096];

static void sigint_then_resume_is_bit_exact(void) {
    char exp[700], root[700], args[2048];
    snprintf(exp, sizeof exp, "%s/tiny.yaml", tmp);
    test_write_file(exp, tiny);
    /* the uninterrupted reference */
    snprintf(args, sizeof args, "%s --set output.root=%s/ref", exp, tmp);
    int rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    if (rc) { fprintf(stderr, "%s\n", out); return; }
    snprintf(root, sizeof root, "%s/ref", tmp);
    snprintf(ref_dir, sizeof ref_dir, "%s", only_run_dir(root, "tiny"));

    /* the same run, interrupted by SIGINT after a few steps */
    snprintf(root, sizeof root, "%s/int", tmp);
    char log[800];
    snprintf(log, sizeof log, "%s/int.log", tmp);
    rc = cli_interrupt_at(exp, root, log, "tiny", NULL, 0, 3, SIGINT, NULL, 0);
    CHECK_INT(rc, 130);
    char *d = only_run_dir(root, "tiny");
    CHECK(d != NULL);
    if (!d) return;
    snprintf(run_dir, sizeof run_dir, "%s", d);
    char path[4400];
    snprintf(path, sizeof path, "%s/summary.json", run_dir);
    char *summary = test_read_file(path, NULL);
    CHECK_CONTAINS(summary, "\"status\": \"interrupted\"");
    CHECK_CONTAINS(summary, "\"exit_code\": 130");
    free(summary);
    size_t n;
    snprintf(path, sizeof path, "%s/checkpoints/last.ckpt", run_dir);
    void *meta = ckpt_section_copy(path, "meta", &n);
    CHECK(meta != NULL);
    free(meta);

    /* resume finishes the run ... */
    snprintf(args, sizeof args, "resume %s", run_dir);
    rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "continuing at step");
    /* ... with weights, BN buffers and optimizer state identical to the reference */
    const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
    cli_check_same_sections(ref_dir, run_dir, sections, 3);
    /* and the same final metrics row */
    char a[4400], b[4400];
    snprintf(a, sizeof a, "%s/metrics.csv", ref_dir);
    snprintf(b, sizeof b, "%s/metrics.csv", run_dir);
    char *ma = test_read_file(a, NULL), *mb = test_read_file(b, NULL);
    CHECK(ma && mb);
    if (ma && mb) {
        CHECK_INT(test_count_lines(a), 4);
        CHECK_INT(test_count_lines(b), 4);
        /* compare everything up to the timing columns of the last row */
        char *la = strrchr(ma, '\n'), *lb = strrchr(mb, '\n');
        *la = *lb = '\0';
        la = strrchr(ma, '\n') + 1;
        lb = strrchr(mb, '\n') + 1;
        for (int k = 0, commas = 0; la[k] && commas < 8; k++) {
            if (la[k] != lb[k]) { CHECK(la[k] == lb[k]); break; }
            commas += la[k] == ',';
        }
    }
    free(ma);
    free(mb);
}

static void corrupt_checkpoints(void) {
    if (!run_dir[0]) return;
    char path[4400], args[4500], cmd[9000];
    snprintf(path, sizeof path, "%s/checkpoints/last.ckpt", run_dir);
    /* flip one byte in the middle of last.ckpt (a hard link: break it first) */
    snprintf(cmd, sizeof cmd, "cp %s %s.x && mv %s.x %s", path, path, path, path);
    CHECK_INT(test_run_cmd(cmd, NULL, 0), 0);
    struct stat st;
    CHECK_INT(stat(path, &st), 0);
    int fd = open(path, O_RDWR);
    unsigned char byte;
    off_t mid = st.st_size / 2;
    CHECK_INT(pread(fd, &byte, 1, mid), 1);
    byte ^= 0x40;
    CHECK_INT(pwrite(fd, &byte, 1, mid), 1);
    close(fd);
    snprintf(args, sizeof args, "resume %s", run_dir);
    int rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "last.ckpt");
    CHECK_CONTAINS(out, "CRC mismatch");
    CHECK_CONTAINS(out, "resumed from");
    CHECK_CONTAINS(out, "epoch_3.ckpt");

    /* the run was complete: its summary was left alone */
    char sp[4400];
    snprintf(sp, sizeof sp, "%s/summary.json", run_dir);
    char *sum = test_read_file(sp, NULL);
    CHECK_CONTAINS(out, "already finished all 18 steps");
    CHECK_CONTAINS(sum, "\"status\": \"completed\"");
    CHECK(sum && !strstr(sum, "\"train_loss\": null"));
    free(sum);

    /* truncated, with no older checkpoint left: exit 2 naming the file */
    CHECK_INT(truncate(path, st.st_size / 3), 0);
    snprintf(cmd, sizeof cmd, "rm -f %s/checkpoints/epoch_*.ckpt", run_dir);
    test_run_cmd(cmd, NULL, 0);
    rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 2);
    CHECK_CONTAINS(out, "last.ckpt");
    CHECK_CONTAINS(out, "truncated");

    /* not a checkpoint at all */
    test_write_file(path, "hello, I am not a checkpoint\n");
    rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 2);
    CHECK_CONTAINS(out, "bad magic");
}

static void other_architecture_refused(void) {
    if (!ref_dir[0]) return;
    char args[4500];
    snprintf(args, sizeof args, "resume %s --set model.arch=resnet32", ref_dir);
    int rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 2);
    CHECK_CONTAINS(out, "checkpoint is for resnet20");
    CHECK_CONTAINS(out, "resnet32");
}

/* checkpoint.every_epochs: 0 writes no periodic epoch_<N>.ckpt: an improving epoch 1 goes
 * to last.ckpt (+ best.ckpt), and only the final epoch is kept as epoch_2.ckpt (linked as
 * last.ckpt); the run completes (it used to divide by zero). */
static void every_epochs_zero_keeps_last_and_best(void) {
    char exp[700], root[700], args[2000], path[4200];
    snprintf(exp, sizeof exp, "%s/tiny.yaml", tmp);
    snprintf(root, sizeof root, "%s/every0", tmp);
    snprintf(args, sizeof args, "%s --set output.root=%s --set checkpoint.every_epochs=0 --set train.epochs=2",
             exp, root);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    const char *dir = only_run_dir(root, "tiny");
    CHECK(dir != NULL);
    if (!dir) return;
    snprintf(path, sizeof path, "%s/checkpoints/last.ckpt", dir);
    CHECK(access(path, R_OK) == 0);
    snprintf(path, sizeof path, "%s/checkpoints/best.ckpt", dir);
    CHECK(access(path, R_OK) == 0);
    snprintf(path, sizeof path, "%s/checkpoints/epoch_1.ckpt", dir);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/checkpoints/epoch_2.ckpt", dir);
    CHECK(access(path, F_OK) == 0);
    size_t sz = 0;
    char *meta = ckpt_section_copy(strcat(strcpy(path, dir), "/checkpoints/last.ckpt"), "meta", &sz);
    CHECK(meta != NULL);
    if (meta) {
        CHECK_CONTAINS(meta, "\"step\": 12");
        free(meta);
    }
}

static void export_loads_in_pytorch(void) {
    if (!ref_dir[0]) return;
    char args[4500], file[4500];
    snprintf(file, sizeof file, "%s/exported.safetensors", tmp);
    snprintf(args, sizeof args, "export %s --format safetensors --output %s", ref_dir, file);
    int rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    CHECK(access(file, R_OK) == 0);
    /* header: 8-byte length then JSON naming torchvision tensors */
    size_t n = 0;
    char *s = test_read_file(file, &n);
    CHECK(s && n > 8);
    if (s) {
        CHECK(memmem(s, n, "\"layer3.2.bn2.running_var\"", 26) != NULL);
        CHECK(memmem(s, n, "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[16,3,3,3]", 47) != NULL ||
              memmem(s, n, "\"conv1.weight\": {\"dtype\": \"F32\", \"shape\": [16, 3, 3, 3]", 55) != NULL);
        CHECK(memmem(s, n, "\"I64\"", 5) != NULL);
    }
    free(s);
    if (test_run_cmd("/usr/bin/python3 -c 'import torch, torchvision'", NULL, 0) != 0) {
        fprintf(stderr, "  (PyTorch not installed: strict load not checked)\n");
        return;
    }
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/cli/check_export.py %s resnet20 4 3 18", test_source_dir(), file);
    rc = test_run_cmd(cmd, out, sizeof out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "loaded resnet20 (cifar stem): 128 tensors, 272084 parameters, logits finite, num_batches_tracked=18");
}

static void export_resnet50_cifar100(void) {
    char exp[700], args[2048], cmd[9000];
    snprintf(exp, sizeof exp, "%s/r50.yaml", tmp);
    test_write_file(exp,
        "name: r50\ndevice: cpu\n"
        "data: {dataset: synthetic, synthetic: {train_size: 2, val_size: 2, image: [3, 32, 32], classes: 100},"
        " workers: 0, augment: {random_crop: false, horizontal_flip: false, rotation: 0}}\n"
        "model: {arch: resnet50}\n"
        "train: {epochs: 1, batch_size: 2}\nparallel: {mode: single}\n"
        "checkpoint: {resume: never}\n");
    snprintf(args, sizeof args, "%s --set output.root=%s/r50", exp, tmp);
    int rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    if (rc) { fprintf(stderr, "%s\n", out); return; }
    char root[700];
    snprintf(root, sizeof root, "%s/r50", tmp);
    char *d = only_run_dir(root, "r50");
    CHECK(d != NULL);
    if (!d) return;
    snprintf(args, sizeof args, "export %s", d);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    if (test_run_cmd("/usr/bin/python3 -c 'import torch, torchvision'", NULL, 0) != 0) return;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/cli/check_export.py %s/model.safetensors resnet50 100 3 1",
             test_source_dir(), d);
    rc = test_run_cmd(cmd, out, sizeof out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "loaded resnet50 (cifar stem): 320 tensors, 23705252 parameters");
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(sigint_then_resume_is_bit_exact);
    TEST_RUN(corrupt_checkpoints);
    TEST_RUN(other_architecture_refused);
    TEST_RUN(every_epochs_zero_keeps_last_and_best);
    TEST_RUN(export_loads_in_pytorch);
    TEST_RUN(export_resnet50_cifar100);
    int rc = test_main_end();
    test_remove_dir_if_passed(tmp);
    return rc;
}
