/* test_cli_archs.c: the families of issue 24 through the CLI, as a user drives them.
 *
 *  - One short CPU run (single mode, 32x32 synthetic data, 2 steps) of a small member of
 *    each family with recipe keys on: wrn16_8 at width 1 with dropout 0.3, EMA and mixup;
 *    preact_resnet18 with label smoothing, cosine schedule and warm-up; resnext29_8x64d at
 *    width 4, groups 2 with Nesterov and gradient clipping; vgg11_bn (CIFAR variant, dropout
 *    0.5) with EMA and cutmix; mobilenet_v2 at width 0.25 with bf16 AMP; mobilenet_v2's
 *    ImageNet variant (model.stem: imagenet) at width 0.5; resnext50_32x4d with the
 *    ImageNet stem. Each completes, evaluates finite losses and `runner export`s; the
 *    exported files load with load_state_dict(strict=True) into the model
 *    scripts/torchvision_model.py builds from their metadata (torchvision's own
 *    mobilenet_v2 / resnext50_32x4d, the reference definitions for the CIFAR ones), checked
 *    in one python process at the end (skipped without Debian's PyTorch).
 *  - The plan names the variant and why (VGG and MobileNetV2 at 32 px and 96 px), prints the
 *    model keys, and plan.json carries stem, arch_width, arch_groups, arch_dropout.
 *  - Fine-tuning from torchvision's own weights: mobilenet_v2(num_classes=4) saved as a .pth
 *    (3 training forwards: running statistics moved), converted by
 *    scripts/torchvision_weights.py, loaded with model.init_from into the ImageNet variant:
 *    with lr 1e-30 the exported parameters are torchvision's (atol 1e-20); with
 *    model.init_head: reinit and 6 classes everything but classifier.1.* is. A CIFAR-variant
 *    VGG export into the ImageNet variant is refused (exit 2) naming model.stem.
 *  - Bad input is exit 2 with the key and the fix, before any run directory: vgg16_bn on
 *    28x28 images (five max-pools need 32 px), vgg11_bn's ImageNet variant at 24 px, an
 *    unknown arch (listing the known ones), a non-integer WRN width, model.groups on VGG.
 */
#include "tests/cli/cli_util.h"

#include <unistd.h>

static char out[1 << 16];
static char tmp[512];
static bool have_torch;
static char py_checks[16384];

/* tmp/name.yaml: synthetic px x px images, 16 train / 8 val, 4 classes, batch 8, 1 epoch. */
static void write_exp(const char *name, int px, const char *model, const char *extra) {
    char path[700], text[3000];
    snprintf(path, sizeof path, "%s/%s.yaml", tmp, name);
    snprintf(text, sizeof text,
             "name: %s\nseed: 5\ndevice: cpu\n"
             "data: {dataset: synthetic, synthetic: {train_size: 16, val_size: 8, image: [3, %d, %d], classes: 4}, "
             "workers: 0, augment: {random_crop: {size: %d, padding: 2}, horizontal_flip: true, rotation: 0}}\n"
             "model: %s\n"
             "optimizer: {lr: 0.02, momentum: 0.9, weight_decay: 5.0e-4}\n"
             "schedule: {name: constant, warmup_epochs: 0}\n"
             "train: {epochs: 1, batch_size: 8}\nparallel: {mode: single}\n"
             "checkpoint: {resume: never}\n%s",
             name, px, px, px, model, extra ? extra : "");
    test_write_file(path, text);
}

/* `runner ARGS`; the exit code (output in out, printed when it is not want). */
static int runner(int want, const char *fmt, const char *a, const char *b) {
    char args[4000];
    snprintf(args, sizeof args, fmt, a, b);
    int rc = run_runner(args, out, sizeof out);
    if (rc != want) fprintf(stderr, "runner %s -> %d (expected %d):\n%s\n", args, rc, want, out);
    return rc;
}

static void py_check(const char *fmt, const char *a, const char *b) {
    if (!have_torch) return;
    size_t n = strlen(py_checks);
    snprintf(py_checks + n, sizeof py_checks - n, "%s", n ? " ';' " : "");
    n = strlen(py_checks);
    snprintf(py_checks + n, sizeof py_checks - n, fmt, a, b);
}

/* Trains tmp/name.yaml (sets: more --set), checks the run, exports it and queues the
 * strict-load check of the export. */
static void family_run(const char *name, const char *arch, int px, const char *model, const char *extra,
                       const char *sets, const char *usage) {
    write_exp(name, px, model, extra);
    char exp[700], root[700], args[3000];
    snprintf(exp, sizeof exp, "%s/%s.yaml", tmp, name);
    snprintf(root, sizeof root, "%s/%s", tmp, name);
    snprintf(args, sizeof args, "%s --set output.root=%s %s", exp, root, sets ? sets : "");
    int rc = run_runner(args, out, sizeof out);
    if (rc) fprintf(stderr, "runner %s -> %d:\n%s\n", args, rc, out);
    CHECK_INT(rc, 0);
    const char *d = only_run_dir(root, name);
    CHECK(d != NULL);
    if (rc || !d) return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", d);
    double loss = cli_json_number(dir, "summary.json", "val_loss");
    printf("%s: val_loss %.4f after 2 steps\n", name, loss);
    CHECK(isfinite(loss) && loss > 0);
    CHECK_INT(runner(0, "export %s%s", dir, ""), 0);
    CHECK_CONTAINS(out, "model.safetensors");
    CHECK_CONTAINS(out, usage);   /* how to build the model in PyTorch */
    char file[4200];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    CHECK(access(file, R_OK) == 0);
    py_check("export %s %s 4 3 2", file, arch);
}

static void families_train_and_export(void) {
    family_run("wrn", "wrn16_8", 32, "{arch: wrn16_8, width: 1, dropout: 0.3}", "",
               "--set train.ema.decay=0.9 --set data.mixup.alpha=0.2",
               "torchvision's own constructor does not build wrn16_8 as exported (torchvision does not ship it)");
    family_run("preact", "preact_resnet18", 32, "{arch: preact_resnet18}", "",
               "--set train.label_smoothing=0.1 --set schedule.name=cosine --set schedule.warmup_epochs=0.5",
               "from torchvision_model import load");
    family_run("resnext", "resnext29_8x64d", 32, "{arch: resnext29_8x64d, width: 4, groups: 2}", "",
               "--set optimizer.nesterov=true --set optimizer.clip_grad_norm=1.0",
               "runner: resnext29_8x64d, cifar variant (conv 3x3/1, no max-pool), 3 input channels, 4 classes");
    family_run("vgg", "vgg11_bn", 32, "{arch: vgg11_bn, dropout: 0.5}", "",
               "--set train.ema.decay=0.9 --set data.mixup.cutmix_alpha=1.0",
               "does not build vgg11_bn as exported (the CIFAR variant or another width)");
    family_run("mobilenet", "mobilenet_v2", 32, "{arch: mobilenet_v2, width: 0.25}", "amp: {enabled: true, dtype: bf16}\n",
               NULL, "runner: mobilenet_v2, cifar variant (stride-1 conv1 and second stage (output stride 8))");
    family_run("mobilenet_tv", "mobilenet_v2", 32, "{arch: mobilenet_v2, width: 0.5, stem: imagenet}", "", NULL,
               "model = load(");
    family_run("resnext50", "resnext50_32x4d", 64, "{arch: resnext50_32x4d, stem: imagenet}", "", NULL,
               "    model = torchvision.models.resnext50_32x4d(num_classes=4)\n    model.load_state_dict(load_file(");
}

static void plan_names_the_variant(void) {
    write_exp("pv", 32, "{arch: vgg11_bn}", "");
    char exp[700];
    snprintf(exp, sizeof exp, "%s/pv.yaml", tmp);
    CHECK_INT(runner(0, "plan %s%s", exp, ""), 0);
    CHECK_CONTAINS(out, "model        vgg11_bn (dropout 0.5), 9753348 parameters");
    CHECK_CONTAINS(out, "stem         cifar: global average pool + 512-wide classifier (auto: 32x32 inputs are "
                        "at most 64 px)");
    CHECK_INT(runner(0, "plan %s --set data.synthetic.image=[3,96,96] --set data.augment.random_crop.size=96%s", exp,
                     ""), 0);
    CHECK_CONTAINS(out, "stem         imagenet: torchvision's 7x7 adaptive average pool + 4096-wide classifier "
                        "(auto: 96x96 inputs are larger than 64 px)");
    CHECK_INT(runner(0, "plan %s --set model.arch=mobilenet_v2 --set model.width=0.5%s", exp, ""), 0);
    CHECK_CONTAINS(out, "model        mobilenet_v2 (width 0.5, dropout 0.2), 692804 parameters");
    CHECK_CONTAINS(out, "stem         cifar: stride-1 conv1 and second stage (output stride 8) (auto: 32x32");
    CHECK_INT(runner(0, "plan %s --set model.arch=resnext29_8x64d --json%s", exp, ""), 0);
    CHECK_CONTAINS(out, "\"stem\": \"cifar\"");
    CHECK_CONTAINS(out, "\"stem_reason\": \"auto: resnext29_8x64d has only the CIFAR variant\"");
    CHECK_CONTAINS(out, "\"arch_width\": 64");
    CHECK_CONTAINS(out, "\"arch_groups\": 8");
    CHECK_CONTAINS(out, "\"arch_dropout\": -1");
    CHECK_CONTAINS(out, "\"param_count\": 34420548");
}

/* The shipped experiment files of the families plan (on the CPU, data to be downloaded),
 * with PyTorch's parameter counts (arch_vs_torch.py checks the same numbers against
 * torchvision and the reference definitions); so does every member of compare_archs.yaml
 * (its base file with the member's model keys). */
static void shipped_experiments_plan(void) {
    struct { const char *file, *model; } c[] = {
        {"wrn28_10_cifar100", "model        wrn28_10 (width 10, dropout 0.3), 36536884 parameters, 10.487 GFLOP"},
        {"preact_resnet18_cifar10", "model        preact_resnet18, 11172170 parameters, 1.111 GFLOP"},
        {"resnext29_8x64d_cifar10", "model        resnext29_8x64d (width 64, groups 8), 34426698 parameters, 10.775"},
        {"vgg16_bn_cifar10", "model        vgg16_bn (dropout 0.5), 15253578 parameters, 0.627 GFLOP"},
        {"mobilenet_v2_cifar10", "model        mobilenet_v2 (width 1, dropout 0.2), 2236682 parameters, 0.176 GFLOP"},
    };
    char path[1200];
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        snprintf(path, sizeof path, "%s/experiments/%s.yaml", test_source_dir(), c[i].file);
        CHECK_INT(runner(0, "plan %s --set device=cpu --set output.root=%s/plans", path, tmp), 0);
        CHECK_CONTAINS(out, c[i].model);
    }
    const char *members[] = {"resnet56", "preact_resnet18", "wrn16_8 --set model.dropout=0.3", "resnext29_8x64d",
                             "vgg16_bn", "mobilenet_v2"};
    snprintf(path, sizeof path, "%s/experiments/preact_resnet18_cifar10.yaml", test_source_dir());
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++) {
        char sets[200];
        snprintf(sets, sizeof sets, "--set device=cpu --set train.epochs=30 --set model.arch=%s", members[i]);
        CHECK_INT(runner(0, "plan %s %s", path, sets), 0);
    }
    snprintf(path, sizeof path, "%s/experiments/compare_archs.yaml", test_source_dir());
    char *text = test_read_file(path, NULL);
    CHECK(text != NULL);
    for (size_t i = 0; text && i < sizeof members / sizeof members[0]; i++) {
        char want[80];
        snprintf(want, sizeof want, "model.arch: %.*s", (int)strcspn(members[i], " "), members[i]);
        CHECK_CONTAINS(text, want);
    }
    free(text);
}

static void bad_input_exit_2(void) {
    write_exp("bad", 28, "{arch: vgg16_bn}", "");
    char exp[700], runs[800];
    snprintf(exp, sizeof exp, "%s/bad.yaml", tmp);
    snprintf(runs, sizeof runs, "%s/bad_runs", tmp);
    CHECK_INT(runner(2, "%s --set output.root=%s", exp, runs), 2);
    CHECK_CONTAINS(out, "28x28 inputs are too small for vgg16_bn (cifar: global average pool + 512-wide "
                        "classifier); it takes at least 32x32; use larger inputs (data.augment.random_crop.size, "
                        "data.image_size) or another model.arch");
    CHECK(access(runs, F_OK) != 0);   /* refused before any run directory */
    CHECK_INT(runner(2, "plan %s --set data.synthetic.image=[3,24,24] --set data.augment.random_crop.size=24 "
                     "--set model.arch=vgg11_bn --set model.stem=imagenet%s", exp, ""), 2);
    CHECK_CONTAINS(out, "24x24 inputs are too small for vgg11_bn (imagenet: torchvision's 7x7 adaptive average pool "
                        "+ 4096-wide classifier); it takes at least 32x32");
    CHECK_CONTAINS(out, "the CIFAR variant (model.stem: cifar)");
    CHECK_INT(runner(2, "plan %s --set model.arch=wrn40_4%s", exp, ""), 2);
    CHECK_CONTAINS(out, "model.arch: 'wrn40_4' is not one of resnet18, resnet34");
    CHECK_CONTAINS(out, "wrn16_8, wrn28_10, preact_resnet18, resnext29_8x64d, vgg11_bn, vgg13_bn");
    CHECK_INT(runner(2, "plan %s --set model.arch=wrn28_10 --set model.width=4.5%s", exp, ""), 2);
    CHECK_CONTAINS(out, "model.width: 4.5: wrn28_10's width is the widen factor k, a whole number >= 1 (default 10)");
    CHECK_INT(runner(2, "plan %s --set model.groups=4%s", exp, ""), 2);
    CHECK_CONTAINS(out, "model.groups: vgg16_bn has no grouped convolutions");
}

/* `runner NAME.yaml SETS` under tmp/NAME; its export (static path) or NULL. */
static const char *train_export(const char *name, const char *sets) {
    static char file[4300];
    char exp[700], root[700], args[3000];
    snprintf(exp, sizeof exp, "%s/%s.yaml", tmp, name);
    snprintf(root, sizeof root, "%s/%s", tmp, name);
    snprintf(args, sizeof args, "%s --set output.root=%s %s", exp, root, sets);
    if (run_runner(args, out, sizeof out)) {
        fprintf(stderr, "runner %s:\n%s\n", args, out);
        return NULL;
    }
    const char *d = only_run_dir(root, name);
    if (!d) return NULL;
    snprintf(file, sizeof file, "%s/model.safetensors", d);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", d);
    return runner(0, "export %s%s", dir, "") == 0 ? file : NULL;
}

static void finetune_from_torchvision(void) {
    if (!have_torch) {
        printf("  (no PyTorch/torchvision at /usr/bin/python3: fine-tuning cases skipped)\n");
        return;
    }
    char pth[700], st[700], cmd[3000], sets[2000];
    snprintf(pth, sizeof pth, "%s/tv_mobilenet.pth", tmp);
    snprintf(st, sizeof st, "%s/tv_mobilenet.safetensors", tmp);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/cli/torchvision_check.py make mobilenet_v2 4 5 %s && "
             "/usr/bin/python3 %s/scripts/torchvision_weights.py %s %s --arch mobilenet_v2", test_source_dir(), pth,
             test_source_dir(), pth, st);
    int rc = test_run_cmd(cmd, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "mobilenet_v2, imagenet stem, 4 classes, 3 input channels, 314 tensors");
    if (rc) return;
    write_exp("ft", 32, "{arch: mobilenet_v2, stem: imagenet}", "");
    snprintf(sets, sizeof sets, "--set model.init_from=%s --set optimizer.lr=1e-30 --set optimizer.momentum=0", st);
    const char *file = train_export("ft", sets);
    CHECK(file != NULL);
    if (file) py_check("compare %s %s --atol 1e-20", file, pth);   /* every parameter torchvision's */
    snprintf(sets, sizeof sets, "--set model.init_from=%s --set model.init_head=reinit --set model.num_classes=6 "
             "--set optimizer.lr=1e-30 --set optimizer.momentum=0", st);
    write_exp("ft_reinit", 32, "{arch: mobilenet_v2, stem: imagenet}", "");
    file = train_export("ft_reinit", sets);
    CHECK(file != NULL);
    if (file) py_check("compare %s %s --skip classifier.1. --atol 1e-20", file, pth);
    /* a CIFAR-variant VGG's export into the ImageNet variant */
    char vgg[700];
    snprintf(vgg, sizeof vgg, "%s/vgg", tmp);
    const char *d = only_run_dir(vgg, "vgg");
    CHECK(d != NULL);
    if (!d) return;
    snprintf(sets, sizeof sets, "%s/vgg.yaml --set model.stem=imagenet --set model.init_from=%s/model.safetensors "
             "--set output.root=%s/bad", tmp, d, tmp);
    CHECK_INT(runner(2, "%s%s", sets, ""), 2);
    CHECK_CONTAINS(out, "has classifier.0.weight [512,512], the CIFAR variant's 512-wide head, but this run builds "
                        "vgg11_bn's ImageNet variant (classifier.0.weight [4096,25088]; model.stem: imagenet); set "
                        "model.stem: cifar");
}

static void torch_loads_the_exports(void) {
    if (!have_torch) {
        printf("  (no PyTorch/torchvision at /usr/bin/python3: strict loads not checked)\n");
        return;
    }
    if (!py_checks[0]) return;
    char cmd[sizeof py_checks + 300];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/cli/torchvision_check.py %s", test_source_dir(), py_checks);
    int rc = test_run_cmd(cmd, out, sizeof out);
    if (rc) fprintf(stderr, "%s -> %d:\n%s\n", cmd, rc, out);
    CHECK_INT(rc, 0);
    printf("%s", out);
    CHECK_CONTAINS(out, "loaded wrn16_8 (cifar stem): 82 tensors, 174676 parameters");
    CHECK_CONTAINS(out, "loaded preact_resnet18 (cifar stem): 107 tensors, 11169092 parameters");
    CHECK_CONTAINS(out, "loaded resnext29_8x64d (cifar stem): 188 tensors, 946884 parameters");
    CHECK_CONTAINS(out, "loaded vgg11_bn (cifar stem): 62 tensors, 9753348 parameters");
    CHECK_CONTAINS(out, "loaded mobilenet_v2 (cifar stem): 314 tensors, 243236 parameters");
    CHECK_CONTAINS(out, "loaded mobilenet_v2 (imagenet stem): 314 tensors, 692804 parameters");
    CHECK_CONTAINS(out, "loaded resnext50_32x4d (imagenet stem): 320 tensors, 22988100 parameters");
    CHECK_CONTAINS(out, "compare: 158 tensors within 1e-20");   /* strict: torchvision's parameters */
    CHECK_CONTAINS(out, "compare: 156 tensors within 1e-20");   /* reinit: all but classifier.1.* */
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    have_torch = test_run_cmd("/usr/bin/python3 -c 'import torch, torchvision'", NULL, 0) == 0;
    TEST_RUN(plan_names_the_variant);
    TEST_RUN(bad_input_exit_2);
    TEST_RUN(shipped_experiments_plan);
    TEST_RUN(families_train_and_export);
    TEST_RUN(finetune_from_torchvision);
    TEST_RUN(torch_loads_the_exports);
    int rc = test_main_end();
    test_remove_dir_if_passed(tmp);
    return rc;
}
