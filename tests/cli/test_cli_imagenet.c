/* test_cli_imagenet.c: the ImageNet stem and fine-tuning from torchvision weights through
 * the CLI, as a user drives them.
 *
 *  - model.stem auto: `runner plan` says imagenet for 66x66 inputs and why, cifar for
 *    64x64 and for resnet20; plan.json carries stem and stem_reason; imagenet for resnet20
 *    is exit 2.
 *  - A resnet18 ImageNet-stem run (DDP, 2 ranks on the CPU) exports safetensors that load
 *    with strict=True into torchvision.models.resnet18(num_classes=5) itself, and a resnet50
 *    one into torchvision.models.resnet50; resuming the resnet18 run with model.stem: cifar
 *    is refused (exit 2, naming model.stem). fp16 AMP: stopped after epoch 1 and resumed
 *    gives every parameter, running statistic and counter of the uninterrupted run.
 *  - scripts/torchvision_weights.py converts a torchvision resnet18(num_classes=10) .pth
 *    (torchvision's init, 3 training forwards: running statistics moved, counters 3), and
 *    the same weights saved the legacy way ({"model": {"module." + name}}, no counters) to
 *    the same values; a text file and a wrong --arch are exit 2 with one message.
 *  - Fine-tuning from that file, with lr 1e-30 (the weights stay put to far below fp32
 *    resolution while the whole training path runs):
 *      strict, 10 classes: the exported parameters are torchvision's (atol 1e-20), and
 *        num_batches_tracked goes on from the file's 3 to 5;
 *      reinit, 5 classes: every parameter but fc.* is torchvision's, and fc.* equals that
 *        of a run from scratch with the same seed (the run's own init);
 *      strict, 5 classes: exit 2 naming both fc shapes and model.init_head: reinit,
 *        before any run directory is made; into a CIFAR-stem net (32x32 inputs): exit 2
 *        naming model.stem: imagenet; into resnet34: exit 2 naming the file's arch.
 * The torchvision checks run in one python process at the end (torchvision_check.py);
 * without Debian's python3-torchvision they are skipped. That the runner's logits equal
 * torchvision's for the same weights is tests/golden/test_golden_stem.c's job (the same
 * converter, compared in float64).
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
    write_exp("auto", "resnet18", 66, 5, NULL);
    char args[2000];
    snprintf(args, sizeof args, "plan %s/auto.yaml", tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "stem         imagenet: conv 7x7/2 + max-pool 3x3/2 (auto: 66x66 inputs are larger than 64 px)");
    CHECK_CONTAINS(out, "resnet18, 11179077 parameters");   /* torchvision's resnet18(num_classes=5) */
    snprintf(args, sizeof args, "plan %s/auto.yaml --json", tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"stem\": \"imagenet\"");
    CHECK_CONTAINS(out, "\"stem_reason\": \"auto: 66x66 inputs are larger than 64 px\"");
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
    CHECK_CONTAINS(out, "model.stem: imagenet: resnet20 has only the CIFAR variant");
}

/* Checks for the one python run at the end (torch takes seconds to import). */
static char py_checks[16384];

static void py_check(const char *fmt, const char *a, const char *b, const char *c) {
    size_t n = strlen(py_checks);
    snprintf(py_checks + n, sizeof py_checks - n, "%s", n ? " ';' " : "");
    n = strlen(py_checks);
    snprintf(py_checks + n, sizeof py_checks - n, fmt, a, b, c);
}

/* DDP (2 ranks, shm) with the ImageNet stem; export (torchvision's own resnet18 loads it,
 * checked at the end); a resume that would build the CIFAR stem is refused. */
static void imagenet_stem_run_export_resume(void) {
    write_exp("r18", "resnet18", 66, 5, NULL);
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
    py_check("export %s resnet18 5 3 2%s%s", file, "", "");
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

/* fp16 AMP with the ImageNet stem: stopped after epoch 1 and resumed == uninterrupted,
 * every parameter, running statistic and counter (compared at the end). */
static void imagenet_stem_amp_resume_exact(void) {
    write_exp("whole", "resnet18", 66, 5, NULL);
    write_exp("parts", "resnet18", 66, 5, NULL);
    const char *amp = "--set amp.enabled=true --set amp.dtype=fp16 --set train.epochs=2";
    CHECK_INT(train("whole", amp), 0);
    char sets[600], root[700], args[2000];
    snprintf(sets, sizeof sets, "%s --set train.max_steps=2", amp);
    CHECK_INT(train("parts", sets), 0);
    snprintf(root, sizeof root, "%s/parts", tmp);
    const char *d = only_run_dir(root, "parts");
    CHECK(d != NULL);
    if (!d) return;
    snprintf(args, sizeof args, "resume %s --set train.max_steps=null", d);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "continuing at step 2 (epoch 2)");
    char whole[4200];
    const char *f = export_run("whole");
    CHECK(f != NULL);
    snprintf(whole, sizeof whole, "%s", f ? f : "");
    f = export_run("parts");
    CHECK(f != NULL);
    if (f && whole[0]) py_check("compare %s %s --buffers --atol 0%s", whole, f, "");
}

static void resnet50_export_loads(void) {
    write_exp("r50", "resnet50", 64, 7, NULL);
    CHECK_INT(train("r50", "--set model.stem=imagenet --set train.batch_size=2 --set data.synthetic.train_size=2 "
                           "--set data.synthetic.val_size=2"), 0);
    const char *file = export_run("r50");
    CHECK(file != NULL);
    if (file) py_check("export %s resnet50 7 3 1%s%s", file, "", "");
}

/* scripts/torchvision_weights.py: a plain state dict, a legacy checkpoint dict with
 * "module." names and no num_batches_tracked, and its refusals (exit 2, one message). */
static bool convert_torchvision(const char *pth, const char *st) {
    char args[5000], legacy[700], legacy_st[700], text[700];
    snprintf(legacy, sizeof legacy, "%s/legacy.pth", tmp);
    snprintf(legacy_st, sizeof legacy_st, "%s/legacy.safetensors", tmp);
    snprintf(args, sizeof args, "%s/tests/cli/torchvision_check.py make resnet18 10 5 %s ';' make resnet18 10 5 %s legacy",
             test_source_dir(), pth, legacy);
    CHECK_INT(python(args), 0);
    snprintf(args, sizeof args, "%s/scripts/torchvision_weights.py %s %s --arch resnet18", test_source_dir(), pth, st);
    CHECK_INT(python(args), 0);
    CHECK_CONTAINS(out, "resnet18, imagenet stem, 10 classes, 3 input channels, 122 tensors");
    snprintf(args, sizeof args, "%s/scripts/torchvision_weights.py %s %s", test_source_dir(), legacy, legacy_st);
    CHECK_INT(python(args), 0);
    CHECK_CONTAINS(out, "resnet18, imagenet stem, 10 classes, 3 input channels, 122 tensors");
    py_check("compare %s %s --atol 0%s", legacy_st, st, "");   /* same values, counters added */
    snprintf(text, sizeof text, "%s/notes.pth", tmp);
    test_write_file(text, "not a checkpoint\n");
    snprintf(args, sizeof args, "/usr/bin/python3 %s/scripts/torchvision_weights.py %s %s/x.safetensors",
             test_source_dir(), text, tmp);
    CHECK_INT(test_run_cmd(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "notes.pth: cannot be read as a PyTorch file");
    snprintf(args, sizeof args, "/usr/bin/python3 %s/scripts/torchvision_weights.py %s %s/x.safetensors --arch resnet50",
             test_source_dir(), pth, tmp);
    CHECK_INT(test_run_cmd(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "holds resnet18 weights, not resnet50; use --arch resnet18 (and model.arch: resnet18)");
    return access(st, R_OK) == 0;
}

static void finetune_from_torchvision(void) {
    if (!have_torch) {
        printf("  (no PyTorch/torchvision at /usr/bin/python3: fine-tuning cases skipped)\n");
        return;
    }
    static char pth[700], st[700];
    snprintf(pth, sizeof pth, "%s/tv_resnet18.pth", tmp);
    snprintf(st, sizeof st, "%s/tv_resnet18.safetensors", tmp);
    if (!convert_torchvision(pth, st)) return;

    /* strict, classes match: the parameters are torchvision's, the counters go on from
     * the file's 3 (2 steps: 5) */
    char sets[2000], args[5000];
    write_exp("ft_strict", "resnet18", 66, 10, NULL);
    snprintf(sets, sizeof sets, "--set model.init_from=%s --set optimizer.lr=1e-30 --set optimizer.momentum=0", st);
    CHECK_INT(train("ft_strict", sets), 0);
    const char *file = export_run("ft_strict");
    CHECK(file != NULL);
    if (file) {
        py_check("compare %s %s --atol 1e-20%s", file, pth, "");   /* 62 parameters */
        py_check("export %s resnet18 10 3 5%s%s", file, "", "");
    }

    /* reinit with 5 classes: everything but fc.* from the file, fc.* the run's own init */
    write_exp("ft_reinit", "resnet18", 66, 5, NULL);
    write_exp("scratch", "resnet18", 66, 5, NULL);
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
        py_check("compare %s %s --skip fc. --atol 1e-20%s", reinit_file, pth, "");
        py_check("compare %s %s --only fc. --atol 1e-20%s", reinit_file, scratch_file, "");
    }

    /* strict with 5 classes: the error names both shapes and the key, before any run
     * directory is made */
    snprintf(sets, sizeof sets, "--set model.init_from=%s", st);
    snprintf(args, sizeof args, "%s/ft_reinit.yaml --set output.root=%s/bad %s", tmp, tmp, sets);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "fc.weight has shape [10,512] (10 classes), and this model's is [5,512] (model.num_classes 5); "
                        "set model.init_head: reinit");
    char bad_dir[700];
    snprintf(bad_dir, sizeof bad_dir, "%s/bad/ft_reinit", tmp);
    CHECK(access(bad_dir, F_OK) != 0);
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

/* Everything collected above, in one interpreter. */
static void torchvision_checks(void) {
    if (!have_torch) {
        printf("  (no PyTorch/torchvision at /usr/bin/python3: strict loads into torchvision not checked)\n");
        return;
    }
    char args[sizeof py_checks + 200];
    snprintf(args, sizeof args, "%s/tests/cli/torchvision_check.py %s", test_source_dir(), py_checks);
    CHECK_INT(python(args), 0);
    CHECK_CONTAINS(out, "loaded resnet18 (imagenet stem): 122 tensors, 11179077 parameters, logits finite, "
                        "num_batches_tracked=2");
    CHECK_CONTAINS(out, "loaded resnet50 (imagenet stem): 320 tensors, 23522375 parameters");
    CHECK_CONTAINS(out, "compare: 122 tensors within 0");   /* resumed == uninterrupted */
    CHECK_CONTAINS(out, "compare: 62 tensors within 0");    /* legacy conversion == plain */
    CHECK_CONTAINS(out, "compare: 62 tensors within 1e-20");   /* strict: torchvision's parameters */
    CHECK_CONTAINS(out, "loaded resnet18 (imagenet stem): 122 tensors, 11181642 parameters, logits finite, "
                        "num_batches_tracked=5");
    CHECK_CONTAINS(out, "compare: 60 tensors within 1e-20");   /* reinit: all but fc.* */
    CHECK_CONTAINS(out, "compare: 2 tensors within 1e-20");    /* reinit: fc.* as from scratch */
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    have_torch = test_run_cmd("/usr/bin/python3 -c 'import torch, torchvision'", NULL, 0) == 0;
    TEST_RUN(plan_says_which_stem);
    TEST_RUN(imagenet_stem_run_export_resume);
    TEST_RUN(imagenet_stem_amp_resume_exact);
    TEST_RUN(resnet50_export_loads);
    TEST_RUN(finetune_from_torchvision);
    TEST_RUN(torchvision_checks);
    int rc = test_main_end();
    test_remove_dir_if_passed(tmp);
    return rc;
}
