/* test_config_load.c: what valid experiment files load to, key by key. Defaults (and the
 * ones that depend on the dataset), every key set to a non-default value, the lenient
 * value forms (anchors and << merge keys included), the resolved.yaml round trip, and
 * train.cuda_fusion.
 * base: chains, --set and matrices are in test_config_merge.c; config_hash, the docs'
 * coverage of the schema and the shipped experiments in test_config_schema.c; bad files
 * in test_config_errors.c.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/config/config_test_util.h"

static void test_defaults(void) {
    experiment_t *x = load("exp.yaml", MIN, NULL, 0);
    CHECK_STR(x->name, "exp");
    char real[1100];
    CHECK(realpath(at("exp.yaml"), real) != NULL);
    CHECK_STR(x->source_path, real);
    CHECK(x->source_path[0] == '/');
    CHECK_INT(x->seed, 0);
    CHECK_INT(x->device, DEVICE_AUTO);
    CHECK_STR(x->data.dataset, "cifar10");
    CHECK_STR(x->data.root, "data/cifar-10-batches-bin");
    CHECK(!x->data.download);
    CHECK_STR(x->data.download_url, "");
    CHECK_STR(x->data.download_md5, "");
    CHECK(x->data.shuffle);
    CHECK_INT(x->data.workers, 2);
    CHECK(x->data.augment.random_crop);
    CHECK_INT(x->data.augment.crop_size, 32);
    CHECK_INT(x->data.augment.crop_padding, 4);
    CHECK(x->data.augment.horizontal_flip);
    CHECK_NEAR(x->data.augment.rotation, 15, 0, 0);
    CHECK_INT(x->data.n_norm, 3);
    CHECK(!x->data.norm_set);
    CHECK_NEAR(x->data.mean[0], 0.4914, 0, 0);
    CHECK_NEAR(x->data.std[2], 0.2616, 0, 0);
    CHECK_INT(x->data.synthetic.train_size, 1024);
    CHECK_INT(x->data.synthetic.val_size, 256);
    CHECK_INT(x->data.synthetic.image[0], 3);
    CHECK_INT(x->data.synthetic.image[2], 32);
    CHECK_INT(x->data.synthetic.classes, 10);
    CHECK_STR(x->model.arch, "resnet18");
    CHECK_INT(x->model.num_classes, 10);
    CHECK(!x->model.zero_init_residual);
    CHECK_STR(x->model.init_from, "");
    CHECK_INT(x->model.stem, STEM_AUTO);
    CHECK_INT(x->model.init_head, INIT_HEAD_STRICT);
    CHECK_INT(x->optimizer.name, OPT_SGD);
    CHECK_NEAR(x->optimizer.lr, 0.1, 0, 0);
    CHECK_NEAR(x->optimizer.momentum, 0.9, 0, 0);
    CHECK(!x->optimizer.nesterov);
    CHECK_NEAR(x->optimizer.weight_decay, 5e-4, 0, 0);
    CHECK(!x->optimizer.no_weight_decay_on_bn_and_bias);
    CHECK_NEAR(x->optimizer.betas[0], 0.9, 0, 0);
    CHECK_NEAR(x->optimizer.betas[1], 0.999, 0, 0);
    CHECK_NEAR(x->optimizer.eps, 1e-8, 0, 0);
    CHECK_INT(x->schedule.name, SCHED_MULTISTEP);
    CHECK_INT(x->schedule.n_milestones, 3);
    CHECK_INT(x->schedule.milestones[0], 60);
    CHECK_INT(x->schedule.milestones[2], 160);
    CHECK_NEAR(x->schedule.gamma, 0.2, 0, 0);
    CHECK_NEAR(x->schedule.warmup_epochs, 1, 0, 0);
    CHECK_NEAR(x->schedule.min_lr, 0, 0, 0);
    CHECK_INT(x->train.epochs, 200);
    CHECK_INT(x->train.batch_size, 128);
    CHECK_INT(x->train.grad_accum, 1);
    CHECK_NEAR(x->train.label_smoothing, 0, 0, 0);
    CHECK_INT(x->train.max_steps, -1);
    CHECK_INT(x->train.eval_every, 1);
    CHECK(x->train.deterministic);
    CHECK(!x->amp.enabled);
    CHECK_INT(x->amp.dtype, PREC_FP16);
    CHECK_NEAR(x->amp.init_scale, 65536, 0, 0);
    CHECK_INT(x->amp.growth_interval, 2000);
    CHECK(x->amp.tf32);
    CHECK_INT(x->parallel.mode, PAR_DDP);
    CHECK_INT(x->parallel.world_size, 2);
    CHECK_INT(x->parallel.n_devices, 0);
    CHECK_INT(x->parallel.backend, COMM_AUTO);
    CHECK_NEAR(x->parallel.bucket_mb, 25, 0, 0);
    CHECK_INT(x->parallel.grad_compression, PREC_NONE);
    CHECK(!x->parallel.sync_bn);
    CHECK_INT(x->parallel.nnodes, 1);
    CHECK_STR(x->parallel.master_addr, "127.0.0.1");
    CHECK_INT(x->parallel.master_port, 0);
    CHECK_NEAR(x->parallel.timeout_s, 300, 0, 0);
    CHECK_INT(x->logging.print_every, 50);
    CHECK(x->logging.csv);
    CHECK(!x->logging.tensorboard);
    CHECK_INT(x->logging.wandb.mode, WANDB_DISABLED);
    CHECK_STR(x->logging.wandb.project, "");
    CHECK_INT(x->logging.wandb.n_tags, 0);
    CHECK_INT(x->checkpoint.every_epochs, 1);
    CHECK_INT(x->checkpoint.keep_last, 2);
    CHECK(x->checkpoint.keep_best);
    CHECK_STR(x->checkpoint.resume, "auto");
    CHECK_STR(x->output.root, "runs");
    free(x);
}

static void test_dataset_defaults(void) {
    experiment_t *x = load("c100.yaml", "data: {dataset: cifar100}\nmodel: {arch: resnet50}\n", NULL, 0);
    CHECK_STR(x->data.root, "data/cifar-100-binary");
    CHECK_INT(x->model.num_classes, 100);
    CHECK_NEAR(x->data.mean[0], 0.5071, 0, 0);
    CHECK_NEAR(x->data.std[1], 0.2564, 0, 0);
    free(x);
    x = load("fm.yaml", "data: {dataset: fashion_mnist}\nmodel: {arch: resnet20}\n", NULL, 0);
    CHECK_STR(x->data.root, "/usr/share/datasets/fashion-mnist");
    CHECK_INT(x->model.num_classes, 10);
    CHECK_INT(x->data.augment.crop_size, 28);
    CHECK_INT(x->data.n_norm, 1);
    CHECK_NEAR(x->data.mean[0], 0.2860, 0, 0);
    free(x);
    x = load("syn.yaml",
             "data:\n  dataset: synthetic\n  synthetic: {image: [1, 16, 16], classes: 7}\n"
             "model: {arch: resnet20}\n",
             NULL, 0);
    CHECK_STR(x->data.root, "");
    CHECK_INT(x->model.num_classes, 7);
    CHECK_INT(x->data.augment.crop_size, 16);
    CHECK_INT(x->data.n_norm, 0);
    CHECK_INT(x->data.synthetic.image[0], 1);
    free(x);
    /* explicit values win over the dataset's */
    x = load("exp.yaml",
             "data: {dataset: cifar10, root: /d/c10, normalize: {mean: [0.5], std: [0.25]}}\n"
             "model: {arch: resnet18, num_classes: 12}\n",
             NULL, 0);
    CHECK_STR(x->data.root, "/d/c10");
    CHECK_INT(x->model.num_classes, 12);
    CHECK_INT(x->data.n_norm, 1);
    CHECK(x->data.norm_set);
    CHECK_NEAR(x->data.std[0], 0.25, 0, 0);
    free(x);
    x = load("exp.yaml", "data: {dataset: cifar10, normalize: false}\nmodel: {arch: resnet18}\n",
             NULL, 0);
    CHECK_INT(x->data.n_norm, 0);
    CHECK(x->data.norm_set);
    free(x);
}

/* Every key set to a non-default value, in block style with comments. */
static const char *FULL =
    "# everything\n"
    "name: full_run\n"
    "seed: 18446744073709551615\n"
    "device: cuda\n"
    "data:\n"
    "  dataset: cifar100\n"
    "  root: /srv/c100   # mirror\n"
    "  download: true\n"
    "  download_url: https://example.org/c100.tgz\n"
    "  download_md5: 0123456789abcdef0123456789ABCDEF\n"
    "  shuffle: false\n"
    "  workers: 0\n"
    "  augment:\n"
    "    random_crop: {size: 30, padding: 2}\n"
    "    horizontal_flip: false\n"
    "    rotation: 7.5\n"
    "  normalize: {mean: [0.1, 0.2, 0.3], std: [0.4, 0.5, 0.6]}\n"
    "  synthetic: {train_size: 10, val_size: 5, image: [1, 8, 9], classes: 3}\n"
    "model:\n"
    "  arch: resnet110\n"
    "  num_classes: 128\n"
    "  zero_init_residual: true\n"
    "  init_from: w/start.safetensors\n"
    "  stem: cifar\n"
    "  init_head: reinit\n"
    "optimizer:\n"
    "  name: adamw\n"
    "  lr: 0.003\n"
    "  momentum: 0.5\n"
    "  nesterov: true\n"
    "  weight_decay: 0.05\n"
    "  no_weight_decay_on_bn_and_bias: true\n"
    "  betas: [0.8, 0.95]\n"
    "  eps: 1.0e-6\n"
    "schedule:\n"
    "  name: cosine\n"
    "  milestones: [3, 7]\n"
    "  gamma: 0.5\n"
    "  warmup_epochs: 0.5\n"
    "  min_lr: 1.0e-5\n"
    "train:\n"
    "  epochs: 9\n"
    "  batch_size: 96\n"
    "  grad_accum: 2\n"
    "  label_smoothing: 0.1\n"
    "  max_steps: 12345678901\n"
    "  eval_every: 3\n"
    "  deterministic: false\n"
    "amp:\n"
    "  enabled: true\n"
    "  dtype: bf16\n"
    "  init_scale: 1024\n"
    "  growth_interval: 10\n"
    "  tf32: false\n"
    "parallel:\n"
    "  mode: dp\n"
    "  world_size: 4\n"
    "  devices: [3, 1, 0, 2]\n"
    "  backend: nccl\n"
    "  bucket_mb: 0.5\n"
    "  grad_compression: bf16\n"
    "  sync_bn: true\n"
    "  nnodes: 1\n"
    "  master_addr: node-7.cluster\n"
    "  master_port: 29500\n"
    "  timeout_s: 60.5\n"
    "logging:\n"
    "  print_every: 7\n"
    "  csv: false\n"
    "  tensorboard: true\n"
    "  wandb:\n"
    "    mode: offline\n"
    "    project: proj\n"
    "    entity: ent\n"
    "    tags: [a, \"b c\", 'd\"e']\n"
    "    group: g1\n"
    "checkpoint:\n"
    "  every_epochs: 0\n"
    "  keep_last: 5\n"
    "  keep_best: false\n"
    "  resume: never\n"
    "output:\n"
    "  root: /scratch/runs\n";

static void test_every_key(void) {
    experiment_t *x = load("full.yaml", FULL, NULL, 0);
    CHECK_STR(x->name, "full_run");
    CHECK(x->seed == UINT64_MAX);
    CHECK_INT(x->device, DEVICE_CUDA);
    CHECK_STR(x->data.root, "/srv/c100");
    CHECK(x->data.download);
    CHECK_STR(x->data.download_url, "https://example.org/c100.tgz");
    CHECK_STR(x->data.download_md5, "0123456789abcdef0123456789ABCDEF");
    CHECK(!x->data.shuffle);
    CHECK_INT(x->data.workers, 0);
    CHECK(x->data.augment.random_crop);
    CHECK_INT(x->data.augment.crop_size, 30);
    CHECK_INT(x->data.augment.crop_padding, 2);
    CHECK(!x->data.augment.horizontal_flip);
    CHECK_NEAR(x->data.augment.rotation, 7.5, 0, 0);
    CHECK_INT(x->data.n_norm, 3);
    CHECK_NEAR(x->data.mean[2], 0.3, 0, 0);
    CHECK_NEAR(x->data.std[0], 0.4, 0, 0);
    CHECK_INT(x->data.synthetic.train_size, 10);
    CHECK_INT(x->data.synthetic.val_size, 5);
    CHECK_INT(x->data.synthetic.image[2], 9);
    CHECK_INT(x->data.synthetic.classes, 3);
    CHECK_STR(x->model.arch, "resnet110");
    CHECK_INT(x->model.num_classes, 128);
    CHECK(x->model.zero_init_residual);
    CHECK_STR(x->model.init_from, "w/start.safetensors");
    CHECK_INT(x->model.stem, STEM_CIFAR);
    CHECK_INT(x->model.init_head, INIT_HEAD_REINIT);
    CHECK_INT(x->optimizer.name, OPT_ADAMW);
    CHECK_NEAR(x->optimizer.lr, 0.003, 0, 0);
    CHECK_NEAR(x->optimizer.momentum, 0.5, 0, 0);
    CHECK(x->optimizer.nesterov);
    CHECK_NEAR(x->optimizer.weight_decay, 0.05, 0, 0);
    CHECK(x->optimizer.no_weight_decay_on_bn_and_bias);
    CHECK_NEAR(x->optimizer.betas[1], 0.95, 0, 0);
    CHECK_NEAR(x->optimizer.eps, 1e-6, 0, 0);
    CHECK_INT(x->schedule.name, SCHED_COSINE);
    CHECK_INT(x->schedule.n_milestones, 2);
    CHECK_INT(x->schedule.milestones[1], 7);
    CHECK_NEAR(x->schedule.gamma, 0.5, 0, 0);
    CHECK_NEAR(x->schedule.warmup_epochs, 0.5, 0, 0);
    CHECK_NEAR(x->schedule.min_lr, 1e-5, 0, 0);
    CHECK_INT(x->train.epochs, 9);
    CHECK_INT(x->train.batch_size, 96);
    CHECK_INT(x->train.grad_accum, 2);
    CHECK_NEAR(x->train.label_smoothing, 0.1, 0, 0);
    CHECK(x->train.max_steps == 12345678901LL);
    CHECK_INT(x->train.eval_every, 3);
    CHECK(!x->train.deterministic);
    CHECK(x->amp.enabled);
    CHECK_INT(x->amp.dtype, PREC_BF16);
    CHECK_NEAR(x->amp.init_scale, 1024, 0, 0);
    CHECK_INT(x->amp.growth_interval, 10);
    CHECK(!x->amp.tf32);
    CHECK_INT(x->parallel.mode, PAR_DP);
    CHECK_INT(x->parallel.world_size, 4);
    CHECK_INT(x->parallel.n_devices, 4);
    CHECK_INT(x->parallel.devices[0], 3);
    CHECK_INT(x->parallel.devices[3], 2);
    CHECK_INT(x->parallel.backend, COMM_NCCL);
    CHECK_NEAR(x->parallel.bucket_mb, 0.5, 0, 0);
    CHECK_INT(x->parallel.grad_compression, PREC_BF16);
    CHECK(x->parallel.sync_bn);
    CHECK_STR(x->parallel.master_addr, "node-7.cluster");
    CHECK_INT(x->parallel.master_port, 29500);
    CHECK_NEAR(x->parallel.timeout_s, 60.5, 0, 0);
    CHECK_INT(x->logging.print_every, 7);
    CHECK(!x->logging.csv);
    CHECK(x->logging.tensorboard);
    CHECK_INT(x->logging.wandb.mode, WANDB_OFFLINE);
    CHECK_STR(x->logging.wandb.project, "proj");
    CHECK_STR(x->logging.wandb.entity, "ent");
    CHECK_INT(x->logging.wandb.n_tags, 3);
    CHECK_STR(x->logging.wandb.tags[1], "b c");
    CHECK_STR(x->logging.wandb.tags[2], "d\"e");
    CHECK_STR(x->logging.wandb.group, "g1");
    CHECK_INT(x->checkpoint.every_epochs, 0);
    CHECK_INT(x->checkpoint.keep_last, 5);
    CHECK(!x->checkpoint.keep_best);
    CHECK_STR(x->checkpoint.resume, "never");
    CHECK_STR(x->output.root, "/scratch/runs");
    free(x);
}

/* The forms a user may write and what they mean (see docs/experiment-files.md). */
static void test_lenient_forms(void) {
    experiment_t *x = load("exp.yaml",
                           "model: {arch: resnet18}\n"
                           "data: {dataset: cifar10, shuffle: no, download: Yes, augment: "
                           "{random_crop: off, rotation: false}}\n"
                               "optimizer: {lr: \"0.05\", name: AdamW}\n"
                               "train: {epochs: 1e2, max_steps: ~}\n"
                               "parallel: {devices: 1, world_size: 1, mode: DDP}\n"
                               "logging: {wandb: {tags: solo, project: 42}}\n"
                               "checkpoint:\n"
                               "output:\n",
                           NULL, 0);
    CHECK(!x->data.shuffle);
    CHECK(x->data.download);
    CHECK(!x->data.augment.random_crop);
    CHECK_NEAR(x->data.augment.rotation, 0, 0, 0);
    CHECK_NEAR(x->optimizer.lr, 0.05, 0, 0);
    CHECK_INT(x->optimizer.name, OPT_ADAMW);
    CHECK_INT(x->train.epochs, 100);
    CHECK_INT(x->train.max_steps, -1);
    CHECK_INT(x->parallel.n_devices, 1);
    CHECK_INT(x->parallel.devices[0], 1);
    CHECK_INT(x->parallel.mode, PAR_DDP);
    CHECK_INT(x->logging.wandb.n_tags, 1);
    CHECK_STR(x->logging.wandb.tags[0], "solo");
    CHECK_STR(x->logging.wandb.project, "42");
    CHECK_STR(x->output.root, "runs");
    free(x);
    /* dotted keys in a file, a UTF-8 BOM, CRLF line ends, mode single forcing world_size 1 */
    x = load("exp.yaml",
             "\xEF\xBB\xBF" "data.dataset: cifar10\r\nmodel.arch: resnet18\r\n"
             "optimizer.lr: 0.2\r\nparallel.mode: single\r\n",
             NULL, 0);
    CHECK_NEAR(x->optimizer.lr, 0.2, 0, 0);
    CHECK_INT(x->parallel.world_size, 1);
    free(x);
    /* anchors, aliases and << merge keys (this mapping's own keys win) */
    x = load("exp.yaml",
             MIN "optimizer: &opt {lr: 0.3, momentum: 0.7}\n"
                 "schedule: {milestones: &ms [2, 4]}\n"
                 "train: {<<: {epochs: 5, batch_size: 64}, epochs: 6}\n",
             NULL, 0);
    CHECK_NEAR(x->optimizer.lr, 0.3, 0, 0);
    CHECK_INT(x->schedule.milestones[1], 4);
    CHECK_INT(x->train.epochs, 6);
    CHECK_INT(x->train.batch_size, 64);
    free(x);
    /* random_crop.size given alone turns cropping back on */
    const char *sets[] = {"data.augment.random_crop.size=24"};
    x = load("exp2.yaml",
             "data: {dataset: cifar10, augment: {random_crop: false}}\nmodel: {arch: resnet18}\n",
             sets, 1);
    CHECK(x->data.augment.random_crop);
    CHECK_INT(x->data.augment.crop_size, 24);
    CHECK_INT(x->data.augment.crop_padding, 4);
    free(x);
}

/* Writes x as YAML into dir/name and loads it back. */
static experiment_t *round_trip(const experiment_t *x, const char *name) {
    FILE *f = fopen(at(name), "w");
    CHECK_INT(config_write_yaml(x, f), 0);
    fclose(f);
    return load(name, NULL, NULL, 0);
}

static void check_equal_after_trip(const experiment_t *a, const experiment_t *b) {
    experiment_t ca = *a, cb = *b;
    /* the only fields allowed to differ: where it was loaded from, and whether the
       normalisation was spelled out (resolved.yaml always spells it out) */
    memcpy(cb.source_path, ca.source_path, sizeof ca.source_path);
    cb.data.norm_set = ca.data.norm_set;
    CHECK(memcmp(&ca, &cb, sizeof ca) == 0);
    CHECK(config_hash(a) == config_hash(b));
}

static void test_round_trip(void) {
    experiment_t *x = load("full.yaml", FULL, NULL, 0);
    experiment_t *y = round_trip(x, "resolved_full.yaml");
    check_equal_after_trip(x, y);
    CHECK_STR(y->name, "full_run");
    free(y);
    free(x);
    const char *sets[] = {"optimizer.lr=0.1234567890123", "data.normalize=false",
                          "logging.wandb.tags=[\"q\\\"uote\", \"back\\\\slash\"]",
                          "parallel.devices=[5, 6]", "train.max_steps=77"};
    x = load("exp.yaml", MIN, sets, 5);
    CHECK_STR(x->logging.wandb.tags[0], "q\"uote");
    CHECK_STR(x->logging.wandb.tags[1], "back\\slash");
    y = round_trip(x, "resolved_min.yaml");
    check_equal_after_trip(x, y);
    free(y);
    /* defaults: every key is present in the file */
    char *text = test_read_file(at("resolved_min.yaml"), NULL);
    CHECK(text != NULL);
    if (text) {
        CHECK_CONTAINS(text, "\nname: \"exp\"");
        CHECK_CONTAINS(text, "\n  lr: 0.1234567890123 ");
        CHECK_CONTAINS(text, "\n  eps: 1.0e-08 ");
        CHECK_CONTAINS(text, "\n  max_steps: 77 ");
        CHECK_CONTAINS(text, "\n  devices: [5, 6] ");
        CHECK_CONTAINS(text, "\n  normalize: false ");
        CHECK_CONTAINS(text, "\n    random_crop: {size: 32, padding: 4} ");
        CHECK_CONTAINS(text, "\n  tf32: true ");
        CHECK_CONTAINS(text, "\n  timeout_s: 300.0 ");
        CHECK_CONTAINS(text, "\n  wandb:\n    mode: disabled");
        CHECK_CONTAINS(text, "\n  download_url: null ");
        free(text);
    }
    free(x);
    /* PyYAML reads resolved.yaml with the same types (floats stay floats) */
    char cmd[1400], out[512];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import yaml,sys; d=yaml.safe_load(open('%s')); "
             "print(type(d['optimizer']['eps']).__name__, type(d['amp']['init_scale']).__name__, "
             "d['train']['max_steps'], d['parallel']['devices'], d['data']['normalize'])\"",
             at("resolved_min.yaml"));
    int rc = test_run_cmd(cmd, out, sizeof out);
    if (rc == 0) CHECK_STR(out, "float float 77 [5, 6] False\n");
    else printf("  (python3 yaml not available: %d %s)\n", rc, out);
}

/* train.cuda_fusion: names matched case-insensitively and stored as spelled in the
 * schema, [all] by default ([] turns every option off), written to resolved.yaml and
 * read back. */
/* train.cuda_fusion: LIST loads as the n names want (as the schema spells them) and
 * survives resolved.yaml */
static void check_fusion_names(const char *file, const char *list, int n, const char *const *want) {
    char yaml[512], res[64];
    snprintf(yaml, sizeof yaml, "%strain: {cuda_fusion: %s}\n", MIN, list);
    experiment_t *x = load(file, yaml, NULL, 0);
    CHECK_INT(x->train.n_cuda_fusion, n);
    for (int i = 0; i < n && i < x->train.n_cuda_fusion; i++) CHECK_STR(x->train.cuda_fusion[i], want[i]);
    snprintf(res, sizeof res, "resolved_%s", file);
    experiment_t *y = round_trip(x, res);
    check_equal_after_trip(x, y);
    free(y);
    free(x);
}

static void test_cuda_fusion_key(void) {
    experiment_t *x = load("exp.yaml", MIN, NULL, 0);
    CHECK_INT(x->train.n_cuda_fusion, 1);
    CHECK_STR(x->train.cuda_fusion[0], "all");
    experiment_t *y = round_trip(x, "resolved_default_fuse.yaml");
    check_equal_after_trip(x, y);
    free(y);
    free(x);
    x = load("off.yaml", MIN "train: {cuda_fusion: []}\n", NULL, 0);
    CHECK_INT(x->train.n_cuda_fusion, 0);
    y = round_trip(x, "resolved_off.yaml");
    check_equal_after_trip(x, y);
    CHECK_INT(y->train.n_cuda_fusion, 0);
    free(y);
    free(x);
    const char *off[] = {"train.cuda_fusion=[]"};
    x = load("exp.yaml", MIN, off, 1);
    CHECK_INT(x->train.n_cuda_fusion, 0);
    free(x);
    static const char *const fuse[] = {"conv_stats", "graph_conv", "vec16"};
    check_fusion_names("fuse.yaml", "[conv_stats, GRAPH_CONV, vec16]", 3, fuse);
    /* the longest names are stored whole (a 16-byte field once cut dgrad_accum_tune) */
    static const char *const longest[] = {"dgrad_accum_tune", "bn_fold_running", "bn_wide_final"};
    check_fusion_names("long.yaml", "[dgrad_accum_tune, bn_fold_running, bn_wide_final]", 3, longest);
    x = load("one.yaml", MIN "train: {cuda_fusion: dgrad_accum}\n", NULL, 0);   /* a scalar is a list of one */
    CHECK_INT(x->train.n_cuda_fusion, 1);
    CHECK_STR(x->train.cuda_fusion[0], "dgrad_accum");
    free(x);
    static const char *const rm[] = {"all", "bn_remask"};   /* a name all has may be named too */
    check_fusion_names("rm.yaml", "[all, BN_Remask]", 2, rm);
    const char *sets[] = {"train.cuda_fusion=[all]"};
    x = load("exp.yaml", MIN, sets, 1);
    CHECK_INT(x->train.n_cuda_fusion, 1);
    CHECK_STR(x->train.cuda_fusion[0], "all");
    free(x);
}

int main(void) {
    if (config_test_begin()) return 1;
    TEST_RUN(test_defaults);
    TEST_RUN(test_dataset_defaults);
    TEST_RUN(test_every_key);
    TEST_RUN(test_lenient_forms);
    TEST_RUN(test_round_trip);
    TEST_RUN(test_cuda_fusion_key);
    return config_test_end();
}
