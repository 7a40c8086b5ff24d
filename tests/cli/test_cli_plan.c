/* test_cli_plan.c: `runner plan` numbers for the shipped experiments, and bad input
 * through the CLI (exit code 2 and one message naming the place). */
#include "tests/cli/cli_util.h"

#include <unistd.h>

static char out[1 << 16];

static void plan_resnet50_cifar100(void) {
    char args[2048];
    snprintf(args, sizeof args, "plan %s/experiments/resnet50_cifar100.yaml", test_source_dir());
    int rc = run_runner(args, out, sizeof out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "mode         ddp, world size 2");
    CHECK_CONTAINS(out, "batch        2 ranks x 64 = 128 global");
    CHECK_CONTAINS(out, "steps        391 per epoch x 200 epochs = 78200 steps");
    CHECK_CONTAINS(out, "50000 train / 10000 test samples, 3x32x32 input, 100 classes");
    /* one warm-up epoch, then x0.2 at epochs 60, 120, 160 */
    CHECK_CONTAINS(out, "warm-up 391 steps to 0.1");
    CHECK_CONTAINS(out, "0.02 from step 23460 (epoch 60)");
    CHECK_CONTAINS(out, "0.004 from step 46920 (epoch 120)");
    CHECK_CONTAINS(out, "0.0008 from step 62560 (epoch 160)");
    CHECK_CONTAINS(out, "resnet50, 23705252 parameters");
    /* --json carries the same numbers */
    snprintf(args, sizeof args, "plan %s/experiments/resnet50_cifar100.yaml --json", test_source_dir());
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"steps_per_epoch\": 391");
    CHECK_CONTAINS(out, "\"micro_batch\": 64");
    CHECK_CONTAINS(out, "\"world_size\": 2");
    /* overrides change the plan: 1 rank x 128, accumulation 2 -> 64 x 2 */
    snprintf(args, sizeof args, "plan %s/experiments/resnet50_cifar100.yaml --set parallel.world_size=1 "
             "--set train.grad_accum=2", test_source_dir());
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "batch        1 ranks x 64 x 2 accumulation = 128 global");
    CHECK_CONTAINS(out, "steps        391 per epoch");
    /* one step per epoch: a warm-up of one step (it said "1 steps") */
    snprintf(args, sizeof args, "plan %s/experiments/resnet50_cifar100.yaml --set data.dataset=synthetic "
             "--set data.synthetic.train_size=128 --set data.download=false", test_source_dir());
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "lr           base 0.1, warm-up 1 step to 0.1, 0.02 from step 60 (epoch 60)");
}

static void plan_quickstart(void) {
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) {
        fprintf(stderr, "  (Fashion-MNIST not installed: quickstart plan not checked)\n");
        return;
    }
    char args[2048];
    snprintf(args, sizeof args, "plan %s/experiments/quickstart.yaml", test_source_dir());
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "60000 train / 10000 test samples, 1x28x28 input, 10 classes");
}

static void bad_input_exits_2(void) {
    char dir[512], path[600], args[2048];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    snprintf(path, sizeof path, "%s/typo.yaml", dir);
    test_write_file(path, "data:\n  dataset: synthetic\nmodel:\n  arch: resnet20\noptimizer:\n  lrr: 0.1\n");
    snprintf(args, sizeof args, "plan %s", path);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "typo.yaml:6:3");
    CHECK_CONTAINS(out, "optimizer.lr");
    /* a missing file */
    snprintf(args, sizeof args, "%s/nope.yaml", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "nope.yaml");
    /* a bad --set value */
    snprintf(path, sizeof path, "%s/ok.yaml", dir);
    test_write_file(path, "data:\n  dataset: synthetic\nmodel:\n  arch: resnet20\n");
    snprintf(args, sizeof args, "plan %s --set train.epochs=ten", path);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "train.epochs");
    /* an unknown option and no arguments */
    snprintf(args, sizeof args, "plan %s --bogus", path);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "unknown option --bogus");
    CHECK_INT(run_runner("", out, sizeof out), 2);
    /* an indivisible batch */
    snprintf(args, sizeof args, "plan %s --set parallel.mode=ddp --set parallel.world_size=3 --set train.batch_size=100", path);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "not divisible");
    /* device: cuda on a machine without a GPU (or a build without CUDA) */
    snprintf(args, sizeof args, "plan %s --set device=cuda", path);
    int rc = run_runner(args, out, sizeof out);
    if (rc != 0) {
        CHECK_INT(rc, 2);
        CHECK_CONTAINS(out, "device: cuda");
    }
    /* a dataset directory without files, download off */
    snprintf(args, sizeof args, "plan %s --set data.dataset=cifar10 --set data.root=%s/empty", path, dir);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "data.download: true");
    /* a bad train.cuda_fusion name, and a bad RUNNER_CUDA_FUSION list (stopped before a
     * run directory exists) */
    snprintf(args, sizeof args, "plan %s --set train.cuda_fusion=[graph_conv,fast]", path);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "train.cuda_fusion[1]: 'fast' is not one of graph_conv");
    setenv("RUNNER_CUDA_FUSION", "conv_stats,fast", 1);
    snprintf(args, sizeof args, "%s --set output.root=%s/runs", path, dir);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    unsetenv("RUNNER_CUDA_FUSION");
    CHECK_CONTAINS(out, "environment variable RUNNER_CUDA_FUSION=conv_stats,fast: cuda fusion: unknown option 'fast'");
    snprintf(path, sizeof path, "%s/runs", dir);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/ok.yaml", dir);
    /* resume of something that is not a run directory */
    snprintf(args, sizeof args, "resume %s", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "not a run directory");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    test_run_cmd(cmd, NULL, 0);
}

int main(void) {
    TEST_RUN(plan_resnet50_cifar100);
    TEST_RUN(plan_quickstart);
    TEST_RUN(bad_input_exits_2);
    return test_main_end();
}
