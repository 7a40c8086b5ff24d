/* train_state.c: what a checkpoint holds and how a run is restored from one, the
 * checkpoint files (last / best / epoch_<N> / step_<N>, keep_last), the files that
 * describe the run (config.yaml, resolved.yaml, plan.json, env.json, config_changes.jsonl
 * on a changed resume) and summary.json.
 *
 * Sections: "meta" (JSON: architecture, stem, sizes, world size, step, epoch position,
 * epoch accumulators, best top-1, best by checkpoint.best_metric, early-stopping state,
 * loss-scaler state, optimizer step count, BN counters, W&B run id), "params", "buffers",
 * one "optim.<state>" per optimizer state array, with train.ema "ema.params" and
 * "ema.buffers", and "resolved.yaml" (for people). A snapshot is taken into the
 * background writer's buffer and written there (ckpt_writer.h). Restoring checks the architecture, stem, class count and
 * parameter count (another model is refused) and the data-parallel world size (a
 * different world size would visit other samples, so it is refused rather than being
 * silently inexact). A corrupt or truncated checkpoint is reported and the next older
 * good one (epoch_<N>.ckpt, newest first) is used.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/checkpoint.h"
#include "runner/rundir.h"
#include "runner/train_internal.h"
#include "util/json.h"

/* scale, tracker, opt_steps: the step control's values, read by the caller. */
static char *meta_json(trainer_t *t, double scale, int64_t tracker, int64_t opt_steps) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    jw_t w;
    jw_init(&w, f, true);
    jw_obj_begin(&w);
    jw_kstr(&w, "arch", t->e->model.arch);
    jw_kstr(&w, "stem", arch_stem_name(t->p->stem));
    /* model.width / groups / dropout as built (export rebuilds the same net from them) */
    jw_knum(&w, "width", t->p->arch_width);
    jw_kint(&w, "groups", t->p->arch_groups);
    jw_knum(&w, "dropout", t->p->arch_dropout);
    jw_kint(&w, "in_channels", net_in_channels(t->net));
    jw_kint(&w, "num_classes", net_num_classes(t->net));
    jw_kint(&w, "in_h", t->p->height);
    jw_kint(&w, "in_w", t->p->width);
    /* what rebuilding the model and its input pipeline elsewhere needs (runner export puts
     * it in the safetensors metadata, with the arch, stem and input size above) */
    jw_kstr(&w, "dataset", t->e->data.dataset);
    jw_key(&w, "mean");
    jw_arr_begin(&w);
    for (int k = 0; k < t->train_opts.n_norm; k++) jw_num(&w, t->train_opts.mean[k]);
    jw_arr_end(&w);
    jw_key(&w, "std");
    jw_arr_begin(&w);
    for (int k = 0; k < t->train_opts.n_norm; k++) jw_num(&w, t->train_opts.std[k]);
    jw_arr_end(&w);
    jw_key(&w, "class_names");
    jw_arr_begin(&w);
    for (int k = 0; t->train_ds && k < dataset_num_classes(t->train_ds); k++) jw_str(&w, dataset_class_name(t->train_ds, k));
    jw_arr_end(&w);
    jw_kint(&w, "param_count", (int64_t)net_num_params(t->net));
    jw_kint(&w, "buffer_count", (int64_t)net_num_buffers(t->net));
    jw_kstr(&w, "mode", t->p->mode);
    jw_kint(&w, "data_world_size", t->ddp_mode ? t->env->world_size : 1);
    jw_kint(&w, "steps_per_epoch", t->p->steps_per_epoch);
    jw_kint(&w, "step", t->step);
    jw_kint(&w, "epoch", t->epoch);
    jw_kint(&w, "start_batch", t->start_batch);
    jw_knum(&w, "ep_loss_sum", t->ep_loss_sum);
    jw_kint(&w, "ep_correct", t->ep_correct);
    jw_kint(&w, "ep_samples", t->ep_samples);
    jw_knum(&w, "ep_seconds", t->ep_seconds);
    jw_knum(&w, "best_val_top1", t->best_val_top1);
    jw_kint(&w, "best_epoch", t->best_epoch);
    jw_knum(&w, "val_top1", t->val_top1);
    jw_knum(&w, "epoch_seconds_sum", t->epoch_seconds_sum);
    jw_kint(&w, "epochs_timed", t->epochs_timed);
    jw_kint(&w, "steady_steps", t->steady.steady_steps);
    jw_knum(&w, "steady_images", t->steady.steady_images);
    jw_knum(&w, "steady_seconds", t->steady.steady_seconds);
    jw_kint(&w, "warmup_steps", t->steady.warmup_steps);
    jw_knum(&w, "warmup_images", t->steady.warmup_images);
    jw_knum(&w, "warmup_seconds", t->steady.warmup_seconds);
    jw_knum(&w, "loss_scale", scale);
    jw_kint(&w, "growth_tracker", tracker);
    jw_kint(&w, "optim_steps", opt_steps);
    jw_kstr(&w, "wandb_run_id", t->wandb_run_id);
    jw_knum(&w, "best_value", t->best_value);
    jw_kint(&w, "best_value_epoch", t->best_value_epoch);
    jw_knum(&w, "val_top1_ema", t->val_top1_ema);
    jw_knum(&w, "best_val_top1_ema", t->best_val_top1_ema);
    jw_kbool(&w, "ema", t->ema != NULL);
    jw_knum(&w, "es_best", t->stop.best);
    jw_kint(&w, "es_best_epoch", t->stop.best_epoch);
    jw_kint(&w, "es_wait", t->stop.wait);
    jw_kbool(&w, "early_stopped", t->stop.stopped);
    jw_kstr(&w, "stop_reason", t->stop.reason);
    jw_key(&w, "bn_counters");
    jw_arr_begin(&w);
    int64_t *cn = net_counters(t->net);
    for (int i = 0; i < net_num_counters(t->net); i++) jw_int(&w, cn[i]);
    jw_arr_end(&w);
    jw_obj_end(&w);
    fclose(f);
    return buf;
}

/* Downloads n floats of backend memory into the snapshot. */
static int take(trainer_t *t, float *dst, const float *src, size_t n, err_t *e) {
    if (n && t->be->ops->download(t->be, dst, src, n * sizeof(float))) {
        *e = t->be->err;
        return -1;
    }
    return 0;
}

static void add_section(ckpt_job_t *j, const char *name, const void *data, size_t size) {
    snprintf(j->sections[j->n].name, CKPT_NAME_MAX, "%s", name);
    j->sections[j->n].data = data;
    j->sections[j->n].size = size;
    j->n++;
}

/* Fills job j with the trainer's state: the arrays go to the writer's buffer (which waits
 * for the previous write), meta and resolved.yaml to blocks the job owns. */
static int snapshot(trainer_t *t, ckpt_job_t *j, err_t *e) {
    size_t np = net_num_params(t->net), nb = net_num_buffers(t->net);
    int no = optim_num_state(t->opt);
    size_t floats = np + nb + (size_t)no * np + (t->ema ? np + nb : 0);
    float *buf = ckpt_writer_buffer(t->writer, floats * sizeof(float), e);
    if (!buf) return -1;
    float *at = buf;
    if (take(t, at, net_params(t->net), np, e)) return -1;
    add_section(j, "params", at, np * sizeof(float));
    at += np;
    if (take(t, at, net_buffers(t->net), nb, e)) return -1;
    add_section(j, "buffers", at, nb * sizeof(float));
    at += nb;
    for (int i = 0; i < no; i++, at += np) {
        char name[CKPT_NAME_MAX];
        snprintf(name, sizeof name, "optim.%s", optim_state_name(t->opt, i));
        if (take(t, at, optim_state(t->opt, i), np, e)) return -1;
        add_section(j, name, at, np * sizeof(float));
    }
    if (t->ema) {
        if (take(t, at, ema_params(t->ema), np, e)) return -1;
        add_section(j, "ema.params", at, np * sizeof(float));
        at += np;
        if (take(t, at, ema_buffers(t->ema), nb, e)) return -1;
        add_section(j, "ema.buffers", at, nb * sizeof(float));
    }
    double scale;
    int64_t tracker, opt_steps;
    if (loss_scaler_get_state(&t->scaler, &scale, &tracker, e) || optim_steps(t->opt, &opt_steps, e)) return -1;
    size_t ylen = 0;
    char *meta = meta_json(t, scale, tracker, opt_steps), *yaml = config_yaml_string(t->e, &ylen);
    j->owned[0] = meta;
    j->owned[1] = yaml;
    if (!meta || !yaml) return err_set(e, ERR_RUNTIME, "out of memory writing a checkpoint");
    /* meta first: readers find it at the front */
    memmove(&j->sections[1], &j->sections[0], (size_t)j->n * sizeof j->sections[0]);
    j->n++;
    snprintf(j->sections[0].name, CKPT_NAME_MAX, "meta");
    j->sections[0].data = meta;
    j->sections[0].size = strlen(meta);
    add_section(j, "resolved.yaml", yaml, ylen);
    j->config_hash = config_hash(t->e);
    return 0;
}

/* Which file, links and pruning (keep_last): an epoch checkpoint is epoch_<N>.ckpt when it
 * is periodic (or the last) and keep_last > 0, else last.ckpt; it is linked as last.ckpt
 * and, improved, as best.ckpt. A step checkpoint is step_<S>.ckpt when keep_last > 0 (the
 * newest keep_last of them are kept, counted apart from the epoch files), else last.ckpt;
 * it is linked as last.ckpt. */
int trainer_checkpoint(trainer_t *t, trainer_ckpt_kind_t kind, bool improved, err_t *e) {
    if (!t->rank0) return 0;
    ckpt_job_t *j = calloc(1, sizeof *j);
    if (!j) return err_set(e, ERR_RUNTIME, "out of memory writing a checkpoint");
    char dir[CFG_PATH + 16], last[CFG_PATH + 64];
    snprintf(dir, sizeof dir, "%s/checkpoints", t->run_dir);
    snprintf(last, sizeof last, "%s/last.ckpt", dir);
    snprintf(j->path, sizeof j->path, "%s", last);
    int keep = t->e->checkpoint.keep_last;
    if (kind == TRAINER_CKPT_EPOCH) {
        int n = t->epoch + 1, every = t->e->checkpoint.every_epochs;
        bool periodic = t->step >= t->p->total_steps || t->stop.stopped || (every > 0 && n % every == 0);
        if (periodic && keep > 0) {
            snprintf(j->path, sizeof j->path, "%s/epoch_%d.ckpt", dir, n);
            snprintf(j->prune_dir, sizeof j->prune_dir, "%s", dir);
            snprintf(j->prune_prefix, sizeof j->prune_prefix, "epoch_");
            j->prune_keep = keep;
        }
    } else if (kind == TRAINER_CKPT_STEP && keep > 0) {
        snprintf(j->path, sizeof j->path, "%s/step_%lld.ckpt", dir, (long long)t->step);
        snprintf(j->prune_dir, sizeof j->prune_dir, "%s", dir);
        snprintf(j->prune_prefix, sizeof j->prune_prefix, "step_");
        j->prune_keep = keep;
    }
    snprintf(j->links[0], sizeof j->links[0], "%s", last);
    /* an epoch's checkpoint, or the one train.max_steps ends a run with mid-epoch (after
     * that partial epoch's evaluation), is best.ckpt when its evaluation improved */
    if (improved && t->e->checkpoint.keep_best) snprintf(j->links[1], sizeof j->links[1], "%s/best.ckpt", dir);
    int rc = snapshot(t, j, e);
    if (rc) {
        for (int i = 0; i < CKPT_JOB_OWNED; i++) free(j->owned[i]);
    } else {
        rc = ckpt_writer_submit(t->writer, j, e);
    }
    free(j);
    return rc;
}

/* Candidate checkpoints for resume, best first: the plan's file, then epoch_<N>.ckpt and
 * step_<S>.ckpt, the newest (by the step they were written at) first. */
static int resume_candidates(const trainer_t *t, char out[][CFG_PATH + 128], int max) {
    int n = 0;
    snprintf(out[n++], CFG_PATH + 128, "%s", t->p->resume_from);
    char dir[CFG_PATH + 16];
    snprintf(dir, sizeof dir, "%s/checkpoints", t->run_dir);
    int64_t ep[64], st[64];
    int ne = ckpt_list_numbered(dir, "epoch_", ep, 64), ns = ckpt_list_numbered(dir, "step_", st, 64);
    for (int a = 0, b = 0; (a < ne || b < ns) && n < max;) {
        /* epoch N ended at step N * steps_per_epoch (or at max_steps, which is smaller) */
        bool take_epoch = b >= ns || (a < ne && ep[a] * t->p->steps_per_epoch >= st[b]);
        if (take_epoch) snprintf(out[n++], CFG_PATH + 128, "%s/epoch_%lld.ckpt", dir, (long long)ep[a++]);
        else snprintf(out[n++], CFG_PATH + 128, "%s/step_%lld.ckpt", dir, (long long)st[b++]);
    }
    return n;
}

/* Applies a verified checkpoint to the trainer. */
static int apply_checkpoint(trainer_t *t, const ckpt_t *c, err_t *e) {
    const ckpt_section_t *ms = ckpt_find(c, "meta");
    if (!ms) return err_set(e, ERR_INPUT, "%s: section 'meta' missing", c->path);
    json_t *m = json_parse((const char *)ms->data, (size_t)ms->size, e);
    if (!m) return err_wrap(e, "%s: meta", c->path);
    int rc = -1;
    if (ckpt_meta_check(c->path, m, e)) goto out;   /* every number below fits its cast */
    const char *arch = json_get_string(m, "arch", "?");
    int classes = (int)json_get_number(m, "num_classes", -1);
    int inc = (int)json_get_number(m, "in_channels", -1);
    int64_t pc = (int64_t)json_get_number(m, "param_count", -1);
    /* checkpoints from before model.stem existed are CIFAR-stem ones */
    const char *stem = json_get_string(m, "stem", "cifar");
    if (strcmp(stem, arch_stem_name(t->p->stem))) {
        err_set(e, ERR_INPUT, "%s: checkpoint is for %s with the %s stem, but this experiment builds the %s "
                "stem (%s); resume with model.stem: %s, or set checkpoint.resume: never to start a new run",
                c->path, arch, stem, arch_stem_name(t->p->stem), t->p->stem_reason, stem);
        goto out;
    }
    if (strcmp(arch, t->e->model.arch) || classes != net_num_classes(t->net) || inc != net_in_channels(t->net) ||
        pc != (int64_t)net_num_params(t->net)) {
        err_set(e, ERR_INPUT, "%s: checkpoint is for %s with %d input channels and %d classes, but this "
                "experiment is %s with %d and %d; resume with the experiment that wrote it, or set "
                "checkpoint.resume: never to start a new run", c->path, arch, inc, classes,
                t->e->model.arch, net_in_channels(t->net), net_num_classes(t->net));
        goto out;
    }
    int ws = (int)json_get_number(m, "data_world_size", 1), my_ws = t->ddp_mode ? t->env->world_size : 1;
    if (ws != my_ws) {
        err_set(e, ERR_INPUT, "%s: checkpoint was written by %d data-parallel rank%s and this run has %d; the "
                "samples each rank visits would differ, so resuming would not be exact: resume with "
                "--set parallel.world_size=%d%s", c->path, ws, ws == 1 ? "" : "s", my_ws, ws,
                ws == 1 ? " --set parallel.mode=single" : "");
        goto out;
    }
    if ((int64_t)json_get_number(m, "steps_per_epoch", -1) != t->p->steps_per_epoch) {
        err_set(e, ERR_INPUT, "%s: checkpoint has %lld steps per epoch, this plan %lld (batch size or dataset "
                "changed); resume with the same train.batch_size and data", c->path,
                (long long)json_get_number(m, "steps_per_epoch", -1), (long long)t->p->steps_per_epoch);
        goto out;
    }
    size_t np = net_num_params(t->net), nb = net_num_buffers(t->net);
    float *buf = malloc((np > nb ? np : nb) * sizeof(float) + 4);
    if (!buf) { err_set(e, ERR_RUNTIME, "out of memory"); goto out; }
    if (ckpt_get(c, "params", buf, np * sizeof(float), e) || net_upload_params(t->net, buf, e) ||
        ckpt_get(c, "buffers", buf, nb * sizeof(float), e) || net_upload_buffers(t->net, buf, e)) {
        free(buf);
        goto out;
    }
    for (int i = 0; i < optim_num_state(t->opt); i++) {
        char name[CKPT_NAME_MAX];
        snprintf(name, sizeof name, "optim.%s", optim_state_name(t->opt, i));
        if (ckpt_get(c, name, buf, np * sizeof(float), e)) { free(buf); goto out; }
        if (t->be->ops->upload(t->be, optim_state(t->opt, i), buf, np * sizeof(float))) {
            *e = t->be->err;
            free(buf);
            goto out;
        }
    }
    if (t->ema && ckpt_find(c, "ema.params")) {
        if (ckpt_get(c, "ema.params", buf, np * sizeof(float), e) ||
            t->be->ops->upload(t->be, ema_params(t->ema), buf, np * sizeof(float)) ||
            ckpt_get(c, "ema.buffers", buf, nb * sizeof(float), e) ||
            (nb && t->be->ops->upload(t->be, ema_buffers(t->ema), buf, nb * sizeof(float)))) {
            if (!e->code) *e = t->be->err;
            free(buf);
            goto out;
        }
    } else if (t->ema) {
        /* train.ema turned on for a run that had none: start the average from the restored
         * weights, as timm does when a checkpoint has no state_dict_ema */
        if (ema_reset(t->ema, e)) { free(buf); goto out; }
        if (t->rank0)
            fprintf(stderr, "runner: note: %s has no EMA weights; the average starts from its weights\n", c->path);
    }
    free(buf);
    const json_t *cn = json_get(m, "bn_counters");
    int64_t *counters = net_counters(t->net);
    for (int i = 0; cn && cn->type == JSON_ARRAY && i < (int)cn->count && i < net_num_counters(t->net); i++)
        counters[i] = (int64_t)cn->items[i]->number;
    if (optim_set_steps(t->opt, (int64_t)json_get_number(m, "optim_steps", 0), e) ||
        loss_scaler_set_state(&t->scaler, json_get_number(m, "loss_scale", 1),
                              (int64_t)json_get_number(m, "growth_tracker", 0), e))
        goto out;
    t->step = (int64_t)json_get_number(m, "step", 0);
    t->epoch = (int)json_get_number(m, "epoch", 0);
    t->start_batch = (int64_t)json_get_number(m, "start_batch", 0);
    t->ep_loss_sum = json_get_number(m, "ep_loss_sum", 0);
    t->ep_correct = (int64_t)json_get_number(m, "ep_correct", 0);
    t->ep_samples = (int64_t)json_get_number(m, "ep_samples", 0);
    t->ep_seconds = json_get_number(m, "ep_seconds", 0);
    t->best_val_top1 = json_get_number(m, "best_val_top1", -1);
    t->best_epoch = (int)json_get_number(m, "best_epoch", 0);
    t->epoch_seconds_sum = json_get_number(m, "epoch_seconds_sum", 0);
    t->epochs_timed = (int)json_get_number(m, "epochs_timed", 0);
    /* the windows timed before the checkpoint (0 from a checkpoint older than timing.csv) */
    t->steady = (steady_sums_t){
        .steady_steps = (int64_t)json_get_number(m, "steady_steps", 0),
        .steady_images = json_get_number(m, "steady_images", 0),
        .steady_seconds = json_get_number(m, "steady_seconds", 0),
        .warmup_steps = (int64_t)json_get_number(m, "warmup_steps", 0),
        .warmup_images = json_get_number(m, "warmup_images", 0),
        .warmup_seconds = json_get_number(m, "warmup_seconds", 0)};
    snprintf(t->wandb_run_id, sizeof t->wandb_run_id, "%s", json_get_string(m, "wandb_run_id", ""));
    t->val_top1 = json_get_number(m, "val_top1", NAN);
    t->best_value = json_get_number(m, "best_value", NAN);
    t->best_value_epoch = (int)json_get_number(m, "best_value_epoch", 0);
    if (t->best_value_epoch == 0 && t->best_epoch > 0 && t->e->checkpoint.best_metric == METRIC_VAL_TOP1) {
        t->best_value = t->best_val_top1;   /* a checkpoint from before checkpoint.best_metric */
        t->best_value_epoch = t->best_epoch;
    }
    t->val_top1_ema = json_get_number(m, "val_top1_ema", NAN);
    t->best_val_top1_ema = json_get_number(m, "best_val_top1_ema", -1);
    if (t->stop.metric != METRIC_NONE) {
        t->stop.best = json_get_number(m, "es_best", t->stop.best);
        t->stop.best_epoch = (int)json_get_number(m, "es_best_epoch", 0);
        t->stop.wait = (int)json_get_number(m, "es_wait", 0);
    }
    const json_t *es = json_get(m, "early_stopped");
    t->stop.stopped = es && es->type == JSON_BOOL && es->boolean;
    snprintf(t->stop.reason, sizeof t->stop.reason, "%s", json_get_string(m, "stop_reason", ""));
    t->ckpt_hash_differs = c->config_hash != config_hash(t->e);   /* recorded by write_run_files */
    rc = 0;
out:
    json_free(m);
    return rc;
}

/* Resuming with another configuration (`runner resume DIR --set ...`, or keys outside
 * the hash under checkpoint.resume: auto): the run directory keeps every change with the
 * step it took effect in config_changes.jsonl, since resolved.yaml only holds the latest. */
int trainer_record_config_changes(trainer_t *t, err_t *e) {
    char what[1024], line[1200];
    int rc = rundir_record_config_changes(t->run_dir, t->e, t->step, (int)(t->step / t->p->steps_per_epoch) + 1, what, sizeof what,
                                          &t->config_changes, e);
    if (rc < 0) return -1;
    if (rc > 0) {
        snprintf(line, sizeof line, "runner: configuration changed at step %lld: %.1000s (recorded in "
                 "config_changes.jsonl)", (long long)t->step, what);
        printf("%s\n", line);
    } else if (t->ckpt_hash_differs) {
        printf("runner: note: the checkpoint was written by a different experiment configuration; continuing "
               "with the current one (not an exact continuation)\n");
    }
    fflush(stdout);
    return 0;
}

/* env.json's "compute": the backend, its math libraries with the instruction-set level
 * they run at, and for every distinct convolution of the net (at the training
 * micro-batch) the engine and kernel each direction runs on, where the backend says
 * (the CPU backend: oneDNN's kernel or OpenBLAS GEMM, chosen per shape and ISA). */
static void env_compute(jw_t *w, void *ctx) {
    trainer_t *t = ctx;
    backend_t *be = t->be;
    jw_key(w, "compute");
    jw_obj_begin(w);
    jw_kstr(w, "backend", be->ops->name);
    char buf[512];
    if (be->ops->libraries) {
        be->ops->libraries(be, buf, sizeof buf);
        jw_kstr(w, "libraries", buf);
    }
    if (be->ops->conv_engine && t->net) {
        jw_key(w, "conv_engines");
        net_write_conv_engines(t->net, t->p->per_device_batch, w);
    }
    jw_obj_end(w);
}

/* Rank 0: the files that describe the run, written once when it starts. */
int trainer_write_run_files(trainer_t *t, err_t *e) {
    char path[CFG_PATH + 64];
    if (!t->p->resumes) {
        snprintf(path, sizeof path, "%s/config.yaml", t->run_dir);
        if (t->env->config_text_path && copy_file(t->env->config_text_path, path, e)) return -1;
    }
    if (t->p->resumes && trainer_record_config_changes(t, e)) return -1;
    char *buf = NULL;
    size_t len = 0;
    if (!(buf = config_yaml_string(t->e, &len))) return err_set(e, ERR_RUNTIME, "out of memory");
    snprintf(path, sizeof path, "%s/resolved.yaml", t->run_dir);
    int rc = write_file_atomic(path, buf, len, e);
    free(buf);
    if (rc) return -1;
    plan_t p = *t->p;
    snprintf(p.run_dir, sizeof p.run_dir, "%s", t->run_dir);
    FILE *f = open_memstream(&buf, &len);
    if (!f) return err_set(e, ERR_RUNTIME, "out of memory");
    plan_write_json(&p, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/plan.json", t->run_dir);
    rc = write_file_atomic(path, buf, len, e);
    free(buf);
    if (rc) return -1;
    snprintf(path, sizeof path, "%s/classes.txt", t->run_dir);
    if (plan_images_write_classes(t->p, path, e)) return -1;
    return rundir_write_env(t->run_dir, (const char *const *)t->hosts, t->n_hosts, env_compute, t, e);
}

int trainer_restore(trainer_t *t, err_t *e) {
    char cands[16][CFG_PATH + 128];
    int n = resume_candidates(t, cands, 16);
    err_t first = {0};
    for (int i = 0; i < n; i++) {
        err_t ce = {0};
        ckpt_t *c = ckpt_read(cands[i], &ce);
        if (!c) {
            if (!first.code) first = ce;
            if (t->rank0) fprintf(stderr, "runner: warning: %s; trying the previous checkpoint\n", ce.msg);
            continue;
        }
        int rc = apply_checkpoint(t, c, e);
        ckpt_free(c);
        if (rc) return -1;   /* a readable checkpoint that does not fit is not skipped */
        if (i > 0 && t->rank0) fprintf(stderr, "runner: resumed from %s instead\n", cands[i]);
        return 0;
    }
    *e = first;
    return err_wrap(e, "no usable checkpoint in %s/checkpoints (start again with checkpoint.resume: never)", t->run_dir);
}

/* Restarts of this run by the launcher, over every invocation: the lines of
 * restarts.jsonl (parallel.max_restarts). */
static int count_restarts(const char *run_dir) {
    char path[CFG_PATH + 32];
    snprintf(path, sizeof path, "%s/restarts.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

int trainer_write_summary(trainer_t *t, const char *status, int exit_code, const char *error, err_t *e) {
    /* images/s: every steady-state step over its time (runner/report/steady.h); a run too
     * short to have one reports all its steps, warm-up included (steady_steps says 0) */
    const steady_sums_t *sd = &t->steady;
    double ips = steady_rate(sd);
    if (isnan(ips) && sd->warmup_seconds > 0) ips = sd->warmup_images / sd->warmup_seconds;
    int64_t epoch_images = t->p->samples_per_rank * (t->ddp_mode ? t->p->world_size : 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return err_set(e, ERR_RUNTIME, "out of memory");
    jw_t w;
    jw_init(&w, f, true);
    jw_obj_begin(&w);
    jw_kstr(&w, "name", t->e->name);
    jw_kstr(&w, "status", status);
    jw_kint(&w, "exit_code", exit_code);
    if (error && *error) jw_kstr(&w, "error", error);   /* why a failed run stopped */
    /* why the run ended before its last epoch (early stopping), null otherwise */
    if (t->stop.stopped) jw_kstr(&w, "stop_reason", t->stop.reason);
    else jw_knum(&w, "stop_reason", NAN);
    jw_kbool(&w, "early_stopped", t->stop.stopped);
    jw_kint(&w, "restarts", count_restarts(t->run_dir));
    /* epochs with a metrics.csv row: a run that train.max_steps ended mid-epoch evaluated
     * (and may have its best.ckpt from) that partial epoch */
    int64_t spe = t->p->steps_per_epoch > 0 ? t->p->steps_per_epoch : 1;
    jw_kint(&w, "epochs", t->step / spe + (!strcmp(status, "completed") && t->step % spe ? 1 : 0));
    jw_kint(&w, "steps", t->step);
    jw_knum(&w, "train_loss", t->train_loss);
    jw_knum(&w, "train_top1", t->train_top1);
    jw_knum(&w, "val_loss", t->val_loss);
    jw_knum(&w, "val_top1", t->val_top1);
    jw_knum(&w, "val_top5", t->val_top5);
    jw_knum(&w, "best_val_top1", t->best_val_top1 >= 0 ? t->best_val_top1 : NAN);
    jw_kint(&w, "best_epoch", t->best_epoch);
    jw_kint(&w, "config_changes", t->config_changes);
    jw_knum(&w, "val_loss_ema", t->ema ? t->val_loss_ema : NAN);
    jw_knum(&w, "val_top1_ema", t->ema ? t->val_top1_ema : NAN);
    jw_knum(&w, "val_top5_ema", t->ema ? t->val_top5_ema : NAN);
    jw_knum(&w, "best_val_top1_ema", t->ema && t->best_val_top1_ema >= 0 ? t->best_val_top1_ema : NAN);
    jw_kstr(&w, "best_metric", metric_name(t->e->checkpoint.best_metric));
    jw_knum(&w, "best_metric_value", t->best_value_epoch ? t->best_value : NAN);
    jw_kint(&w, "best_metric_epoch", t->best_value_epoch);
    jw_knum(&w, "images_per_second", ips);
    jw_knum(&w, "seconds_per_epoch", t->epochs_timed ? t->epoch_seconds_sum / t->epochs_timed : NAN);
    jw_kint(&w, "steady_steps", sd->steady_steps);
    jw_kint(&w, "warmup_steps", sd->warmup_steps);
    jw_knum(&w, "steady_seconds", sd->steady_seconds);
    jw_kint(&w, "images_per_epoch", epoch_images);
    jw_knum(&w, "steady_seconds_per_epoch", (double)epoch_images / steady_rate(sd));
    jw_kint(&w, "peak_memory_bytes", t->be && t->be->ops->peak_memory ? (int64_t)t->be->ops->peak_memory(t->be) : 0);
    jw_knum(&w, "comm_exposed_fraction", t->ddp && t->sum_step_s > 0 ? t->sum_comm_exposed_s / t->sum_step_s : 0);
    /* ddp totals over this process's steps: how long the gradient all-reduces ran, and how
     * much of that the step waited for (the rest was hidden behind backward) */
    jw_knum(&w, "comm_allreduce_seconds", t->ddp ? t->sum_comm_allreduce_s : 0);
    jw_knum(&w, "comm_exposed_seconds", t->ddp ? t->sum_comm_exposed_s : 0);
    jw_kint(&w, "graph_recordings", t->graph_recordings);
    jw_kint(&w, "graph_launches", t->graph_launches);
    jw_kstr(&w, "mode", t->p->mode);
    jw_kint(&w, "world_size", t->p->world_size);
    jw_kstr(&w, "precision", t->p->precision);
    jw_kint(&w, "batch_size", t->p->global_batch);
    jw_kstr(&w, "device", t->p->device);
    jw_kstr(&w, "arch", t->e->model.arch);
    jw_kstr(&w, "dataset", t->e->data.dataset);
    if (t->p->images) {   /* data.bad_images: skip, over all ranks (train_skipped.c) */
        int64_t indexing, decoding;
        trainer_skipped_counts(t, &indexing, &decoding);
        jw_kint(&w, "bad_images_skipped", indexing + decoding);
        jw_kint(&w, "bad_images_skipped_indexing", indexing);
        jw_kint(&w, "bad_images_skipped_decoding", decoding);
    }
    jw_knum(&w, "wall_seconds", now_s() - t->wall_start);
    jw_obj_end(&w);
    fputc('\n', f);
    fclose(f);
    char path[CFG_PATH + 32];
    snprintf(path, sizeof path, "%s/summary.json", t->run_dir);
    int rc = write_file_atomic(path, buf, len, e);
    free(buf);
    return rc;
}
