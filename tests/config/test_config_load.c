/* test_config_load.c: what valid experiment files load to. Defaults (and the ones that
 * depend on the dataset), the lenient value forms, base: inheritance (deep merge,
 * relative paths, chains), << merge keys, --set overrides, matrix expansion, the
 * resolved.yaml round trip and config_hash stability/sensitivity.
 * Bad files are in test_config_errors.c.
 */
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/config.h"
#include "runner/config_internal.h"
#include "tests/test.h"

#define MIN "data: {dataset: cifar10}\nmodel: {arch: resnet18}\n"

static char dir[512];

static const char *at(const char *name) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Writes text to dir/name and loads it; a failure is a check failure (message printed). */
static experiment_t *load(const char *name, const char *text, const char *const *sets, int n) {
    if (text) test_write_file(at(name), text);
    experiment_t *x = malloc(sizeof *x);
    err_t e;
    if (config_load(at(name), sets, n, x, &e)) {
        fprintf(stderr, "unexpected error: %s\n", e.msg);
        test_failures_++;
        config_defaults(x);
    }
    return x;
}

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

static void test_base_inheritance(void) {
    char sub[1100];
    snprintf(sub, sizeof sub, "%s/common", dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/exps", dir);
    mkdir(sub, 0755);
    test_write_file(at("common/root.yaml"),
                    "name: root_name\nseed: 7\ntrain: {epochs: 30, batch_size: 64}\n");
    test_write_file(at("common/mid.yaml"),
                    "base: root.yaml\n"
                    "data: {dataset: cifar100, augment: {random_crop: {size: 28, padding: 2}}}\n"
                    "model: {arch: resnet50}\n"
                    "optimizer: {lr: 0.2, momentum: 0.8}\n"
                    "schedule: {milestones: [10, 20, 25]}\n"
                    "train: {epochs: 40}\n");
    experiment_t *x = load("exps/child.yaml",
                           "base: ../common/mid.yaml\n"
                           "optimizer: {lr: 0.05}\n"
                           "schedule: {milestones: [15]}\n"
                           "data: {augment: {random_crop: {padding: 0}}}\n",
                           NULL, 0);
    CHECK_STR(x->name, "child");               /* name: is not inherited */
    CHECK_INT(x->seed, 7);                     /* from the root of the chain */
    CHECK_STR(x->data.dataset, "cifar100");
    CHECK_STR(x->model.arch, "resnet50");
    CHECK_NEAR(x->optimizer.lr, 0.05, 0, 0);   /* this file wins */
    CHECK_NEAR(x->optimizer.momentum, 0.8, 0, 0); /* mappings merge */
    CHECK_INT(x->schedule.n_milestones, 1);    /* lists replace */
    CHECK_INT(x->schedule.milestones[0], 15);
    CHECK_INT(x->train.epochs, 40);            /* mid beats root */
    CHECK_INT(x->train.batch_size, 64);
    CHECK_INT(x->data.augment.crop_size, 28);  /* nested merge two levels down */
    CHECK_INT(x->data.augment.crop_padding, 0);
    char real[1100];
    CHECK(realpath(at("exps/child.yaml"), real) != NULL);
    CHECK_STR(x->source_path, real);
    free(x);
    /* a child may switch off what the base switched on, or set null */
    test_write_file(at("b1.yaml"), MIN "train: {max_steps: 10}\nparallel: {devices: [0, 1]}\n");
    x = load("c1.yaml", "base: b1.yaml\ntrain: {max_steps: null}\nparallel: {devices: null}\n",
             NULL, 0);
    CHECK_INT(x->train.max_steps, -1);
    CHECK_INT(x->parallel.n_devices, 0);
    free(x);
}

static void test_set_overrides(void) {
    test_write_file(at("s.yaml"), MIN "train: {max_steps: 10}\n");
    const char *sets[] = {"optimizer.lr=0.05",   "parallel.devices=[0,1]",
                          "train.max_steps=null", "data.augment.random_crop=false",
                          "train.epochs=3",      "train.epochs=4",
                          " name = renamed ",    "logging.wandb.tags=[x, y]",
                          "optimizer={momentum: 0.5}"};
    experiment_t *x = load("s.yaml", NULL, sets, 9);
    CHECK_NEAR(x->optimizer.lr, 0.05, 0, 0);
    CHECK_NEAR(x->optimizer.momentum, 0.5, 0, 0);
    CHECK_INT(x->parallel.n_devices, 2);
    CHECK_INT(x->parallel.devices[1], 1);
    CHECK_INT(x->train.max_steps, -1);
    CHECK(!x->data.augment.random_crop);
    CHECK_INT(x->train.epochs, 4); /* later --set wins */
    CHECK_STR(x->name, "renamed");
    CHECK_INT(x->logging.wandb.n_tags, 2);
    CHECK_STR(x->logging.wandb.tags[1], "y");
    free(x);
}

static const char *MATRIX =
    "base: mbase.yaml\n"
    "train: {epochs: 2}\n"
    "matrix:\n"
    "  - {name: dp,       parallel.mode: dp,  amp.enabled: false}\n"
    "  - {name: ddp,      parallel.mode: ddp, amp.enabled: false}\n"
    "  - name: ddp_amp\n"
    "    parallel.mode: ddp\n"
    "    amp: {enabled: true, dtype: bf16}\n";

static void test_matrix(void) {
    test_write_file(at("mbase.yaml"), "data: {dataset: cifar100}\nmodel: {arch: resnet50}\n"
                                      "train: {epochs: 200}\nparallel: {mode: single}\n");
    test_write_file(at("cmp.yaml"), MATRIX);
    err_t e;
    experiment_matrix_t *m = config_load_matrix(at("cmp.yaml"), NULL, 0, &e);
    CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "%s\n", e.msg);
        return;
    }
    CHECK_STR(m->name, "cmp");
    CHECK_INT(m->n, 3);
    CHECK_STR(m->entry_names[0], "dp");
    CHECK_STR(m->entry_names[2], "ddp_amp");
    CHECK_STR(m->runs[1].name, "ddp");
    CHECK_INT(m->runs[0].parallel.mode, PAR_DP);
    CHECK_INT(m->runs[1].parallel.mode, PAR_DDP);
    CHECK_INT(m->runs[2].parallel.mode, PAR_DDP);
    CHECK(!m->runs[1].amp.enabled);
    CHECK(m->runs[2].amp.enabled);
    CHECK_INT(m->runs[2].amp.dtype, PREC_BF16);
    for (int i = 0; i < 3; i++) {
        CHECK_INT(m->runs[i].train.epochs, 2);
        CHECK_STR(m->runs[i].data.dataset, "cifar100");
        CHECK(m->runs[i].source_path[0] == '/');
    }
    free(m);
    /* --set applies to every entry, after the entry's own overrides */
    const char *sets[] = {"amp.enabled=false", "optimizer.lr=0.4"};
    m = config_load_matrix(at("cmp.yaml"), sets, 2, &e);
    CHECK(m != NULL);
    if (m) {
        CHECK(!m->runs[2].amp.enabled);
        CHECK_NEAR(m->runs[0].optimizer.lr, 0.4, 0, 0);
        free(m);
    }
    /* many entries x many --set items, and the most --set items config_load takes */
    char big[8192] = "base: mbase.yaml\nmatrix:\n";
    for (int i = 0; i < 64; i++) {
        size_t l = strlen(big);
        snprintf(big + l, sizeof big - l, "  - {name: r%d, seed: %d}\n", i, i);
    }
    test_write_file(at("big.yaml"), big);
    const char *many[64];
    for (int i = 0; i < 64; i++) many[i] = i % 2 ? "optimizer.lr=0.3" : "train.epochs=3";
    m = config_load_matrix(at("big.yaml"), many, 64, &e);
    CHECK(m != NULL);
    if (!m) fprintf(stderr, "%s\n", e.msg);
    if (m) {
        CHECK_INT(m->n, 64);
        CHECK_INT(m->runs[63].seed, 63);
        CHECK_INT(m->runs[63].train.epochs, 3);
        free(m);
    }
    experiment_t *x = load("mbase.yaml", NULL, many, 64);
    CHECK_NEAR(x->optimizer.lr, 0.3, 0, 0);
    free(x);
    /* the file's own name: names the matrix */
    test_write_file(at("cmp2.yaml"), "name: study\nbase: mbase.yaml\nmatrix: [{name: only}]\n");
    m = config_load_matrix(at("cmp2.yaml"), NULL, 0, &e);
    CHECK(m != NULL);
    if (m) {
        CHECK_STR(m->name, "study");
        CHECK_STR(m->runs[0].name, "only");
        CHECK_INT(m->n, 1);
        free(m);
    }
}

/* Loads a matrix that must fail and returns its message without the directory. */
static const char *matrix_fail(const char *text, const char *const *sets, int n) {
    static err_t e;
    test_write_file(at("bad.yaml"), text);
    experiment_matrix_t *m = config_load_matrix(at("bad.yaml"), sets, n, &e);
    CHECK(m == NULL);
    free(m);
    CHECK_INT(e.code, ERR_INPUT);
    const char *msg = strstr(e.msg, "bad.yaml") ? strstr(e.msg, "bad.yaml") : e.msg;
    printf("  %s\n", msg);
    return msg;
}

static void test_matrix_errors(void) {
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a}\n  - {name: b, "
                          "parallel.mdoe: dp}\n",
                          NULL, 0),
              "bad.yaml:4:15: matrix[1] (line 4): parallel.mdoe: unknown key; did you mean "
              "parallel.mode?");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a}\n  - {name: a, seed: 1}\n",
                          NULL, 0),
              "bad.yaml:4:12: matrix[1] (line 4): name 'a' is already used by matrix[0]; entry "
              "names must be unique");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {seed: 1}\n", NULL, 0),
              "bad.yaml:3:5: matrix[0] (line 3): the entry has no name; add `name: <run name>` "
              "to it");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a/b}\n", NULL, 0),
              "bad.yaml:3:12: matrix[0] (line 3): name: 'a/b' is not a plain name: it contains "
              "'/' (names one directory, not a path); use letters, digits and . _ - +");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a, train.batch_size: 100, "
                          "parallel.mode: ddp, parallel.world_size: 3}\n",
                          NULL, 0),
              "bad.yaml:3:33: matrix[0] (line 3): train.batch_size 100 is not divisible by "
              "parallel.world_size 3 x train.grad_accum 1 = 3; use a multiple of 3");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix:\n  - {name: a, base: x.yaml}\n", NULL, 0),
              "bad.yaml:3:15: matrix[0] (line 3): base: only allowed at the top level of an "
              "experiment file, not in --set or a matrix entry");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: {name: a}\n", NULL, 0),
              "bad.yaml:2:9: matrix: expected a list of entries like `- {name: a, optimizer.lr: "
              "0.05}`, found a mapping");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: []\n", NULL, 0),
              "bad.yaml:2:9: matrix: expected a list of entries like `- {name: a, optimizer.lr: "
              "0.05}`, found an empty list");
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: [a]\n", NULL, 0),
              "bad.yaml:2:10: matrix[0] (line 2): expected a mapping like {name: a, "
              "optimizer.lr: 0.05}, found 'a'");
    char big[8192] = "base: mbase.yaml\nmatrix:\n";
    for (int i = 0; i < 65; i++) {
        size_t l = strlen(big);
        snprintf(big + l, sizeof big - l, "  - {name: r%d}\n", i);
    }
    CHECK_STR(matrix_fail(big, NULL, 0), "bad.yaml:3:3: matrix: 65 entries; at most 64");
    CHECK_CONTAINS(matrix_fail(MIN, NULL, 0),
                   "bad.yaml: no matrix: key, so this is a single experiment; run it with "
                   "`runner ");
    const char *nm[] = {"name=x"};
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: [{name: a}]\n", nm, 1),
              "--set name=x: name cannot be set for a matrix, whose entries name their runs; put "
              "the matrix's own name in the file (name: ...)");
    const char *sets[] = {"amp.dtype=fp8"};
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: [{name: a}]\n", sets, 1),
              "--set amp.dtype=fp8: amp.dtype: 'fp8' is not one of fp16, bf16");
}

/* repeats: N runs every entry N times (compare.h lays the seeds out); --set repeats=N
 * wins and never reaches the entries; bad values and places name the fix. */
static void test_matrix_repeats(void) {
    err_t e;
    test_write_file(at("rep.yaml"), "base: mbase.yaml\nseed: 7\nrepeats: 3\nmatrix:\n  - {name: a}\n"
                                    "  - {name: b, seed: 40}\n");
    experiment_matrix_t *m = config_load_matrix(at("rep.yaml"), NULL, 0, &e);
    CHECK(m != NULL);
    if (m) {
        CHECK_INT(m->repeats, 3);
        CHECK_INT(m->n, 2);
        CHECK_INT(m->runs[0].seed, 7);
        CHECK_INT(m->runs[1].seed, 40);
        free(m);
    }
    const char *sets[] = {"repeats=5", "optimizer.lr=0.2"};
    m = config_load_matrix(at("rep.yaml"), sets, 2, &e);
    CHECK(m != NULL);
    if (m) {
        CHECK_INT(m->repeats, 5);
        CHECK_NEAR(m->runs[1].optimizer.lr, 0.2, 0, 0);
        free(m);
    }
    m = config_load_matrix(at("cmp.yaml"), NULL, 0, &e);   /* no repeats: one run per entry */
    CHECK(m != NULL);
    if (m) CHECK_INT(m->repeats, 1);
    free(m);
    CHECK_STR(matrix_fail("base: mbase.yaml\nrepeats: 0\nmatrix: [{name: a}]\n", NULL, 0),
              "bad.yaml:2:10: repeats: expected a whole number from 1 to 100 (the runs of each entry, with "
              "seeds seed, seed+1, ...), found '0'");
    CHECK_STR(matrix_fail("base: mbase.yaml\nrepeats: [2]\nmatrix: [{name: a}]\n", NULL, 0),
              "bad.yaml:2:10: repeats: expected a whole number from 1 to 100 (the runs of each entry, with "
              "seeds seed, seed+1, ...), found a list");
    const char *bad[] = {"repeats=two"};
    CHECK_STR(matrix_fail("base: mbase.yaml\nmatrix: [{name: a}]\n", bad, 1),
              "--set repeats=two: repeats: expected a whole number from 1 to 100 (the runs of each entry, with "
              "seeds seed, seed+1, ...)");
    const char *many[] = {"repeats=100"};
    CHECK_CONTAINS(matrix_fail("base: mbase.yaml\nmatrix: [{name: a}, {name: b}, {name: c}]\n", many, 1),
                   "bad.yaml: 3 entries x repeats 100 = 300 runs; a comparison holds at most 256: lower repeats "
                   "or split the matrix");
    /* only at the top of the matrix file */
    err_t e2;
    experiment_t x;
    test_write_file(at("one.yaml"), "base: mbase.yaml\nrepeats: 2\n");
    CHECK_INT(config_load(at("one.yaml"), NULL, 0, &x, &e2), -1);
    CHECK_CONTAINS(e2.msg, "one.yaml:2:1: repeats: repeats the entries of a matrix: list over seeds, so it "
                           "belongs at the top of the matrix file given to `runner compare`; for one run set "
                           "seed: instead");
    test_write_file(at("repbase.yaml"), "data: {dataset: cifar100}\nrepeats: 2\n");
    CHECK_CONTAINS(matrix_fail("base: repbase.yaml\nmatrix: [{name: a}]\n", NULL, 0),
                   "repbase.yaml:2:1: repeats: repeats the entries of a matrix: list over seeds, so it belongs "
                   "at the top of the matrix file given to `runner compare`, not in a base file");
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

static void test_hash(void) {
    experiment_t *a = load("h.yaml", MIN, NULL, 0);
    experiment_t *b = load("h.yaml", NULL, NULL, 0);
    uint64_t h = config_hash(a);
    CHECK(h == config_hash(b));
    /* pinned: a change here changes every checkpoint's hash (resume refuses old ones) */
    printf("  hash of the minimal cifar10/resnet18 file: %016llx\n", (unsigned long long)h);
    CHECK(h == 0xd990ee4582c82628ULL);
    free(b);
    /* settings that do not change the numbers keep the hash */
    const char *same[] = {"name=other",          "logging.print_every=3", "output.root=/x",
                          "checkpoint.keep_last=9", "checkpoint.resume=never",
                          "data.root=/elsewhere", "data.workers=7",        "train.max_steps=5",
                          "parallel.master_port=1234", "logging.wandb.mode=offline",
                          "train.eval_every=5",  "parallel.bucket_mb=1", "checkpoint.every_steps=10",
                          "parallel.max_restarts=3", "train.early_stopping.metric=val_loss",
                          "checkpoint.best_metric=val_loss", "optimizer.clip_grad_norm=null",
                          "train.ema.decay=null", "train.ema.warmup_power=0.6666666666666666",
                          /* keys added later hash only when not at their default */
                          "model.stem=auto", "model.init_head=strict"};
    for (int i = 0; i < (int)(sizeof same / sizeof same[0]); i++) {
        b = load("h.yaml", NULL, &same[i], 1);
        if (config_hash(b) != h) fprintf(stderr, "hash changed by --set %s\n", same[i]);
        CHECK(config_hash(b) == h);
        free(b);
    }
    /* every setting that defines the numbers changes it */
    const char *diff[] = {"seed=1", "device=cpu", "data.dataset=cifar100", "data.shuffle=false",
                          "data.augment.random_crop=false", "data.augment.random_crop.padding=2",
                          "data.augment.horizontal_flip=false", "data.augment.rotation=0",
                          "data.normalize=false", "model.arch=resnet34", "model.num_classes=11",
                          "model.zero_init_residual=true", "model.init_from=w.safetensors",
                          "model.stem=imagenet", "model.stem=cifar", "model.init_head=reinit",
                          "optimizer.name=adamw", "optimizer.lr=0.2", "optimizer.momentum=0.8",
                          "optimizer.nesterov=true", "optimizer.weight_decay=0",
                          "optimizer.no_weight_decay_on_bn_and_bias=true",
                          "optimizer.betas=[0.9, 0.99]", "optimizer.eps=1e-7",
                          "schedule.name=cosine", "schedule.milestones=[50]", "schedule.gamma=0.1",
                          "schedule.warmup_epochs=0", "schedule.min_lr=0.001", "train.epochs=100",
                          "train.batch_size=256", "train.grad_accum=2",
                          "train.label_smoothing=0.1", "train.deterministic=false",
                          "amp.enabled=true", "amp.dtype=bf16", "amp.init_scale=1024",
                          "amp.growth_interval=100", "amp.tf32=false", "parallel.mode=dp",
                          "parallel.world_size=4", "parallel.grad_compression=fp16",
                          "parallel.sync_bn=true", "data.synthetic.classes=5",
                          "optimizer.clip_grad_norm=1", "train.ema.decay=0.9998", "train.ema.warmup=true",
                          "train.ema.warmup_gamma=2", "train.ema.warmup_power=0.75"};
    for (int i = 0; i < (int)(sizeof diff / sizeof diff[0]); i++) {
        b = load("h.yaml", NULL, &diff[i], 1);
        if (config_hash(b) == h) fprintf(stderr, "hash not changed by --set %s\n", diff[i]);
        CHECK(config_hash(b) != h);
        free(b);
    }
    free(a);
}

/* docs/experiment-files.md and resolved.yaml name every key of the schema table. */
/* train.cuda_fusion: names matched case-insensitively and stored as spelled in the
 * schema, [all] by default ([] turns every option off), written to resolved.yaml and
 * read back. */
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
    x = load("fuse.yaml", MIN "train: {cuda_fusion: [conv_stats, GRAPH_CONV, vec16]}\n", NULL, 0);
    CHECK_INT(x->train.n_cuda_fusion, 3);
    CHECK_STR(x->train.cuda_fusion[0], "conv_stats");
    CHECK_STR(x->train.cuda_fusion[1], "graph_conv");
    CHECK_STR(x->train.cuda_fusion[2], "vec16");
    y = round_trip(x, "resolved_fuse.yaml");
    check_equal_after_trip(x, y);
    free(y);
    free(x);
    x = load("one.yaml", MIN "train: {cuda_fusion: dgrad_accum}\n", NULL, 0);   /* a scalar is a list of one */
    CHECK_INT(x->train.n_cuda_fusion, 1);
    CHECK_STR(x->train.cuda_fusion[0], "dgrad_accum");
    free(x);
    x = load("rm.yaml", MIN "train: {cuda_fusion: [all, BN_Remask]}\n", NULL, 0);   /* not in all: named */
    CHECK_INT(x->train.n_cuda_fusion, 2);
    CHECK_STR(x->train.cuda_fusion[1], "bn_remask");
    y = round_trip(x, "resolved_rm.yaml");
    check_equal_after_trip(x, y);
    free(y);
    free(x);
    const char *sets[] = {"train.cuda_fusion=[all]"};
    x = load("exp.yaml", MIN, sets, 1);
    CHECK_INT(x->train.n_cuda_fusion, 1);
    CHECK_STR(x->train.cuda_fusion[0], "all");
    free(x);
}

static void test_every_key_documented_and_written(void) {
    char path[1100];
    snprintf(path, sizeof path, "%s/docs/experiment-files.md", test_source_dir());
    char *doc = test_read_file(path, NULL);
    CHECK(doc != NULL);
    experiment_t *x = load("exp.yaml", MIN, NULL, 0);
    char *yaml = NULL;
    size_t ylen = 0;
    FILE *f = open_memstream(&yaml, &ylen);
    config_write_yaml(x, f);
    fclose(f);
    for (int i = 0; doc && i < cfg_n_rows; i++) {
        char want[CFG_STR + 4];
        snprintf(want, sizeof want, "`%s`", cfg_rows[i].key);
        if (!strstr(doc, want)) fprintf(stderr, "not documented: %s\n", cfg_rows[i].key);
        CHECK(strstr(doc, want) != NULL);
        if (cfg_rows[i].flags & F_CHILD) continue; /* written inline by its parent */
        const char *leafname = strrchr(cfg_rows[i].key, '.');
        snprintf(want, sizeof want, "%s: ", leafname ? leafname + 1 : cfg_rows[i].key);
        bool found = false; /* at the start of a line, after its indentation */
        for (const char *p = strstr(yaml, want); p && !found; p = strstr(p + 1, want)) {
            const char *q = p;
            while (q > yaml && q[-1] == ' ') q--;
            found = q == yaml || q[-1] == '\n';
        }
        if (!found) fprintf(stderr, "not in resolved.yaml: %s\n", cfg_rows[i].key);
        CHECK(found);
    }
    free(yaml);
    free(doc);
    free(x);
}

/* Every experiment file shipped in experiments/ loads (matrix files as matrices). */
static void test_shipped_experiments(void) {
    char edir[1100];
    snprintf(edir, sizeof edir, "%s/experiments", test_source_dir());
    DIR *d = opendir(edir);
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".yaml")) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", edir, de->d_name);
        char *text = test_read_file(path, NULL);
        bool is_matrix = text && strstr(text, "\nmatrix:");
        free(text);
        err_t e;
        int rc;
        if (is_matrix) {
            experiment_matrix_t *m = config_load_matrix(path, NULL, 0, &e);
            rc = m ? 0 : -1;
            if (m) printf("  %s: matrix %s, %d runs\n", de->d_name, m->name, m->n);
            free(m);
        } else {
            experiment_t *x = malloc(sizeof *x);
            rc = config_load(path, NULL, 0, x, &e);
            if (!rc) printf("  %s: %s %s/%s\n", de->d_name, x->name, x->data.dataset, x->model.arch);
            free(x);
        }
        if (rc) fprintf(stderr, "%s\n", e.msg);
        CHECK_INT(rc, 0);
        n++;
    }
    if (d) closedir(d);
    CHECK(n >= 1);
}

int main(void) {
    if (test_tmpdir(dir, sizeof dir)) return 1;
    TEST_RUN(test_defaults);
    TEST_RUN(test_dataset_defaults);
    TEST_RUN(test_every_key);
    TEST_RUN(test_lenient_forms);
    TEST_RUN(test_base_inheritance);
    TEST_RUN(test_set_overrides);
    TEST_RUN(test_matrix);
    TEST_RUN(test_matrix_errors);
    TEST_RUN(test_matrix_repeats);
    TEST_RUN(test_round_trip);
    TEST_RUN(test_hash);
    TEST_RUN(test_cuda_fusion_key);
    TEST_RUN(test_every_key_documented_and_written);
    TEST_RUN(test_shipped_experiments);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    test_run_cmd(cmd, NULL, 0);
    return test_main_end();
}
