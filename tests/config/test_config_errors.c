/* test_config_errors.c: every class of bad experiment file gets one ERR_INPUT message
 * with the file, line:col and the fix. Each case asserts the exact place and the key
 * parts of the text (suggestion, bounds, found value). Messages are printed so the test
 * log doubles as a catalogue of what users see.
 * Valid files, defaults and the writers are in test_config_load.c, merging in
 * test_config_merge.c, config_hash and schema-wide checks in test_config_schema.c.
 */
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runner/config.h"
#include "tests/test.h"

#define MIN "data: {dataset: cifar10}\nmodel: {arch: resnet18}\n"
#define MODEL "model: {arch: resnet18}\n"

static char dir[512];
static char path_buf[1024];
static err_t err;

static const char *at(const char *name) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    return path_buf;
}

/* Writes text to dir/name, loads it with the --set items, expects ERR_INPUT, and returns
 * the message with the directory prefix cut off ("exp.yaml:3:5: ..."). */
static const char *fail_sets(const char *name, const char *text, const char *const *sets,
                             int n) {
    if (text) test_write_file(at(name), text);
    experiment_t *x = malloc(sizeof *x);
    int rc = config_load(at(name), sets, n, x, &err);
    free(x);
    CHECK_INT(rc, -1);
    CHECK_INT(err.code, ERR_INPUT);
    size_t dl = strlen(dir);
    const char *m = !strncmp(err.msg, dir, dl) && err.msg[dl] == '/' ? err.msg + dl + 1 : err.msg;
    printf("  %s\n", m);
    return m;
}
static const char *fail(const char *text) {
    return fail_sets("exp.yaml", text, NULL, 0);
}

static void test_unknown_keys(void) {
    CHECK_STR(fail(MIN "optimizer:\n  lrr: 0.1\n"),
              "exp.yaml:4:3: optimizer.lrr: unknown key; did you mean optimizer.lr?");
    CHECK_STR(fail(MIN "lr: 0.1\n"), "exp.yaml:3:1: lr: unknown key; did you mean optimizer.lr?");
    CHECK_STR(fail(MIN "optimiser:\n  lr: 0.1\n"),
              "exp.yaml:3:1: optimiser: unknown key; did you mean optimizer?");
    CHECK_STR(fail(MIN "train: {epocs: 3}\n"),
              "exp.yaml:3:9: train.epocs: unknown key; did you mean train.epochs?");
    CHECK_STR(fail(MIN "optimizer: {LR: 0.1}\n"),
              "exp.yaml:3:13: optimizer.LR: unknown key; did you mean optimizer.lr?");
    const char *m = fail(MIN "zzzzzz: 1\n");
    CHECK_CONTAINS(m, "exp.yaml:3:1: zzzzzz: unknown key; valid keys at the top level are: "
                      "name, seed, device, data, model, optimizer, schedule, train, amp");
    m = fail(MIN "amp: {qqqqqq: 1}\n");
    CHECK_CONTAINS(m, "amp.qqqqqq: unknown key; valid keys under amp are: enabled, dtype, "
                      "init_scale, growth_interval, tf32");
    CHECK_STR(fail(MODEL "data:\n  dataset: cifar10\n  augment: {random_crop: {size: 24, pading: 2}}\n"),
              "exp.yaml:4:37: data.augment.random_crop.pading: unknown key; did you mean "
              "data.augment.random_crop.padding?");
    /* dotted keys are accepted in files too, and a typo in one is still caught */
    CHECK_STR(fail("data: {da: cifar10}\nmodel: {arch: resnet18}\n"),
              "exp.yaml:1:8: data.da: unknown key; did you mean data.dataset?");
    CHECK_STR(fail(MIN "optimizer.lrr: 0.1\n"),
              "exp.yaml:3:1: optimizer.lrr: unknown key; did you mean optimizer.lr?");
}

static void test_wrong_types(void) {
    CHECK_STR(fail(MIN "train:\n  epochs: ten\n"),
              "exp.yaml:4:11: train.epochs: expected an integer, found 'ten'");
    CHECK_STR(fail(MIN "train: {epochs: 2.5}\n"),
              "exp.yaml:3:17: train.epochs: expected an integer, found '2.5'");
    CHECK_STR(fail(MIN "train: {epochs: null}\n"),
              "exp.yaml:3:17: train.epochs: expected an integer, found null; give a value, or "
              "remove the key to use the default");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, shuffle: maybe}\n"),
              "exp.yaml:2:35: data.shuffle: expected true or false, found 'maybe'");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, shuffle: 1}\n"),
              "exp.yaml:2:35: data.shuffle: expected true or false, found '1'");
    CHECK_STR(fail(MIN "optimizer: [sgd, 0.1]\n"),
              "exp.yaml:3:12: optimizer: expected a mapping of optimizer keys, found a list");
    CHECK_STR(fail(MIN "optimizer: sgd\n"),
              "exp.yaml:3:12: optimizer: expected a mapping of optimizer keys, found 'sgd'; "
              "did you mean `optimizer: {name: sgd}`?");
    CHECK_STR(fail("data: cifar10\nmodel: {arch: resnet18}\n"),
              "exp.yaml:1:7: data: expected a mapping of data keys, found 'cifar10'; did you mean "
              "`data: {dataset: cifar10}`?");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: ResNet18\n"),
              "exp.yaml:2:8: model: expected a mapping of model keys, found 'ResNet18'; did you "
              "mean `model: {arch: ResNet18}`?");
    CHECK_STR(fail(MIN "amp: true\n"),
              "exp.yaml:3:6: amp: expected a mapping of amp keys, found 'true'; did you mean "
              "`amp: {enabled: true}`?");
    CHECK_STR(fail(MIN "optimizer: {lr: '0,1'}\n"),
              "exp.yaml:3:17: optimizer.lr: expected a number, found '0,1'; use a dot as the "
              "decimal separator");
    CHECK_STR(fail(MIN "schedule: {milestones: '60, 120'}\n"),
              "exp.yaml:3:24: schedule.milestones: expected a list, found '60, 120'; put the "
              "entries in brackets: [60, 120]");
    CHECK_STR(fail(MIN "train:\n  epochs:10\n"),
              "exp.yaml:4:3: train: expected a mapping of train keys, found 'epochs:10'; if "
              "this was meant as `key: value`, put a space after the colon");
    CHECK_STR(fail(MIN "logging: {wandb: {project: [a, b]}}\n"),
              "exp.yaml:3:28: logging.wandb.project: expected a string, found a list");
    CHECK_STR(fail(MIN "logging: {wandb: {tags: [a, [b]]}}\n"),
              "exp.yaml:3:29: logging.wandb.tags[1]: expected a string, found a list");
    CHECK_STR(fail(MIN "parallel: {devices: [0, x]}\n"),
              "exp.yaml:3:25: parallel.devices[1]: expected an integer, found 'x'");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, augment: {random_crop: 7}}\n"),
              "exp.yaml:2:49: data.augment.random_crop: expected false or a mapping like "
              "{size: 32, padding: 4}, found '7'");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, augment: {rotation: true}}\n"),
              "exp.yaml:2:46: data.augment.rotation: true is not an angle; give the degrees "
              "(e.g. 15) or false");
    CHECK_STR(fail(MIN "? [a, b]\n: 1\n"),
              "exp.yaml:3:3: a key must be a name, found a list; write `name: value`");
    CHECK_STR(fail(MIN "optimizer: {\"lr \": 0.1}\n"),
              "exp.yaml:3:13: key 'lr ' has spaces around it; remove them");
    CHECK_STR(fail(MIN "optimizer: {<<: 5}\n"),
              "exp.yaml:3:17: <<: expected an alias of a mapping, e.g. <<: *defaults");
}

/* train.cuda_fusion takes only the option names, each once. */
static void test_cuda_fusion_names(void) {
    CHECK_STR(fail(MIN "train: {cuda_fusion: [conv_stat]}\n"),
              "exp.yaml:3:23: train.cuda_fusion[0]: 'conv_stat' is not one of graph_conv, conv_stats, "
              "dgrad_dbn, dgrad_accum, vec16, bn_remask, bn_wide_final, bn_fold_running, dgrad_accum_tune, bn_more_splits, pdl, heur_b, bn_mask_bits, bn_dual_add, wgrad_f32, bn_one_pass, bn_apply_tune, bn_persist, all; did you mean conv_stats?");
    CHECK_STR(fail(MIN "train: {cuda_fusion: [vec16, vec16]}\n"),
              "exp.yaml:3:30: train.cuda_fusion[1]: 'vec16' appears twice; list each once");
    CHECK_STR(fail(MIN "train: {cuda_fusion: fast}\n"),
              "exp.yaml:3:22: train.cuda_fusion[0]: 'fast' is not one of graph_conv, conv_stats, dgrad_dbn, "
              "dgrad_accum, vec16, bn_remask, bn_wide_final, bn_fold_running, dgrad_accum_tune, bn_more_splits, pdl, heur_b, bn_mask_bits, bn_dual_add, wgrad_f32, bn_one_pass, bn_apply_tune, bn_persist, all");
    CHECK_STR(fail(MIN "train: {cuda_fusion: [bn_remsk]}\n"),
              "exp.yaml:3:23: train.cuda_fusion[0]: 'bn_remsk' is not one of graph_conv, conv_stats, "
              "dgrad_dbn, dgrad_accum, vec16, bn_remask, bn_wide_final, bn_fold_running, dgrad_accum_tune, bn_more_splits, pdl, heur_b, bn_mask_bits, bn_dual_add, wgrad_f32, bn_one_pass, bn_apply_tune, bn_persist, all; did you mean bn_remask?");
}

static void test_ranges(void) {
    CHECK_STR(fail(MIN "optimizer: {lr: -0.1}\n"),
              "exp.yaml:3:17: optimizer.lr: -0.1 is out of range; must be > 0");
    CHECK_STR(fail(MIN "optimizer: {momentum: 1.5}\n"),
              "exp.yaml:3:23: optimizer.momentum: 1.5 is out of range; must be between 0 and 1");
    CHECK_STR(fail(MIN "optimizer: {betas: [0.9, 1.0]}\n"),
              "exp.yaml:3:26: optimizer.betas[1]: 1.0 is out of range; must be >= 0 and < 1");
    CHECK_STR(fail(MIN "train: {epochs: 99999999999999999999}\n"),
              "exp.yaml:3:17: train.epochs: 99999999999999999999 is out of range; must be "
              "between 1 and 1000000");
    CHECK_STR(fail(MIN "train: {batch_size: 3000000000}\n"),
              "exp.yaml:3:21: train.batch_size: 3000000000 is out of range; must be between 1 "
              "and 16777216");
    CHECK_STR(fail(MIN "seed: -1\n"), "exp.yaml:3:7: seed: -1 is out of range; must be >= 0");
    CHECK_STR(fail(MIN "optimizer: {lr: .inf}\n"),
              "exp.yaml:3:17: optimizer.lr: '.inf' is not a finite number; give a number such "
              "as 0.1");
    CHECK_STR(fail(MIN "schedule: {gamma: .NaN}\n"),
              "exp.yaml:3:19: schedule.gamma: '.NaN' is not a finite number; give a number "
              "such as 0.1");
    CHECK_STR(fail(MIN "optimizer: {lr: 1e999}\n"),
              "exp.yaml:3:17: optimizer.lr: 1e999 is too large; at most about 1.8e308");
    CHECK_STR(fail(MIN "seed: 18446744073709551616\n"),
              "exp.yaml:3:7: seed: 18446744073709551616 is too large; at most "
              "18446744073709551615");
    CHECK_STR(fail(MIN "train: {max_steps: 9223372036854775808}\n"),
              "exp.yaml:3:20: train.max_steps: 9223372036854775808 is too large; at most "
              "9223372036854775807");
    CHECK_STR(fail(MIN "train: {max_steps: -9223372036854775809}\n"),
              "exp.yaml:3:20: train.max_steps: -9223372036854775809 is out of range; must be >= 1");
    CHECK_STR(fail(MIN "train: {max_steps: 0}\n"),
              "exp.yaml:3:20: train.max_steps: 0 is out of range; must be >= 1");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, augment: {rotation: 200}}\n"),
              "exp.yaml:2:46: data.augment.rotation: 200 is out of range; must be between 0 "
              "and 180");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, normalize: {mean: [0.5, 0.5, 0.5], std: [0.2, 0, 0.2]}}\n"),
              "exp.yaml:2:72: data.normalize.std[1]: 0 is out of range; must be > 0");
    CHECK_STR(fail(MIN "schedule: {milestones: [60, 50]}\n"),
              "exp.yaml:3:29: schedule.milestones[1]: 50 after 60; the entries must be "
              "strictly increasing, e.g. [60, 120, 160]");
    CHECK_STR(fail(MIN "parallel: {devices: [1, 1]}\n"),
              "exp.yaml:3:25: parallel.devices[1]: 1 appears twice; list each once");
    CHECK_STR(fail(MIN "parallel: {devices: []}\n"),
              "exp.yaml:3:21: parallel.devices: 0 entries; it needs 1 to 16 (or null)");
    CHECK_STR(fail(MIN "optimizer: {betas: [0.9]}\n"),
              "exp.yaml:3:20: optimizer.betas: 1 entries; it needs exactly 2");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, normalize: {mean: [1, 2, 3, 4, 5], std: [1]}}\n"),
              "exp.yaml:2:44: data.normalize.mean: 5 entries; at most 4");
    CHECK_STR(fail(MIN "parallel: {mode: dpp}\n"),
              "exp.yaml:3:18: parallel.mode: 'dpp' is not one of single, dp, ddp; did you mean "
              "dp?");
    CHECK_STR(fail(MIN "device: gpu\n"),
              "exp.yaml:3:9: device: 'gpu' is not one of auto, cpu, cuda; did you mean cuda?");
    CHECK_STR(fail("data: {dataset: Fashion-MNIST}\nmodel: {arch: resnet20}\n"),
              "exp.yaml:1:17: data.dataset: 'Fashion-MNIST' is not one of cifar10, cifar100, "
              "fashion_mnist, synthetic, image_folder; did you mean fashion_mnist?");
    CHECK_STR(fail(MIN "amp: {dtype: fp32}\n"),
              "exp.yaml:3:14: amp.dtype: 'fp32' is not one of fp16, bf16");
    CHECK_STR(fail(MIN "parallel: {grad_compression: int8}\n"),
              "exp.yaml:3:30: parallel.grad_compression: 'int8' is not one of none, fp16, bf16");
    CHECK_STR(fail("data: {dataset: cifar1000}\nmodel: {arch: resnet18}\n"),
              "exp.yaml:1:17: data.dataset: 'cifar1000' is not one of cifar10, cifar100, "
              "fashion_mnist, synthetic, image_folder; did you mean cifar100?");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: resnet51}\n"),
              "exp.yaml:2:15: model.arch: 'resnet51' is not one of resnet18, resnet34, "
              "resnet50, resnet101, resnet152, resnet20, resnet32, resnet44, resnet56, "
              "resnet110, wide_resnet50_2, wide_resnet101_2, resnext50_32x4d, resnext101_32x8d, "
              "resnext101_64x4d, wrn16_8, wrn28_10, preact_resnet18, resnext29_8x64d, vgg11_bn, "
              "vgg13_bn, vgg16_bn, vgg19_bn, mobilenet_v2; did you mean resnet50?");
    CHECK_CONTAINS(fail("data: {dataset: cifar10}\nmodel: {arch: wrn28_12}\n"),
                   "model.arch: 'wrn28_12' is not one of resnet18");
    CHECK_CONTAINS(fail("data: {dataset: cifar10}\nmodel: {arch: wrn28_12}\n"), "did you mean wrn28_10?");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: vgg11_bn, dropout: 1.0}\n"),
              "exp.yaml:2:34: model.dropout: 1.0 is out of range; must be >= 0 and < 1");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: wrn16_8, width: 0}\n"),
              "exp.yaml:2:31: model.width: 0 is out of range; must be > 0 and <= 4096");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: resnext29_8x64d, groups: -2}\n"),
              "exp.yaml:2:40: model.groups: -2 is out of range; must be between 0 and 1024");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, download_md5: abc}\n"),
              "exp.yaml:2:40: data.download_md5: 'abc' is not an md5 sum; give 32 hex digits "
              "or null");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, download_url: ftp://x/y.tgz}\n"),
              "exp.yaml:2:40: data.download_url: 'ftp://x/y.tgz' is not a URL; give an "
              "http://, https:// or file:// URL, or null");
    CHECK_STR(fail(MIN "checkpoint: {resume: ''}\n"),
              "exp.yaml:3:22: checkpoint.resume: must not be empty");
    /* issue 17 */
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, augment: {auto: randaug}}\n"),
              "exp.yaml:2:42: data.augment.auto: 'randaug' is not one of randaugment, trivialaugment "
              "or null");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, mixup: {mode: element}}\n"),
              "exp.yaml:2:40: data.mixup.mode: 'element' is not one of batch, pair, elem");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, augment: {random_erasing: {mode: random}}}\n"),
              "exp.yaml:2:59: data.augment.random_erasing.mode: 'random' is not one of const, rand, "
              "pixel; did you mean rand?");
    CHECK_CONTAINS(fail(MODEL "data: {dataset: cifar10, augment: {randaugment: {magnitude: 31}}}\n"),
                   "data.augment.randaugment.magnitude: 31 is out of range");
    CHECK_CONTAINS(fail(MODEL "data: {dataset: cifar10, mixup: {prob: 1.5}}\n"), "data.mixup.prob: 1.5 is out of range");
    CHECK_CONTAINS(fail(MODEL "data: {dataset: cifar10, augment: {random_erasing: {count: 0}}}\n"),
                   "data.augment.random_erasing.count: 0 is out of range");
}

static void test_required_and_cross_checks(void) {
    CHECK_STR(fail("model: {arch: resnet18}\n"),
              "exp.yaml: data.dataset is missing; add it, e.g. `data: {dataset: cifar10}` "
              "(cifar10 | cifar100 | fashion_mnist | synthetic)");
    CHECK_STR(fail("data: {dataset: cifar10}\n"),
              "exp.yaml: model.arch is missing; add it, e.g. `model: {arch: resnet18}` "
              "(resnet18, resnet34, resnet50, resnet101, resnet152, resnet20, resnet32, resnet44, resnet56, "
              "resnet110, wide_resnet50_2, wide_resnet101_2, resnext50_32x4d, resnext101_32x8d, "
              "resnext101_64x4d, wrn16_8, wrn28_10, preact_resnet18, resnext29_8x64d, vgg11_bn, vgg13_bn, "
              "vgg16_bn, vgg19_bn, mobilenet_v2)");
    CHECK_STR(fail(MIN "train: {batch_size: 100}\nparallel: {world_size: 3}\n"),
              "exp.yaml:3:21: train.batch_size 100 is not divisible by parallel.world_size 3 x "
              "train.grad_accum 1 = 3; use a multiple of 3");
    CHECK_STR(fail(MIN "train: {batch_size: 128, grad_accum: 3}\nparallel: {mode: single}\n"),
              "exp.yaml:3:21: train.batch_size 128 is not divisible by train.grad_accum 3; use "
              "a multiple of 3");
    CHECK_STR(fail(MIN "parallel: {mode: single, world_size: 2}\n"),
              "exp.yaml:3:38: parallel.world_size 2 with parallel.mode single; use mode ddp or "
              "dp, or world_size 1");
    CHECK_STR(fail(MIN "parallel: {world_size: 4, devices: [0, 1]}\n"),
              "exp.yaml:3:36: parallel.devices lists 2 devices but mode ddp with world_size 4 "
              "uses 4 per host; list 4, or null for the first ones");
    CHECK_STR(fail(MIN "device: cpu\nparallel: {backend: nccl}\n"),
              "exp.yaml:4:21: parallel.backend nccl needs device cuda (or auto); use shm on cpu");
    CHECK_STR(fail(MIN "optimizer: {momentum: 0, nesterov: true}\n"),
              "exp.yaml:3:36: optimizer.nesterov needs optimizer.momentum > 0; set a momentum "
              "or nesterov: false");
    CHECK_STR(fail("data: {dataset: synthetic, synthetic: {image: [2, 8, 8]}, augment: {auto: trivialaugment}}\n"
                   MODEL),
              "exp.yaml:1:75: data.augment.auto: torchvision's ops take 1- or 3-channel images and "
              "synthetic has 2 channels; set data.augment.auto: null");
    CHECK_STR(fail("data: {dataset: cifar100}\nmodel: {arch: resnet18, num_classes: 5}\n"),
              "exp.yaml:2:38: model.num_classes 5 is less than the 100 classes of cifar100; use "
              "at least 100 (or 0 for the dataset's)");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: resnet20, stem: imagenet}\n"),
              "exp.yaml:2:31: model.stem: imagenet: resnet20 has only the CIFAR variant (torchvision does "
              "not ship it); use model.stem: cifar (or auto), or an arch torchvision has (resnet18..152, "
              "wide_resnet50_2, resnext50_32x4d, vgg*_bn, mobilenet_v2)");
    /* model.width / groups / dropout where the architecture has none, or a value it cannot
     * take (model/arch/arch_table.h's rows, checked here with the key's place) */
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: wrn16_8, stem: imagenet}\n"),
              "exp.yaml:2:30: model.stem: imagenet: wrn16_8 has only the CIFAR variant (torchvision does "
              "not ship it); use model.stem: cifar (or auto), or an arch torchvision has (resnet18..152, "
              "wide_resnet50_2, resnext50_32x4d, vgg*_bn, mobilenet_v2)");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: resnet50, width: 2}\n"),
              "exp.yaml:2:32: model.width: resnet50 has no width setting (model.width applies to wrn*, "
              "wide_resnet*, resnext* and mobilenet_v2); remove the key");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: wrn28_10, width: 2.5}\n"),
              "exp.yaml:2:32: model.width: 2.5: wrn28_10's width is the widen factor k, a whole number >= 1 "
              "(default 10)");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: mobilenet_v2, width: 8}\n"),
              "exp.yaml:2:36: model.width: 8: mobilenet_v2's width multiplier must be in [0.05, 4] "
              "(torchvision's pretrained ones: 0.35 .. 1.4; default 1.0)");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: resnext29_8x64d, width: 64, groups: 128}\n"),
              "exp.yaml:2:39: model.width 64 x model.groups makes resnext29_8x64d's widest layer 32768 "
              "channels; at most 16384 (lower model.width or model.groups)");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: vgg16_bn, groups: 4}\n"),
              "exp.yaml:2:33: model.groups: vgg16_bn has no grouped convolutions (model.groups is the "
              "cardinality of resnext*); remove the key, or use a resnext arch");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: preact_resnet18, dropout: 0.3}\n"),
              "exp.yaml:2:41: model.dropout: preact_resnet18 has no dropout layer (model.dropout applies "
              "to wrn*, vgg*_bn and mobilenet_v2); remove the key");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: resnet18, stem: 7x7}\n"),
              "exp.yaml:2:31: model.stem: '7x7' is not one of auto, cifar, imagenet");
    CHECK_STR(fail("data: {dataset: cifar10}\nmodel: {arch: resnet18, init_head: fresh}\n"),
              "exp.yaml:2:36: model.init_head: 'fresh' is not one of strict, reinit");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, normalize: {mean: [0.5, 0.5, 0.5], std: [0.2, 0.2]}}\n"),
              "exp.yaml:2:66: data.normalize: mean has 3 entries and std has 2; give both, with "
              "the same length");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, normalize: {mean: [0.5, 0.5], std: [0.2, 0.2]}}\n"),
              "exp.yaml:2:61: data.normalize: 2 values for cifar10, which has 3 channels; give "
              "1 value or 3");
    CHECK_STR(fail(MODEL "data: {dataset: cifar10, augment: {random_crop: {size: 48, padding: 4}}}\n"),
              "exp.yaml:2:56: data.augment.random_crop.size 48 is larger than the padded image "
              "(32 + 2 x 4); use at most 40");
    CHECK_STR(fail(MIN "schedule: {warmup_epochs: 5}\ntrain: {epochs: 2}\n"),
              "exp.yaml:3:27: schedule.warmup_epochs 5 is longer than train.epochs 2; use at "
              "most 2");
    CHECK_CONTAINS(fail(MIN "matrix:\n  - {name: a}\n"),
              "exp.yaml:3:1: this is a matrix file (it has matrix:); run it with `runner "
              "compare ");
}

static void test_yaml_level(void) {
    const char *m = fail("data: {dataset: cifar10\nmodel: {arch: resnet18}\n");
    CHECK_CONTAINS(m, "exp.yaml:2:6: YAML syntax error: did not find expected ',' or '}' (while "
                      "parsing a flow mapping at line 1); check the indentation, colons and "
                      "quotes of line 2: \"model: {arch: resnet18}\"");
    CHECK_STR(fail(MIN "train: {epochs: 10\n"),
              "exp.yaml:4:1: YAML syntax error: did not find expected ',' or '}' (while parsing "
              "a flow mapping at line 3); check the indentation, colons and quotes of line 3: "
              "\"train: {epochs: 10\"");
    CHECK_STR(fail(MIN "name: a: b\n"),
              "exp.yaml:3:8: YAML syntax error: mapping values are not allowed in this context; "
              "quote a value that contains ': ', and check the indentation of line 3: \"name: a: "
              "b\"");
    CHECK_STR(fail(MIN "  optimizer: {lr: 0.1}\n"),
              "exp.yaml:3:3: YAML syntax error: did not find expected key (while parsing a block "
              "mapping at line 1); check the indentation, colons and quotes of line 3: \"  "
              "optimizer: {lr: 0.1}\"");
    CHECK_STR(fail("data:\n\tdataset: cifar10\nmodel: {arch: resnet18}\n"),
              "exp.yaml:2:1: a tab is used for indentation; YAML indents with spaces only, so "
              "replace the tab(s) with spaces: \"<TAB>dataset: cifar10\"");
    CHECK_STR(fail(""), "exp.yaml: the file is empty (or only comments); an experiment needs at "
                        "least `data: {dataset: cifar10}` and `model: {arch: resnet18}`");
    CHECK_CONTAINS(fail("# just a comment\n\n"), "exp.yaml: the file is empty (or only comments)");
    CHECK_STR(fail("- data\n- model\n"),
              "exp.yaml:1:1: the top level is a list; an experiment file is a mapping of keys, "
              "e.g. `model: {arch: resnet18}` on its own line");
    CHECK_CONTAINS(fail("resnet18\n"), "exp.yaml:1:1: the top level is the text 'resnet18'; ");
    CHECK_STR(fail("data: {dataset: caf\xe9}\n"),
              "exp.yaml:1:20: invalid UTF-8 (byte 0xE9); save the file as UTF-8 (it may be in "
              "Latin-1 or another legacy encoding)");
    CHECK_STR(fail(MIN "optimizer:\n  lr: 0.1\n  momentum: 0.9\n  lr: 0.2\n"),
              "exp.yaml:6:3: duplicate key 'lr' (first at line 4); keep one of them");
    CHECK_STR(fail(MIN "optimizer: {lr: 0.1}\noptimizer.lr: 0.2\n"),
              "exp.yaml:4:1: optimizer.lr is given twice (first at line 3); keep one of them");
    CHECK_STR(fail(MIN "---\nseed: 1\n"),
              "exp.yaml:4:1: a second YAML document starts here (after ---); an experiment file "
              "holds one document, so remove the extra ---");
    /* NUL bytes and UTF-16 need byte-exact writes */
    FILE *f = fopen(at("nul.yaml"), "wb");
    fwrite("se\0d: 1\n", 1, 8, f);
    fclose(f);
    CHECK_STR(fail_sets("nul.yaml", NULL, NULL, 0),
              "nul.yaml:1:3: NUL byte in the file (is it a binary or UTF-16 file?); experiment "
              "files are UTF-8 text");
    f = fopen(at("u16.yaml"), "wb");
    fwrite("\xff\xfes\0e\0", 1, 6, f);
    fclose(f);
    CHECK_STR(fail_sets("u16.yaml", NULL, NULL, 0),
              "u16.yaml: the file is UTF-16 (it starts with a UTF-16 byte order mark); save it as "
              "UTF-8");
}

static void test_bounds_on_work(void) {
    /* billion laughs through << merges: 10^8 expansions if nothing stopped it */
    char *bomb = malloc(1 << 16);
    char *inner = malloc(1 << 16);
    snprintf(inner, 1 << 16, "{lr: 0.1}");
    for (int l = 0; l < 8; l++) {
        char *next = malloc(1 << 16);
        int n = snprintf(next, 1 << 16, "{<<: [&a%d %s", l, inner);
        for (int k = 0; k < 9; k++) n += snprintf(next + n, (1 << 16) - n, ", *a%d", l);
        snprintf(next + n, (1 << 16) - n, "]}");
        free(inner);
        inner = next;
    }
    snprintf(bomb, 1 << 16, MIN "optimizer: %s\n", inner);
    free(inner);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const char *m = fail(bomb);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(bomb);
    CHECK_CONTAINS(m, "this document has more than 10000 values, counting what aliases expand "
                      "to (an alias bomb?); an experiment needs about 100");
    CHECK((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9 < 1.0);
    /* a mapping that merges itself */
    CHECK_CONTAINS(fail(MIN "optimizer: &o {<<: *o}\n"),
                   "nesting is deeper than 64 levels (a recursive alias?); experiment files "
                   "need at most 5 levels");
    /* plain deep nesting */
    char deep[2048];
    int n = snprintf(deep, sizeof deep, MIN "optimizer: ");
    for (int i = 0; i < 70; i++) n += snprintf(deep + n, sizeof deep - n, "{<<: ");
    n += snprintf(deep + n, sizeof deep - n, "{lr: 0.1}");
    for (int i = 0; i < 70; i++) n += snprintf(deep + n, sizeof deep - n, "}");
    snprintf(deep + n, sizeof deep - n, "\n");
    CHECK_CONTAINS(fail(deep), "exp.yaml:3:");
    CHECK_CONTAINS(err.msg, "brackets nested deeper than 64 levels");
    /* deep flow nesting is refused before libyaml, which is quadratic in it; brackets in
       quotes and comments do not count */
    CHECK_STR(fail(MIN "name: \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\" "
                   "# {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{\n"),
              "exp.yaml:3:7: name: '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[' "
              "is not a plain name: it contains '['; use letters, digits and . _ - +");
    size_t nb = 200000;
    char *nest = malloc(2 * nb + 64);
    int o = snprintf(nest, 64, MIN "optimizer: ");
    memset(nest + o, '[', nb);
    memset(nest + o + nb, ']', nb);
    nest[o + 2 * nb] = '\0';
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_STR(fail(nest), "exp.yaml:3:76: brackets nested deeper than 64 levels; experiment "
                          "files need at most 5");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9 < 1.0);
    /* the same nesting spread over lines, one "x: [" per line */
    o = snprintf(nest, 64, MIN "optimizer: [\n");
    for (int i = 0; i < 30000; i++) o += snprintf(nest + o, 8, "x: [\n");
    memset(nest + o, ']', 30001);
    nest[o + 30001] = '\0';
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_STR(fail(nest), "exp.yaml:67:4: brackets nested deeper than 64 levels; experiment "
                          "files need at most 5");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9 < 1.0);
    free(nest);
    /* brackets inside plain words do not count */
    char words[4096];
    o = snprintf(words, sizeof words, MIN "logging:\n  wandb:\n    tags:\n");
    for (int i = 0; i < 100; i++) o += snprintf(words + o, sizeof words - o, "    - a[%d\n", i);
    CHECK_STR(fail(words), "exp.yaml:6:5: logging.wandb.tags: 100 entries; at most 16");
    /* many anchors and aliases (libyaml resolves aliases by a linear search) */
    char *many = malloc(1 << 20);
    o = snprintf(many, 1 << 20, MIN "x: [");
    for (int i = 0; i < 600; i++) o += snprintf(many + o, (1 << 20) - o, "&a%d 1, *a%d, ", i, i);
    snprintf(many + o, (1 << 20) - o, "1]\n");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_STR(fail(many), "exp.yaml:3:7785: more than 1000 anchors and aliases (& and *); an "
                          "experiment needs a handful");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9 < 1.0);
    /* a huge mapping is refused before the (quadratic) duplicate-key check */
    o = snprintf(many, 1 << 20, MIN "optimizer:\n");
    for (int i = 0; i < 1001; i++) o += snprintf(many + o, (1 << 20) - o, "  k%d: 1\n", i);
    CHECK_STR(fail(many), "exp.yaml:4:3: a mapping with 1001 keys; experiment files have a few "
                          "dozen (is this the right file?)");
    free(many);
    /* files over 1 MiB are refused before parsing */
    size_t big = (1 << 20) + 10;
    char *text = malloc(big + 1);
    memset(text, '#', big);
    text[big] = '\0';
    CHECK_STR(fail(text), "exp.yaml: the file is 1.0 MiB; experiment files are limited to 1 MiB "
                          "(is this the right file?)");
    free(text);
}

static void test_paths_and_names(void) {
    fail_sets("missing.yaml", NULL, NULL, 0);
    CHECK_CONTAINS(err.msg, "missing.yaml: no such file; check the path (relative paths start at "
                            "the current directory, ");
    mkdir(at("adir.yaml"), 0755);
    CHECK_STR(fail_sets("adir.yaml", NULL, NULL, 0),
              "adir.yaml: is a directory; give the experiment's .yaml file");
    err_t e;
    experiment_t *x = malloc(sizeof *x);
    CHECK_INT(config_load("/dev/null", NULL, 0, x, &e), -1);
    CHECK_STR(e.msg, "/dev/null: is not a regular file; give the experiment's .yaml file");
    free(x);
    CHECK_STR(fail(MIN "name: ../evil\n"),
              "exp.yaml:3:7: name: '../evil' is not a plain name: it contains '/' (names one "
              "directory, not a path); use letters, digits and . _ - +");
    CHECK_STR(fail(MIN "name: .hidden\n"),
              "exp.yaml:3:7: name: '.hidden' is not a plain name: it starts with a dot (a hidden "
              "directory); use letters, digits and . _ - +");
    CHECK_STR(fail(MIN "name: ..\n"),
              "exp.yaml:3:7: name: '..' is not a plain name: it is a directory reference; use "
              "letters, digits and . _ - +");
    CHECK_STR(fail(MIN "name: my run\n"),
              "exp.yaml:3:7: name: 'my run' is not a plain name: it contains a space; use "
              "letters, digits and . _ - +");
    CHECK_STR(fail(MIN "name: \"a\\tb\"\n"),
              "exp.yaml:3:7: name: 'a\tb' is not a plain name: it contains a control character; "
              "use letters, digits and . _ - +");
    CHECK_STR(fail(MIN "name: ''\n"), "exp.yaml:3:7: name: must not be empty");
    char longname[256];
    memset(longname, 'a', 101);
    longname[101] = '\0';
    char text[512];
    snprintf(text, sizeof text, MIN "name: %s\n", longname);
    CHECK_CONTAINS(fail(text), "is not a plain name: it is 101 characters long; at most 100");
    CHECK_STR(fail_sets("my exp.yaml", MIN, NULL, 0),
              "my exp.yaml: the run name 'my exp' taken from the file name contains a space; add "
              "`name: <letters, digits, . _ - +>` to the file or rename it");
}

static void test_base_errors(void) {
    fail(MIN "base: nothere.yaml\n");
    char want[1200];
    snprintf(want, sizeof want,
             "exp.yaml:3:7: base file 'nothere.yaml' not found (looked for %s/nothere.yaml); "
             "base: paths are relative to the directory of exp.yaml",
             dir);
    CHECK_STR(err.msg + strlen(dir) + 1, want);
    test_write_file(at("a.yaml"), "base: b.yaml\n" MIN);
    test_write_file(at("b.yaml"), "seed: 3\nbase: a.yaml\n");
    CHECK_STR(fail_sets("a.yaml", NULL, NULL, 0),
              "b.yaml:2:7: base: a.yaml includes b.yaml which includes a.yaml, a cycle; remove "
              "one of these base: keys");
    test_write_file(at("self.yaml"), "base: self.yaml\n" MIN);
    CHECK_STR(fail_sets("self.yaml", NULL, NULL, 0),
              "self.yaml:1:7: base: self.yaml includes self.yaml, a cycle; remove one of these "
              "base: keys");
    mkdir(at("bdir"), 0755);
    CHECK_STR(fail(MIN "base: bdir\n"),
              "exp.yaml:3:7: base: 'bdir' is a directory; give a .yaml file");
    CHECK_STR(fail(MIN "base: [a.yaml]\n"),
              "exp.yaml:3:7: base: expected a file path such as common.yaml, found a list");
    /* an error inside a base file names the base file */
    test_write_file(at("common.yaml"), "optimizer: {lr: zero}\n");
    CHECK_STR(fail("base: common.yaml\n" MIN),
              "common.yaml:1:17: optimizer.lr: expected a number, found 'zero'");
    test_write_file(at("mbase.yaml"), MIN "matrix: [{name: a}]\n");
    CHECK_STR(fail("base: mbase.yaml\n"),
              "mbase.yaml:3:1: matrix: only allowed in the file given to `runner compare`, not "
              "in a base file");
}

static void test_set_errors(void) {
    test_write_file(at("ok.yaml"), MIN);
    const char *s1[] = {"optimizer.lrr=0.1"};
    CHECK_STR(fail_sets("ok.yaml", NULL, s1, 1),
              "--set optimizer.lrr=0.1: optimizer.lrr: unknown key; did you mean optimizer.lr?");
    const char *s2[] = {"optimizer.lr=abc"};
    CHECK_STR(fail_sets("ok.yaml", NULL, s2, 1),
              "--set optimizer.lr=abc: optimizer.lr: expected a number, found 'abc'");
    const char *s3[] = {"optimizer.lr"};
    CHECK_STR(fail_sets("ok.yaml", NULL, s3, 1),
              "--set optimizer.lr: expected KEY=VALUE; e.g. --set optimizer.lr=0.05");
    const char *s4[] = {"parallel.devices=[0,1"};
    CHECK_CONTAINS(fail_sets("ok.yaml", NULL, s4, 1),
                   "--set parallel.devices=[0,1: the value is not valid YAML (");
    const char *s5[] = {"base=other.yaml"};
    CHECK_STR(fail_sets("ok.yaml", NULL, s5, 1),
              "--set base=other.yaml: base: only allowed at the top level of an experiment file, "
              "not in --set or a matrix entry");
    const char *s6[] = {"train.max_steps=0"};
    CHECK_STR(fail_sets("ok.yaml", NULL, s6, 1),
              "--set train.max_steps=0: train.max_steps: 0 is out of range; must be >= 1");
    const char *s7[] = {"parallel.world_size=3"};
    CHECK_STR(fail_sets("ok.yaml", NULL, s7, 1),
              "--set parallel.world_size=3: train.batch_size 128 is not divisible by "
              "parallel.world_size 3 x train.grad_accum 1 = 3; use a multiple of 3");
    const char *s8[] = {"train.epochs="};
    CHECK_STR(fail_sets("ok.yaml", NULL, s8, 1),
              "--set train.epochs=: train.epochs: expected an integer, found null; give a value, "
              "or remove the key to use the default");
}

/* Issue 23: every schema error of a file at once, in file order, one per line; what stops
 * the walk (a libyaml parse error, a bound on work) stays one. */
/* fail() with the test directory cut from every line, not only the first. */
static const char *fail_all(const char *text) {
    static char buf[sizeof err.msg];
    const char *m = fail(text);
    size_t dl = strlen(dir), o = 0;
    for (const char *p = m; *p && o + 1 < sizeof buf;) {
        if (!strncmp(p, dir, dl) && p[dl] == '/') p += dl + 1;
        else buf[o++] = *p++;
    }
    buf[o] = '\0';
    return buf;
}

static void test_all_errors_at_once(void) {
    CHECK_STR(fail_all("name: many\n"
                   "data: {dataset: cifar10, workers: many}\n"
                   "model:\n  arch: resnet19\n"
                   "optimizer: {lr: -1, momentum: 0.9}\n"
                   "trian: {epochs: 3}\n"
                   "train: {epochs: 0, batch_size: 128}\n"
                   "schedule: {name: cosine, name: multistep}\n"),
              "exp.yaml:2:35: data.workers: expected an integer, found 'many'\n"
              "exp.yaml:4:9: model.arch: 'resnet19' is not one of resnet18, resnet34, resnet50, resnet101, "
              "resnet152, resnet20, resnet32, resnet44, resnet56, resnet110, wide_resnet50_2, wide_resnet101_2, "
              "resnext50_32x4d, resnext101_32x8d, resnext101_64x4d, wrn16_8, wrn28_10, preact_resnet18, "
              "resnext29_8x64d, vgg11_bn, vgg13_bn, vgg16_bn, vgg19_bn, mobilenet_v2; did you mean resnet18?\n"
              "exp.yaml:5:17: optimizer.lr: -1 is out of range; must be > 0\n"
              "exp.yaml:6:1: trian: unknown key; did you mean train?\n"
              "exp.yaml:7:17: train.epochs: 0 is out of range; must be between 1 and 1000000\n"
              "exp.yaml:8:26: duplicate key 'name' (first at line 8); keep one of them");
    /* file order even where a << merge is applied before the mapping's own keys */
    CHECK_STR(fail_all(MIN "defaults: &d {lr: zero}\noptimizer: {momentum: 2, <<: *d}\n"),
              "exp.yaml:3:1: defaults: unknown key; valid keys at the top level are: name, seed, device, data, "
              "model, optimizer, schedule, train, amp, parallel, logging, checkpoint, output\n"
              "exp.yaml:3:19: optimizer.lr: expected a number, found 'zero'\n"
              "exp.yaml:4:23: optimizer.momentum: 2 is out of range; must be between 0 and 1");
    /* 30 unknown keys: the first ones that fit, then how many more */
    char text[4096] = MIN;
    for (int i = 0; i < 30; i++) snprintf(text + strlen(text), sizeof text - strlen(text), "zzz%02d: 1\n", i);
    const char *m = fail_all(text);
    CHECK(!strncmp(m, "exp.yaml:3:1: zzz00: unknown key;", 33));
    CHECK_CONTAINS(m, "more errors; fix these and run again");
    int lines = 1;
    for (const char *q = m; *q; q++) lines += *q == '\n';
    CHECK(lines >= 3 && lines <= 21);
    /* a parse error stops libyaml: one message */
    m = fail(MIN "train: {epochs: 0}\noptimizer: [unclosed\n");
    CHECK(strchr(m, '\n') == NULL);
    /* cross-key checks run only on a file without key errors, and stay one */
    CHECK_STR(fail(MIN "train: {epochs: 2}\nschedule: {warmup_epochs: 5}\n"),
              "exp.yaml:4:27: schedule.warmup_epochs 5 is longer than train.epochs 2; use at most 2");
}

int main(void) {
    if (test_tmpdir(dir, sizeof dir)) return 1;
    TEST_RUN(test_unknown_keys);
    TEST_RUN(test_wrong_types);
    TEST_RUN(test_cuda_fusion_names);
    TEST_RUN(test_ranges);
    TEST_RUN(test_required_and_cross_checks);
    TEST_RUN(test_yaml_level);
    TEST_RUN(test_bounds_on_work);
    TEST_RUN(test_paths_and_names);
    TEST_RUN(test_base_errors);
    TEST_RUN(test_set_errors);
    TEST_RUN(test_all_errors_at_once);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    test_run_cmd(cmd, NULL, 0);
    return test_main_end();
}
