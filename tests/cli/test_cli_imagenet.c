/* test_cli_imagenet.c: the ImageNet stem and fine-tuning from torchvision weights through
 * the CLI, as a user drives them.
 *
 *  - model.stem auto: `runner plan` says imagenet for 72x72 inputs and why, cifar for
 *    32x32 and for resnet20; plan.json carries stem and stem_reason.
 *  - A resnet18 ImageNet-stem run (DDP, 2 ranks on the CPU) exports safetensors that load
 *    with strict=True into torchvision.models.resnet18(num_classes=5) itself, and a resnet50
 *    one into torchvision.models.resnet50; resuming the resnet18 run with model.stem: cifar
 *    is refused (exit 2, naming model.stem).
 *  - Fine-tuning (needs Debian's python3-torchvision, else those cases are skipped): a
 *    torchvision resnet18(num_classes=10) with its own random init is saved as .pth and
 *    converted by scripts/torchvision_weights.py; with lr 1e-30 (so weights stay put to
 *    far below fp32 resolution, while the whole training path runs):
 *      strict, 10 classes: the exported parameters are torchvision's (atol 1e-20), and
 *        num_batches_tracked counts on from the file's (running statistics move with the
 *        two training forwards, as they would in PyTorch);
 *      reinit, 5 classes: every weight but fc.* is torchvision's, and fc.* equals that of
 *        a run from scratch with the same seed (the run's own init);
 *      strict, 5 classes: exit 2 naming both fc shapes and model.init_head: reinit,
 *        before any run directory is made;
 *      into a CIFAR-stem net (32x32 inputs): exit 2 naming model.stem: imagenet.
 * That the runner's logits equal torchvision's for the same weights is
 * tests/golden/test_golden_stem.c's job (the same converted file, compared in float64).
 */
#include "tests/cli/cli_util.h"

#include <unistd.h>

static char out[1 << 16];
static char tmp[512];
static bool have_torch;

/* A synthetic experiment: image side px, classes, arch, written to tmp/name.yaml. */
static void write_exp(const char *name, const char *arch, int px, int classes, const char *extra) {
    char path[700], text[2048];
    snprintf(path, sizeof path, "%s/%s.yaml", tmp, name);
    snprintf(text, sizeof text,
             "name: %s\nseed: 11\ndevice: cpu\n"
             "data: {dataset: synthetic, synthetic: {train_size: 8, val_size: 4, image: [3, %d, %d], "
             "classes: %d}, workers: 0, augment: {random_crop: false, horizontal_flip: false, rotation: 0}}\n"
             "model: {arch: %s}\n"
             "optimizer: {lr: 0.05, momentum: 0.9, weight_decay: 0}\n"
             "schedule: {name: constant, warmup_epochs: 0}\n"
             "train: {epochs: 1, batch_size: 4}\nparallel: {mode: single}\n"
             "checkpoint: {resume: never}\n%s",
             name, px, px, classes, arch, extra ? extra : "");
    test_write_file(path, text);
}

/* Runs `runner EXP --set output.root=tmp/NAME SETS` and returns the exit status. */
static int train(const char *name, const char *sets) {
    char args[3000];
    snprintf(args, sizeof args, "%s/%s.yaml --set output.root=%s/%s %s", tmp, name, tmp, name, sets ? sets : "");
    int rc = run_runner(args, out, sizeof out);
    if (rc) fprintf(stderr, "runner %s -> %d:\n%s\n", args, rc, out);
    return rc;
}

/* Exports the single run under tmp/name and returns the file's path (static). */
static const char *export_run(const char *name) {
    static char file[4200];
    char root[700], args[4300];
    snprintf(root, sizeof root, "%s/%s", tmp, name);
    const char *d = only_run_dir(root, name);
    if (!d) return NULL;
    snprintf(file, sizeof file, "%s/model.safetensors", d);
    snprintf(args, sizeof args, "export %s", d);
    return run_runner(args, out, sizeof out) == 0 ? file : NULL;
}

static int python(const char *script_args) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s", script_args);
    int rc = test_run_cmd(cmd, out, sizeof out);
    if (rc) fprintf(stderr, "%s -> %d:\n%s\n", cmd, rc, out);
    return rc;
}

static void plan_says_which_stem(void) {
    write_exp("auto", "resnet18", 72, 5, NULL);
    char args[2000];
    snprintf(args, sizeof args, "plan %s/auto.yaml", tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "stem         imagenet: conv 7x7/2 + max-pool 3x3/2 (auto: 72x72 inputs are larger than 64 px)");
    CHECK_CONTAINS(out, "resnet18, 11179077 parameters");   /* torchvision's resnet18(num_classes=5) */
    snprintf(args, sizeof args, "plan %s/auto.yaml --json", tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"stem\": \"imagenet\"");
    CHECK_CONTAINS(out, "\"stem_reason\": \"auto: 72x72 inputs are larger than 64 px\"");
    snprintf(args, sizeof args, "plan %s/auto.yaml --set data.synthetic.image=[3,64,64]", tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "stem         cifar: conv 3x3/1, no max-pool (auto: 64x64 inputs are at most 64 px)");
    snprintf(args, sizeof args, "plan %s/auto.yaml --set model.arch=resnet20", tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "(auto: resnet20 has only the CIFAR stem)");
    snprintf(args, sizeof args, "plan %s/auto.yaml --set data.synthetic.image=[3,32,32] --set model.stem=imagenet", tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "stem         imagenet: conv 7x7/2 + max-pool 3x3/2 (model.stem: imagenet)");
    snprintf(args, sizeof args, "plan %s/auto.yaml --set model.arch=resnet20 --set model.stem=imagenet", tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "model.stem: imagenet: resnet20 is a CIFAR ResNet");
}

/* DDP (2 ranks, shm) with the ImageNet stem; export loads into torchvision's own
 * resnet18; a resume that would build the CIFAR stem is refused. */
static void imagenet_stem_run_export_resume(void) {
    write_exp("r18", "resnet18", 72, 5, NULL);
    CHECK_INT(train("r18", "--set parallel.mode=ddp --set parallel.world_size=2"), 0);
    const char *file = export_run("r18");
    CHECK(file != NULL);
    if (!file) return;
    size_t n = 0;
    char *hdr = test_read_file(file, &n);   /* the JSON header follows an 8-byte length */
    const char *conv1 = "\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[64,3,7,7]", *stem = "\"stem\":\"imagenet\"";
    CHECK(hdr && memmem(hdr, n, conv1, strlen(conv1)) != NULL);
    CHECK(hdr && memmem(hdr, n, stem, strlen(stem)) != NULL);
    free(hdr);
    if (have_torch) {
        char args[5000];
        snprintf(args, sizeof args, "%s/tests/cli/check_export.py %s resnet18 5 3 2", test_source_dir(), file);
        CHECK_INT(python(args), 0);
        CHECK_CONTAINS(out, "loaded resnet18 (imagenet stem): 122 tensors, 11179077 parameters, logits finite, "
                            "num_batches_tracked=2");
    }
    char root[700], args[2000];
    snprintf(root, sizeof root, "%s/r18", tmp);
    const char *d = only_run_dir(root, "r18");
    CHECK(d != NULL);
    if (!d) return;
    snprintf(args, sizeof args, "resume %s --set model.stem=cifar", d);   /* ddp: a rank's log tail */
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "checkpoint is for resnet18 with the imagenet stem, but this experiment bui");
    snprintf(args, sizeof args, "resume %s --set model.stem=cifar --set parallel.mode=single "
             "--set parallel.world_size=1", d);   /* in-process: the whole message */
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "checkpoint is for resnet18 with the imagenet stem, but this experiment builds the cifar "
                        "stem (model.stem: cifar); resume with model.stem: imagenet");
}

static void resnet50_export_loads(void) {
    write_exp("r50", "resnet50", 64, 7, NULL);
    CHECK_INT(train("r50", "--set model.stem=imagenet --set train.batch_size=2 --set data.synthetic.train_size=2 "
                           "--set data.synthetic.val_size=2"), 0);
    const char *file = export_run("r50");
    CHECK(file != NULL);
    if (!file || !have_torch) return;
    char args[5000];
    snprintf(args, sizeof args, "%s/tests/cli/check_export.py %s resnet50 7 3 1", test_source_dir(), file);
    CHECK_INT(python(args), 0);
    CHECK_CONTAINS(out, "loaded resnet50 (imagenet stem): 320 tensors, 23522375 parameters");
}

static void finetune_from_torchvision(void) {
    if (!have_torch) {
        printf("  (no PyTorch/torchvision at /usr/bin/python3: fine-tuning cases skipped)\n");
        return;
    }
    char pth[700], st[700], args[5000];
    snprintf(pth, sizeof pth, "%s/tv_resnet18.pth", tmp);
    snprintf(st, sizeof st, "%s/tv_resnet18.safetensors", tmp);
    snprintf(args, sizeof args, "%s/tests/cli/torchvision_check.py make resnet18 10 5 %s", test_source_dir(), pth);
    CHECK_INT(python(args), 0);
    snprintf(args, sizeof args, "%s/scripts/torchvision_weights.py %s %s --arch resnet18", test_source_dir(), pth, st);
    CHECK_INT(python(args), 0);
    CHECK_CONTAINS(out, "resnet18, imagenet stem, 10 classes, 3 input channels, 122 tensors");

    /* strict, classes match: the weights are torchvision's */
    char sets[2000];
    write_exp("ft_strict", "resnet18", 72, 10, NULL);
    snprintf(sets, sizeof sets, "--set model.init_from=%s --set optimizer.lr=1e-30 --set optimizer.momentum=0", st);
    CHECK_INT(train("ft_strict", sets), 0);
    const char *file = export_run("ft_strict");
    CHECK(file != NULL);
    if (file) {
        snprintf(args, sizeof args, "%s/tests/cli/torchvision_check.py compare %s %s --atol 1e-20",
                 test_source_dir(), file, pth);
        CHECK_INT(python(args), 0);
        CHECK_CONTAINS(out, "compare: 62 tensors within 1e-20");   /* every parameter */
        snprintf(args, sizeof args, "%s/tests/cli/check_export.py %s resnet18 10 3 2", test_source_dir(), file);
        CHECK_INT(python(args), 0);   /* the file's counters were 0; 2 steps since */
    }

    /* reinit with 5 classes: everything but fc.* from the file, fc.* the run's own init */
    write_exp("ft_reinit", "resnet18", 72, 5, NULL);
    write_exp("scratch", "resnet18", 72, 5, NULL);
    snprintf(sets, sizeof sets, "--set model.init_from=%s --set model.init_head=reinit --set optimizer.lr=1e-30 "
             "--set optimizer.momentum=0", st);
    CHECK_INT(train("ft_reinit", sets), 0);
    CHECK_INT(train("scratch", "--set optimizer.lr=1e-30 --set optimizer.momentum=0"), 0);
    char reinit_file[4200];
    file = export_run("ft_reinit");
    CHECK(file != NULL);
    snprintf(reinit_file, sizeof reinit_file, "%s", file ? file : "");
    const char *scratch_file = export_run("scratch");
    CHECK(scratch_file != NULL);
    if (file && scratch_file) {
        snprintf(args, sizeof args, "%s/tests/cli/torchvision_check.py compare %s %s --skip fc. --atol 1e-20",
                 test_source_dir(), reinit_file, pth);
        CHECK_INT(python(args), 0);
        CHECK_CONTAINS(out, "compare: 60 tensors within 1e-20");
        snprintf(args, sizeof args, "%s/tests/cli/torchvision_check.py compare %s %s --only fc. --atol 1e-20",
                 test_source_dir(), reinit_file, scratch_file);
        CHECK_INT(python(args), 0);
        CHECK_CONTAINS(out, "compare: 2 tensors within 1e-20");
    }

    /* strict with 5 classes: the error names both shapes and the key */
    snprintf(sets, sizeof sets, "--set model.init_from=%s", st);
    snprintf(args, sizeof args, "%s/ft_reinit.yaml --set output.root=%s/bad %s", tmp, tmp, sets);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "fc.weight has shape [10,512] (10 classes), and this model's is [5,512] (model.num_classes 5); "
                        "set model.init_head: reinit");
    char bad_dir[700];
    snprintf(bad_dir, sizeof bad_dir, "%s/bad/ft_reinit", tmp);
    CHECK(access(bad_dir, F_OK) != 0);   /* refused at the plan: no run directory made */
    /* a 7x7-stem file into a CIFAR-stem net */
    write_exp("ft_cifar", "resnet18", 32, 10, NULL);
    snprintf(args, sizeof args, "%s/ft_cifar.yaml --set output.root=%s/bad %s", tmp, tmp, sets);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "has conv1.weight [64,3,7,7], torchvision's ImageNet stem (7x7 conv + max-pool), but this run "
                        "builds resnet18 with the CIFAR stem (conv1.weight [64,3,3,3]; auto: 32x32 inputs are at most "
                        "64 px); set model.stem: imagenet");
    /* a file of another architecture: its metadata names it */
    snprintf(args, sizeof args, "%s/ft_strict.yaml --set output.root=%s/bad %s --set model.arch=resnet34", tmp, tmp, sets);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "holds resnet18 weights (its metadata says arch resnet18), and this run builds resnet34; "
                        "set model.arch: resnet18");
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    have_torch = test_run_cmd("/usr/bin/python3 -c 'import torch, torchvision'", NULL, 0) == 0;
    TEST_RUN(plan_says_which_stem);
    TEST_RUN(imagenet_stem_run_export_resume);
    TEST_RUN(resnet50_export_loads);
    TEST_RUN(finetune_from_torchvision);
    int rc = test_main_end();
    if (rc == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        test_run_cmd(cmd, NULL, 0);
    }
    return rc;
}
