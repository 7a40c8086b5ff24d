/* config.c: the public loaders of runner/config.h. config_defaults; config_load (the
 * experiment file after its base: chain, then --set overrides, then dataset-dependent
 * defaults and cross-field checks); config_load_matrix (one run per matrix entry).
 *
 * The schema table lives in config_schema.c, YAML reading in config_yaml.c, applying
 * values in config_apply.c, resolved.yaml and the hash in config_write.c. Nothing here
 * prints or exits: every failure is an ERR_INPUT err_t naming the file and place.
 */
#include "runner/config_internal.h"
#include "model/arch/arch_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fs.h"

void config_defaults(experiment_t *e) {
    memset(e, 0, sizeof *e);
    e->seed = 0;
    e->device = DEVICE_AUTO;
    e->data.download = false;
    e->data.on_device = true;
    e->data.shuffle = true;
    e->data.workers = 2;
    e->data.augment.random_crop = true;
    e->data.augment.crop_size = 32;
    e->data.augment.crop_padding = 4;
    e->data.augment.horizontal_flip = true;
    e->data.augment.rotation = 15;
    e->data.augment.ra_num_ops = 2;
    e->data.augment.ra_magnitude = 9;
    e->data.augment.erase_mode = 2;
    e->data.augment.erase_count = 1;
    e->data.mixup.prob = 1.0;
    e->data.mixup.switch_prob = 0.5;
    e->data.augment.rrc_scale[0] = 0.08;
    e->data.augment.rrc_scale[1] = 1.0;
    e->data.augment.rrc_ratio[0] = 0.75;
    e->data.augment.rrc_ratio[1] = 1.3333;
    snprintf(e->data.train_dir, sizeof e->data.train_dir, "train");
    snprintf(e->data.val_dir, sizeof e->data.val_dir, "val");
    e->data.image_size = 224;
    e->data.jpeg_dct_scaling = true;
    e->data.synthetic.train_size = 1024;
    e->data.synthetic.val_size = 256;
    e->data.synthetic.image[0] = 3;
    e->data.synthetic.image[1] = 32;
    e->data.synthetic.image[2] = 32;
    e->data.synthetic.classes = 10;
    e->model.stem = STEM_AUTO;
    e->model.init_head = INIT_HEAD_STRICT;
    e->model.dropout = -1;
    e->optimizer.name = OPT_SGD;
    e->optimizer.lr = 0.1;
    e->optimizer.momentum = 0.9;
    e->optimizer.weight_decay = 5e-4;
    e->optimizer.betas[0] = 0.9;
    e->optimizer.betas[1] = 0.999;
    e->optimizer.eps = 1e-8;
    e->schedule.name = SCHED_MULTISTEP;
    e->schedule.n_milestones = 3;
    e->schedule.milestones[0] = 60;
    e->schedule.milestones[1] = 120;
    e->schedule.milestones[2] = 160;
    e->schedule.gamma = 0.2;
    e->schedule.warmup_epochs = 1;
    e->schedule.min_lr = 0;
    e->train.epochs = 200;
    e->train.batch_size = 128;
    e->train.grad_accum = 1;
    e->train.label_smoothing = 0;
    e->train.max_steps = -1;
    e->train.eval_every = 1;
    e->train.deterministic = true;
    /* auto since the H100 run of 2026-11-26 (tree 70b6c41) showed whole-step graphs exact
     * (test_gpu_cli_graphs: auto == false bit for bit in single, with the CPU loader, DDP
     * over NCCL world 1 and across resume) and faster (the flagship's epoch 3.52 s against
     * 14.62 s, bf16); the plan turns it off where it is not exact (plan.c). */
    e->train.cuda_graphs = GRAPHS_AUTO;
    /* [all] since the H100 run of 2026-11-26 (commit e89b7c7) showed graph_conv,
     * dgrad_accum and bn_remask exact (test_gpu_cli_train / resume / paths / graphs with
     * them on) and faster (the flagship's epoch 3.68 s against 3.86 s, bf16; the whole
     * step replayed, batch 128: 9.08 ms against 13.93 ms); all has also held bn_wide_final
     * and bn_fold_running since the H200 run of the same day, and pdl, bn_mask_bits and
     * bn_dual_add since the H200 run of 7a04ce7 (model/backend.h: the flagship's epoch
     * 2.91 s against 3.13). [] turns them off. */
    e->train.n_cuda_fusion = 1;
    snprintf(e->train.cuda_fusion[0], sizeof e->train.cuda_fusion[0], "all");
    e->train.ema.warmup_gamma = 1.0;
    e->train.ema.warmup_power = 2.0 / 3.0;
    e->train.early_stopping.patience = 3;
    e->amp.enabled = false;
    e->amp.dtype = PREC_FP16;
    e->amp.init_scale = 65536.0;
    e->amp.growth_interval = 2000;
    e->amp.tf32 = true;
    e->parallel.mode = PAR_DDP;
    e->parallel.world_size = 2;
    e->parallel.backend = COMM_AUTO;
    e->parallel.bucket_mb = 25;
    e->parallel.grad_compression = PREC_NONE;
    e->parallel.nnodes = 1;
    snprintf(e->parallel.master_addr, sizeof e->parallel.master_addr, "127.0.0.1");
    e->parallel.master_port = 0;
    e->parallel.timeout_s = 300;
    e->logging.print_every = 50;
    e->logging.csv = true;
    e->logging.wandb.mode = WANDB_DISABLED;
    e->checkpoint.every_epochs = 1;
    e->checkpoint.keep_last = 2;
    e->checkpoint.keep_best = true;
    e->checkpoint.best_metric = METRIC_VAL_TOP1;
    snprintf(e->checkpoint.resume, sizeof e->checkpoint.resume, "auto");
    snprintf(e->output.root, sizeof e->output.root, "runs");
}

/* What a dataset implies when the file does not say: where its files are, its class
 * count, image shape and normalisation. */
typedef struct dataset_info {
    const char *name, *root;
    int classes, c, h;
    int n_norm;
    double mean[3], std[3];
} dataset_info_t;

static const dataset_info_t DATASET_INFO[] = {
    {"cifar10", "data/cifar-10-batches-bin", 10, 3, 32, 3, {0.4914, 0.4822, 0.4465},
     {0.2470, 0.2435, 0.2616}},
    {"cifar100", "data/cifar-100-binary", 100, 3, 32, 3, {0.5071, 0.4865, 0.4409},
     {0.2673, 0.2564, 0.2762}},
    {"fashion_mnist", "/usr/share/datasets/fashion-mnist", 10, 1, 28, 1, {0.2860}, {0.3530}},
    {"synthetic", "", 0, 0, 0, 0, {0}, {0}},
    /* classes come from the folders (the plan); normalisation: ImageNet's (torchvision) */
    {"image_folder", "data/images", 0, 3, 0, 3, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}},
};

static int row_of(const char *key) {
    return cfg_row_find(key);
}

/* Where row key was given, or the top file when it was not. */
static cfg_loc_t at(const cfg_state_t *st, const char *key) {
    int r = row_of(key);
    if (r >= 0 && st->set[r]) return st->loc[r];
    return (cfg_loc_t){0, 0, 0};
}

/* Where the first of the given keys that some source set was given (the file if none). */
static cfg_loc_t at_any(const cfg_state_t *st, const char *k1, const char *k2, const char *k3) {
    const char *keys[] = {k1, k2, k3};
    for (int i = 0; i < 3; i++) {
        int r = keys[i] ? row_of(keys[i]) : -1;
        if (r >= 0 && st->set[r]) return st->loc[r];
    }
    return (cfg_loc_t){0, 0, 0};
}

/* The file name without directory and extension: the default run name. */
static void file_stem(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    snprintf(out, cap, "%s", b ? b + 1 : path);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = '\0';
}

/* Dataset-dependent defaults and the checks that involve more than one key. */
static int finalize(cfg_ctx_t *c, cfg_state_t *st) {
    experiment_t *x = &st->x;
    cfg_loc_t file = {0, 0, 0};
    if (!x->data.dataset[0])
        return cfg_fail(c, file,
                        "data.dataset is missing; add it, e.g. `data: {dataset: cifar10}` "
                        "(cifar10 | cifar100 | fashion_mnist | synthetic)");
    if (!x->model.arch[0])
        return cfg_fail(c, file,
                        "model.arch is missing; add it, e.g. `model: {arch: resnet18}` (%s)",
                        ARCH_NAME_LIST);
    if (!st->set[row_of("name")]) {
        char stem[CFG_PATH], buf[128];
        file_stem(c->src[0].label, stem, sizeof stem);
        const char *why = cfg_plain_name_problem(stem, buf, sizeof buf);
        if (why)
            return cfg_fail(c, file,
                            "the run name '%s' taken from the file name %s; add `name: "
                            "<letters, digits, . _ - +>` to the file or rename it",
                            stem, why);
        snprintf(x->name, sizeof x->name, "%.200s", stem);
    }
    const dataset_info_t *ds = DATASET_INFO;
    while (strcmp(ds->name, x->data.dataset)) ds++;
    bool synthetic = !strcmp(ds->name, "synthetic");
    int classes = synthetic ? x->data.synthetic.classes : ds->classes;
    int chans = synthetic ? x->data.synthetic.image[0] : ds->c;
    int side = synthetic ? x->data.synthetic.image[1] : ds->h;
    if (cfg_finalize_images(c, st, &chans, &side)) return -1;

    if (!st->set[row_of("data.root")])
        snprintf(x->data.root, sizeof x->data.root, "%s", ds->root);
    else if (!x->data.root[0] && !synthetic)
        return cfg_fail(c, at(st, "data.root"),
                        "data.root is empty; give the directory of the %s files (default %s)",
                        ds->name, ds->root);
    if (synthetic && chans > 4)
        return cfg_fail(c, at(st, "data.synthetic.image"),
                        "data.synthetic.image has %d channels; at most 4", chans);
    if (x->model.num_classes == 0)
        x->model.num_classes = classes;
    else if (x->model.num_classes < classes)
        return cfg_fail(c, at(st, "model.num_classes"),
                        "model.num_classes %d is less than the %d classes of %s; use at least "
                        "%d (or 0 for the dataset's)",
                        x->model.num_classes, classes, ds->name, classes);
    /* the rows model/arch builds from (arch_table.h: data only, no model code linked) */
    const arch_info_t *arch = arch_info(x->model.arch);
    if (arch && x->model.stem == STEM_IMAGENET && !arch->imagenet)
        return cfg_fail(c, at(st, "model.stem"),
                        "model.stem: imagenet: %s has only the CIFAR variant (torchvision does not "
                        "ship it); use model.stem: cifar (or auto), or an arch torchvision has "
                        "(resnet18..152, wide_resnet50_2, resnext50_32x4d, vgg*_bn, mobilenet_v2)",
                        x->model.arch);
    char why[400];
    if (arch && arch_keys_problem(arch, x->model.width, x->model.groups, x->model.dropout, why, sizeof why)) {
        const char *key = !strncmp(why, "model.groups", 12) ? "model.groups"
                        : !strncmp(why, "model.dropout", 13) ? "model.dropout" : "model.width";
        return cfg_fail(c, at(st, key), "%s", why);
    }
    if (!st->set[row_of("data.augment.random_crop.size")]) x->data.augment.crop_size = side;
    if (x->data.augment.random_crop &&
        x->data.augment.crop_size > side + 2 * x->data.augment.crop_padding)
        return cfg_fail(c, at(st, "data.augment.random_crop.size"),
                        "data.augment.random_crop.size %d is larger than the padded image (%d "
                        "+ 2 x %d); use at most %d",
                        x->data.augment.crop_size, side, x->data.augment.crop_padding,
                        side + 2 * x->data.augment.crop_padding);

    if (x->data.augment.auto_kind && chans != 1 && chans != 3)
        return cfg_fail(c, at(st, "data.augment.auto"),
                        "data.augment.auto: torchvision's ops take 1- or 3-channel images and %s has "
                        "%d channels; set data.augment.auto: null", ds->name, chans);

    int rm = row_of("data.normalize.mean"), rs = row_of("data.normalize.std");
    if (st->norm_off) {
        x->data.n_norm = 0;
        x->data.norm_set = true;
    } else if (st->set[rm] || st->set[rs]) {
        int nm = st->set[rm] ? st->count[rm] : 0, ns = st->set[rs] ? st->count[rs] : 0;
        cfg_loc_t l = st->set[rs] ? st->loc[rs] : st->loc[rm];
        if (nm != ns)
            return cfg_fail(c, l,
                            "data.normalize: mean has %d entries and std has %d; give both, "
                            "with the same length",
                            nm, ns);
        if (nm != 1 && nm != chans)
            return cfg_fail(c, l,
                            "data.normalize: %d values for %s, which has %d channel%s; give 1 "
                            "value or %d",
                            nm, ds->name, chans, chans == 1 ? "" : "s", chans);
        x->data.n_norm = nm;
        x->data.norm_set = true;
    } else {
        x->data.n_norm = ds->n_norm;
        for (int i = 0; i < ds->n_norm; i++) {
            x->data.mean[i] = ds->mean[i];
            x->data.std[i] = ds->std[i];
        }
        if (chans == 1 && ds->n_norm == 3) { /* grayscale images: timm's mean of the three */
            x->data.n_norm = 1;
            x->data.mean[0] = (ds->mean[0] + ds->mean[1] + ds->mean[2]) / 3;
            x->data.std[0] = (ds->std[0] + ds->std[1] + ds->std[2]) / 3;
        }
        x->data.norm_set = false;
    }

    /* parallel layout */
    par_mode_t mode = x->parallel.mode;
    if (mode == PAR_SINGLE) {
        /* single is one process on one device: the world size follows it (--set
         * parallel.mode=single over a ddp file). Only a world size given with the mode
         * (the same file, or both on the command line) or after it contradicts it. */
        int rw = row_of("parallel.world_size"), rm = row_of("parallel.mode");
        bool both_cli = c->src[st->loc[rw].src].cli && c->src[st->loc[rm].src].cli;
        if (st->set[rw] && x->parallel.world_size != 1 &&
            (st->loc[rw].src == st->loc[rm].src || both_cli || st->order[rw] > st->order[rm]))
            return cfg_fail(c, at(st, "parallel.world_size"),
                            "parallel.world_size %d with parallel.mode single; use mode ddp or "
                            "dp, or world_size 1",
                            x->parallel.world_size);
        x->parallel.world_size = 1;
    }
    if (x->parallel.nnodes > 1 && mode != PAR_DDP)
        return cfg_fail(c, at(st, "parallel.nnodes"),
                        "parallel.nnodes %d needs parallel.mode ddp (single and dp use one "
                        "host)",
                        x->parallel.nnodes);
    if (x->parallel.world_size % x->parallel.nnodes)
        return cfg_fail(c, at(st, "parallel.world_size"),
                        "parallel.world_size %d is not divisible by parallel.nnodes %d; use a "
                        "multiple of %d",
                        x->parallel.world_size, x->parallel.nnodes, x->parallel.nnodes);
    if (x->parallel.n_devices) {
        int want = mode == PAR_SINGLE ? 1 : x->parallel.world_size / x->parallel.nnodes;
        if (x->parallel.n_devices != want)
            return cfg_fail(c, at(st, "parallel.devices"),
                            "parallel.devices lists %d device%s but mode %s with world_size %d "
                            "uses %d per host; list %d, or null for the first ones",
                            x->parallel.n_devices, x->parallel.n_devices == 1 ? "" : "s",
                            par_mode_name(mode), x->parallel.world_size, want, want);
    }
    if (x->parallel.backend == COMM_NCCL && x->device == DEVICE_CPU)
        return cfg_fail(c, at(st, "parallel.backend"),
                        "parallel.backend nccl needs device cuda (or auto); use shm on cpu");
    int ways = x->parallel.world_size * x->train.grad_accum;
    if (x->train.batch_size % ways) {
        if (mode == PAR_SINGLE)
            return cfg_fail(c, at_any(st, "train.batch_size", "train.grad_accum", NULL),
                            "train.batch_size %d is not divisible by train.grad_accum %d; use "
                            "a multiple of %d",
                            x->train.batch_size, x->train.grad_accum, ways);
        return cfg_fail(c,
                        at_any(st, "train.batch_size", "parallel.world_size", "train.grad_accum"),
                        "train.batch_size %d is not divisible by parallel.world_size %d x "
                        "train.grad_accum %d = %d; use a multiple of %d",
                        x->train.batch_size, x->parallel.world_size, x->train.grad_accum, ways,
                        ways);
    }
    if (x->optimizer.name == OPT_SGD && x->optimizer.nesterov && x->optimizer.momentum <= 0)
        return cfg_fail(c, at(st, "optimizer.nesterov"),
                        "optimizer.nesterov needs optimizer.momentum > 0; set a momentum or "
                        "nesterov: false");
    if (x->schedule.warmup_epochs > x->train.epochs)
        return cfg_fail(c, at(st, "schedule.warmup_epochs"),
                        "schedule.warmup_epochs %g is longer than train.epochs %d; use at most "
                        "%d",
                        x->schedule.warmup_epochs, x->train.epochs, x->train.epochs);
    /* recipe keys (issue 17) */
    metric_t watched[2] = {x->train.early_stopping.metric, x->checkpoint.best_metric};
    const char *watch_key[2] = {"train.early_stopping.metric", "checkpoint.best_metric"};
    for (int i = 0; i < 2; i++)
        if (watched[i] >= METRIC_VAL_LOSS_EMA && watched[i] <= METRIC_VAL_TOP5_EMA && x->train.ema.decay == 0)
            return cfg_fail(c, at(st, watch_key[i]),
                            "%s %s needs the EMA weights; set train.ema.decay (e.g. 0.9998) or "
                            "watch %.*s",
                            watch_key[i], metric_name(watched[i]),
                            (int)strlen(metric_name(watched[i])) - 4, metric_name(watched[i]));
    if (x->parallel.max_restarts > 0 && mode != PAR_DDP)
        return cfg_fail(c, at(st, "parallel.max_restarts"),
                        "parallel.max_restarts %d needs parallel.mode ddp (the launcher restarts "
                        "its ranks); in mode %s let the job scheduler retry (see "
                        "docs/multi-host.md), or set max_restarts: 0",
                        x->parallel.max_restarts, par_mode_name(mode));
    return 0;
}

static bool skip_top(const char *k) {
    return !strcmp(k, "base") || !strcmp(k, "matrix") || !strcmp(k, "repeats");
}

/* Parses a matrix's repeats value s (from the file or --set): a whole number from 1 to
 * CFG_MAX_REPEATS. Returns the number, or 0 when s is not one. */
static int parse_repeats(const char *s) {
    if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 4) return 0;
    int v = atoi(s);
    return v >= 1 && v <= CFG_MAX_REPEATS ? v : 0;
}

static const char *base_name(const char *p) {
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* The top-level pair whose key is `key` in the mapping root, or NULL. */
static yaml_node_pair_t *top_pair(cfg_ctx_t *c, yaml_node_t *root, const char *key) {
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        const char *k = cfg_scalar(cfg_node(c, p->key));
        if (k && !strcmp(k, key)) return p;
    }
    return NULL;
}

/* Loads the file `label` onto st: its base: chain first (recursively, depth = chain
 * position), then its own keys. from is the base: value that named it (for messages).
 * With keep, the parsed document is handed to the caller (the matrix needs it). */
static int load_chain(cfg_ctx_t *c, cfg_state_t *st, const char *label, int depth,
                      cfg_loc_t from, yaml_document_t *keep) {
    int src = cfg_add_source(c, label, false);
    if (src < 0) return -1;
    char real[PATH_MAX];
    if (!realpath(label, real)) snprintf(real, sizeof real, "%s", label);
    for (int i = 0; i < c->n_stack; i++) {
        if (strcmp(c->stack[i], real)) continue;
        char chain[1024] = "";
        for (int j = 0; j < c->n_stack; j++) {
            size_t l = strlen(chain);
            snprintf(chain + l, sizeof chain - l, "%s%.200s",
                     j == 0 ? "" : j == 1 ? " includes " : " which includes ",
                     base_name(c->stack[j]));
        }
        size_t l = strlen(chain);
        snprintf(chain + l, sizeof chain - l, "%s%.200s",
                 c->n_stack == 1 ? " includes " : " which includes ", base_name(real));
        return cfg_fail(c, from, "base: %s, a cycle; remove one of these base: keys", chain);
    }
    snprintf(c->stack[c->n_stack++], sizeof c->stack[0], "%s", real);

    yaml_document_t doc;
    int rc = depth == 0 && c->text ? cfg_parse_buffer(c, src, c->text, c->text_len, &doc)
                                   : cfg_parse_file(c, src, &doc);
    if (rc) {
        c->n_stack--;
        return rc;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    c->cur = src, c->doc = &doc, c->budget = CFG_NODE_BUDGET;
    yaml_node_pair_t *bp = top_pair(c, root, "base"), *mp = top_pair(c, root, "matrix");
    yaml_node_pair_t *rp = top_pair(c, root, "repeats");
    if (rp && (depth > 0 || !mp))
        rc = cfg_fail(c, cfg_node_loc(c, cfg_node(c, rp->key)),
                      "repeats: repeats the entries of a matrix: list over seeds, so it belongs "
                      "at the top of the matrix file given to `runner compare`%s",
                      depth > 0 ? ", not in a base file" : "; for one run set seed: instead");
    else if (mp && depth > 0)
        rc = cfg_fail(c, cfg_node_loc(c, cfg_node(c, mp->key)),
                      "matrix: only allowed in the file given to `runner compare`, not in a "
                      "base file");
    else if (mp && !keep)
        rc = cfg_fail(c, cfg_node_loc(c, cfg_node(c, mp->key)),
                      "this is a matrix file (it has matrix:); run it with `runner compare %s`",
                      label);
    if (!rc && bp) {
        yaml_node_t *bv = cfg_node(c, bp->value);
        cfg_loc_t bl = cfg_node_loc(c, bv);
        const char *b = cfg_scalar(bv);
        char resolved[CFG_PATH + 8];
        struct stat sb;
        if (c->text) {
            rc = cfg_fail(c, bl, "base: is not available for an experiment given as text; "
                          "write the file to disk");
        } else if (!b || cfg_is_null(bv) || !*b) {
            char buf[96];
            rc = cfg_fail(c, bl, "base: expected a file path such as common.yaml, found %s",
                          cfg_describe(bv, buf, sizeof buf));
        } else if (depth + 1 >= CFG_MAX_BASE_DEPTH) {
            rc = cfg_fail(c, bl, "base: the base: chain is longer than %d files; flatten it",
                          (int)CFG_MAX_BASE_DEPTH);
        } else {
            char bx[CFG_PATH];
            err_t pe = {0};
            if (strpbrk(b, "~$") && path_expand(b, bx, sizeof bx, &pe) == 0) b = bx;
            const char *slash = strrchr(label, '/');
            if (b[0] == '/' || !slash)
                snprintf(resolved, sizeof resolved, "%s", b);
            else
                snprintf(resolved, sizeof resolved, "%.*s/%s", (int)(slash - label), label, b);
            if (pe.code)
                rc = cfg_fail(c, bl, "base: %s", pe.msg);
            else if (stat(resolved, &sb))
                rc = cfg_fail(c, bl,
                              "base file '%s' not found (looked for %s); base: paths are "
                              "relative to the directory of %s",
                              b, resolved, base_name(label));
            else if (S_ISDIR(sb.st_mode))
                rc = cfg_fail(c, bl, "base: '%s' is a directory; give a .yaml file", b);
            else
                rc = load_chain(c, st, resolved, depth + 1, bl, NULL);
            c->cur = src, c->doc = &doc, c->budget = CFG_NODE_BUDGET;
        }
    }
    if (!rc) {
        memset(st->set_now, 0, sizeof st->set_now);
        c->is_base = depth > 0;
        rc = cfg_apply_map(c, st, "", root, 0, false, skip_top);
        c->is_base = false;
    }
    c->n_stack--;
    if (!rc && keep)
        *keep = doc;
    else
        yaml_document_delete(&doc);
    c->doc = NULL;
    return rc;
}

/* Applies each "dotted.key=value" in order; each is its own source. */
static int apply_sets(cfg_ctx_t *c, cfg_state_t *st, const char *const *sets, int n) {
    if (n > CFG_MAX_SETS)
        return err_set(c->err, ERR_INPUT, "--set: %d overrides; at most %d", n, (int)CFG_MAX_SETS);
    for (int i = 0; i < n; i++) {
        char label[CFG_PATH];
        snprintf(label, sizeof label, "--set %.1000s", sets[i]);
        int src = cfg_add_source(c, label, true);
        if (src < 0) return -1;
        cfg_loc_t here = {src, 0, 0};
        const char *eq = strchr(sets[i], '=');
        char key[CFG_STR];
        const char *k0 = sets[i];
        while (*k0 == ' ') k0++;
        size_t kl = eq ? (size_t)(eq - k0) : 0;
        while (kl && k0[kl - 1] == ' ') kl--;
        if (!eq || !kl)
            return cfg_fail(c, here, "expected KEY=VALUE; e.g. --set optimizer.lr=0.05");
        if (kl >= sizeof key) return cfg_fail(c, here, "unknown key (far too long)");
        memcpy(key, k0, kl);
        key[kl] = '\0';
        yaml_document_t doc;
        if (cfg_parse_value(c, src, eq + 1, &doc)) return -1;
        c->cur = src, c->doc = &doc, c->budget = CFG_NODE_BUDGET;
        memset(st->set_now, 0, sizeof st->set_now);
        int rc = cfg_apply_value(c, st, key, NULL, yaml_document_get_root_node(&doc), 0, false);
        yaml_document_delete(&doc);
        c->doc = NULL;
        if (rc) return rc;
    }
    return 0;
}

/* Writes the absolute path of path into x->source_path. */
static int set_source_path(cfg_ctx_t *c, experiment_t *x, const char *path) {
    char real[PATH_MAX];
    if (c->text) { /* given as text: the label is all there is */
        snprintf(x->source_path, sizeof x->source_path, "%s", path);
        return 0;
    }
    if (!realpath(path, real)) return cfg_fail(c, (cfg_loc_t){0, 0, 0}, "cannot resolve the path");
    if (strlen(real) >= sizeof x->source_path)
        return cfg_fail(c, (cfg_loc_t){0, 0, 0}, "the absolute path is longer than %d bytes",
                        (int)sizeof x->source_path - 1);
    memset(x->source_path, 0, sizeof x->source_path);
    memcpy(x->source_path, real, strlen(real));
    return 0;
}

static int begin(cfg_ctx_t **c, cfg_state_t **st, err_t *e) {
    err_clear(e);
    *c = calloc(1, sizeof **c);
    *st = calloc(1, sizeof **st);
    if (!*c || !*st) {
        free(*c), free(*st);
        return err_set(e, ERR_RUNTIME, "out of memory loading an experiment");
    }
    (*c)->err = e;
    config_defaults(&(*st)->x);
    return 0;
}

/* config_load and config_load_text: text NULL reads the file path and its base: chain. */
static int load_single(const char *path, const char *text, size_t len, const char *const *sets,
                       int n_sets, experiment_t *out, err_t *e) {
    cfg_ctx_t *c;
    cfg_state_t *st;
    if (begin(&c, &st, e)) return -1;
    c->text = text;
    c->text_len = len;
    int rc = load_chain(c, st, path, 0, (cfg_loc_t){-1, 0, 0}, NULL);
    if (!rc) rc = apply_sets(c, st, sets, n_sets);
    if (!rc) rc = finalize(c, st);
    if (!rc) rc = set_source_path(c, &st->x, path);
    if (!rc) *out = st->x;
    free(c);
    free(st);
    return rc;
}

int config_load(const char *path, const char *const *sets, int n_sets, experiment_t *out,
                err_t *e) {
    if (!path || !out) return err_set(e, ERR_INPUT, "config_load: no experiment file given");
    return load_single(path, NULL, 0, sets, n_sets, out, e);
}

int config_load_text(const char *label, const char *text, size_t len, const char *const *sets,
                     int n_sets, experiment_t *out, err_t *e) {
    if (!label || !text || !out) return err_set(e, ERR_INPUT, "config_load_text: nothing given");
    return load_single(label, text, len, sets, n_sets, out, e);
}

/* Applies matrix entry i (a mapping with `name` and dotted overrides) on a copy of the
 * base state, then the --set items, and checks the result. */
static int load_entry(cfg_ctx_t *c, cfg_state_t *st, const cfg_state_t *base, yaml_document_t *doc,
                      yaml_node_t *item, int i, experiment_matrix_t *mx, const char *const *sets,
                      int n_sets, const char *path, int n_files) {
    c->cur = 0, c->doc = doc, c->budget = CFG_NODE_BUDGET;
    cfg_loc_t il = cfg_node_loc(c, item);
    snprintf(c->scope, sizeof c->scope, "matrix[%d] (line %d)", i, il.line);
    if (cfg_visit(c, item, 2)) return -1;
    if (item->type != YAML_MAPPING_NODE) {
        char buf[96];
        return cfg_fail(c, il,
                        "expected a mapping like {name: a, optimizer.lr: 0.05}, found %s",
                        cfg_describe(item, buf, sizeof buf));
    }
    yaml_node_pair_t *np = top_pair(c, item, "name");
    if (!np) return cfg_fail(c, il, "the entry has no name; add `name: <run name>` to it");
    *st = *base;
    memset(st->set_now, 0, sizeof st->set_now);
    if (cfg_apply_map(c, st, "", item, 2, false, NULL)) return -1;
    for (int j = 0; j < i; j++)
        if (!strcmp(mx->entry_names[j], st->x.name))
            return cfg_fail(c, cfg_node_loc(c, cfg_node(c, np->value)),
                            "name '%s' is already used by matrix[%d]; entry names must be "
                            "unique",
                            st->x.name, j);
    char scope[sizeof c->scope];
    memcpy(scope, c->scope, sizeof scope);
    c->scope[0] = '\0';
    c->n_src = n_files; /* the previous entry's --set sources are no longer referenced */
    if (apply_sets(c, st, sets, n_sets)) return -1;
    memcpy(c->scope, scope, sizeof scope);

    if (finalize(c, st) || set_source_path(c, &st->x, path)) return -1;
    c->scope[0] = '\0';
    mx->runs[i] = st->x;
    snprintf(mx->entry_names[i], sizeof mx->entry_names[i], "%s", st->x.name);
    return 0;
}

static experiment_matrix_t *load_matrix(const char *path, const char *text, size_t text_len,
                                        const char *const *sets, int n_sets, err_t *e);

/* The matrix's repeats: the file's top-level repeats: (checked in load_chain to be in the
 * matrix file itself), then any --set repeats=N. The other --set items go to entry_sets. */
static int matrix_repeats(cfg_ctx_t *c, const char *path, yaml_document_t *doc, experiment_matrix_t *mx,
                          const char *const *sets, int n_sets, const char **entry_sets, int *n_entry) {
    c->cur = 0, c->doc = doc;
    mx->repeats = 1;
    yaml_node_pair_t *rp = top_pair(c, yaml_document_get_root_node(doc), "repeats");
    if (rp) {
        yaml_node_t *v = cfg_node(c, rp->value);
        char buf[96];
        if (!(mx->repeats = parse_repeats(v->type == YAML_SCALAR_NODE ? cfg_scalar(v) : NULL)))
            return cfg_fail(c, cfg_node_loc(c, v),
                            "repeats: expected a whole number from 1 to %d (the runs of each entry, "
                            "with seeds seed, seed+1, ...), found %s",
                            (int)CFG_MAX_REPEATS, cfg_describe(v, buf, sizeof buf));
    }
    *n_entry = 0;
    for (int i = 0; i < n_sets; i++) {
        const char *k = sets[i];
        while (*k == ' ') k++;
        const char *eq = strchr(k, '=');
        size_t kl = eq ? (size_t)(eq - k) : 0;
        while (kl && k[kl - 1] == ' ') kl--;
        if (!(kl == 7 && !strncmp(k, "repeats", 7))) {
            if (*n_entry < CFG_MAX_SETS) entry_sets[(*n_entry)++] = sets[i];
            continue;
        }
        char val[32];
        const char *v = eq + 1;
        while (*v == ' ') v++;
        snprintf(val, sizeof val, "%.31s", v);
        for (size_t l = strlen(val); l && val[l - 1] == ' '; l--) val[l - 1] = '\0';
        if (!(mx->repeats = parse_repeats(val)))
            return err_set(c->err, ERR_INPUT, "--set %.200s: repeats: expected a whole number from 1 to %d "
                           "(the runs of each entry, with seeds seed, seed+1, ...)", sets[i],
                           (int)CFG_MAX_REPEATS);
    }
    if (mx->n * mx->repeats > CFG_MAX_MATRIX_RUNS)
        return err_set(c->err, ERR_INPUT, "%s: %d entries x repeats %d = %d runs; a comparison holds at most "
                       "%d: lower repeats or split the matrix", path, mx->n,
                       mx->repeats, mx->n * mx->repeats, (int)CFG_MAX_MATRIX_RUNS);
    return 0;
}

experiment_matrix_t *config_load_matrix(const char *path, const char *const *sets, int n_sets,
                                        err_t *e) {
    return load_matrix(path, NULL, 0, sets, n_sets, e);
}

experiment_matrix_t *config_load_matrix_text(const char *label, const char *text, size_t len,
                                             const char *const *sets, int n_sets, err_t *e) {
    if (!text) {
        err_set(e, ERR_INPUT, "config_load_matrix_text: nothing given");
        return NULL;
    }
    return load_matrix(label, text, len, sets, n_sets, e);
}

static experiment_matrix_t *load_matrix(const char *path, const char *text, size_t text_len,
                                        const char *const *sets, int n_sets, err_t *e) {
    if (!path) {
        err_set(e, ERR_INPUT, "config_load_matrix: no matrix file given");
        return NULL;
    }
    cfg_ctx_t *c;
    cfg_state_t *st;
    if (begin(&c, &st, e)) return NULL;
    c->text = text;
    c->text_len = text_len;
    experiment_matrix_t *mx = calloc(1, sizeof *mx);
    cfg_state_t *base = calloc(1, sizeof *base);
    yaml_document_t doc;
    bool have_doc = false;
    int rc = !mx || !base ? err_set(e, ERR_RUNTIME, "out of memory loading a matrix") : 0;
    if (!rc) rc = load_chain(c, st, path, 0, (cfg_loc_t){-1, 0, 0}, &doc);
    have_doc = !rc;
    yaml_node_pair_t *mp = NULL;
    yaml_node_t *mv = NULL;
    if (!rc) {
        c->cur = 0, c->doc = &doc;
        mp = top_pair(c, yaml_document_get_root_node(&doc), "matrix");
        if (!mp)
            rc = cfg_fail(c, (cfg_loc_t){0, 0, 0},
                          "no matrix: key, so this is a single experiment; run it with "
                          "`runner %s`",
                          path);
    }
    if (!rc) {
        mv = cfg_node(c, mp->value);
        long n = mv->type == YAML_SEQUENCE_NODE
                     ? (long)(mv->data.sequence.items.top - mv->data.sequence.items.start)
                     : 0;
        cfg_loc_t ml = cfg_node_loc(c, mv);
        if (mv->type != YAML_SEQUENCE_NODE || n == 0) {
            char buf[96];
            rc = cfg_fail(c, ml,
                          "matrix: expected a list of entries like `- {name: a, "
                          "optimizer.lr: 0.05}`, found %s",
                          n == 0 && mv->type == YAML_SEQUENCE_NODE
                              ? "an empty list"
                              : cfg_describe(mv, buf, sizeof buf));
        } else if (n > CFG_MAX_MATRIX) {
            rc = cfg_fail(c, ml, "matrix: %ld entries; at most %d", n, (int)CFG_MAX_MATRIX);
        } else {
            mx->n = (int)n;
        }
    }
    if (!rc) {
        if (st->set[row_of("name")]) {
            snprintf(mx->name, sizeof mx->name, "%s", st->x.name);
        } else {
            char stem[CFG_PATH], buf[128];
            file_stem(path, stem, sizeof stem);
            const char *why = cfg_plain_name_problem(stem, buf, sizeof buf);
            if (why)
                rc = cfg_fail(c, (cfg_loc_t){0, 0, 0},
                              "the matrix name '%s' taken from the file name %s; add `name: "
                              "<plain name>` or rename the file",
                              stem, why);
            else
                snprintf(mx->name, sizeof mx->name, "%.200s", stem);
        }
    }
    for (int i = 0; !rc && i < n_sets; i++) {
        const char *k = sets[i];
        while (*k == ' ') k++;
        const char *eq = strchr(k, '=');       /* the key: before '=', spaces trimmed */
        size_t kl = eq ? (size_t)(eq - k) : 0;
        while (kl && k[kl - 1] == ' ') kl--;
        if (kl == 4 && !strncmp(k, "name", 4))
            rc = err_set(e, ERR_INPUT,
                         "--set %.200s: name cannot be set for a matrix, whose entries name "
                         "their runs; put the matrix's own name in the file (name: ...)",
                         sets[i]);
    }
    /* repeats: from the file, then --set repeats=N (which the entries never see) */
    const char *entry_sets[CFG_MAX_SETS];
    int n_entry_sets = 0;
    if (!rc) rc = matrix_repeats(c, path, &doc, mx, sets, n_sets, entry_sets, &n_entry_sets);
    if (n_sets > CFG_MAX_SETS) n_entry_sets = n_sets;   /* apply_sets refuses them */
    int n_files = c->n_src;
    if (!rc) {
        *base = *st;
        for (int i = 0; i < mx->n && !rc; i++) {
            c->doc = &doc; /* apply_sets of the previous entry pointed it elsewhere */
            rc = load_entry(c, st, base, &doc, cfg_node(c, mv->data.sequence.items.start[i]), i,
                            mx, n_sets > CFG_MAX_SETS ? sets : entry_sets, n_entry_sets, path, n_files);
        }
    }
    if (have_doc) yaml_document_delete(&doc);
    free(c);
    free(st);
    free(base);
    if (rc) {
        free(mx);
        return NULL;
    }
    return mx;
}
