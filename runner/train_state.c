/* train_state.c: what a checkpoint holds and how a run is restored from one, the
 * epoch checkpoint cadence (last / best / epoch_<N>, keep_last), the files that describe
 * the run (config.yaml, resolved.yaml, plan.json, env.json, config_changes.jsonl on a
 * changed resume) and summary.json.
 *
 * Sections: "meta" (JSON: architecture, sizes, world size, step, epoch position,
 * epoch accumulators, best top-1, loss-scaler state, optimizer step count, BN counters,
 * W&B run id), "params", "buffers", one "optim.<state>" per optimizer state array, and
 * "resolved.yaml" (for people). Restoring checks the architecture, stem, class count and
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

/* Host copies of the arrays a checkpoint needs. */
typedef struct host_state {
    float *params, *buffers;
    float *optim[4];
    int n_optim;
} host_state_t;

static void host_state_free(host_state_t *h) {
    free(h->params);
    free(h->buffers);
    for (int i = 0; i < h->n_optim; i++) free(h->optim[i]);
}

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
    jw_kstr(&w, "stem", resnet_stem_name(t->p->stem));
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
    jw_knum(&w, "loss_scale", scale);
    jw_kint(&w, "growth_tracker", tracker);
    jw_kint(&w, "optim_steps", opt_steps);
    jw_kstr(&w, "wandb_run_id", t->wandb_run_id);
    jw_key(&w, "bn_counters");
    jw_arr_begin(&w);
    int64_t *cn = net_counters(t->net);
    for (int i = 0; i < net_num_counters(t->net); i++) jw_int(&w, cn[i]);
    jw_arr_end(&w);
    jw_obj_end(&w);
    fclose(f);
    return buf;
}

int trainer_save_checkpoint(trainer_t *t, const char *path, err_t *e) {
    host_state_t h = {0};
    size_t np = net_num_params(t->net), nb = net_num_buffers(t->net);
    int rc = -1;
    char *meta = NULL, *yaml = NULL;
    size_t ylen = 0;
    h.params = malloc(np * sizeof(float));
    h.buffers = malloc((nb ? nb : 1) * sizeof(float));
    if (!h.params || !h.buffers) { err_set(e, ERR_RUNTIME, "out of memory writing %s", path); goto out; }
    if (net_download_params(t->net, h.params, e) || net_download_buffers(t->net, h.buffers, e)) goto out;
    h.n_optim = optim_num_state(t->opt);
    for (int i = 0; i < h.n_optim; i++) {
        h.optim[i] = malloc(np * sizeof(float));
        if (!h.optim[i]) { err_set(e, ERR_RUNTIME, "out of memory writing %s", path); goto out; }
        if (t->be->ops->download(t->be, h.optim[i], optim_state(t->opt, i), np * sizeof(float))) {
            *e = t->be->err;
            goto out;
        }
    }
    double scale;
    int64_t tracker, opt_steps;
    if (loss_scaler_get_state(&t->scaler, &scale, &tracker, e) || optim_steps(t->opt, &opt_steps, e)) goto out;
    meta = meta_json(t, scale, tracker, opt_steps);
    yaml = config_yaml_string(t->e, &ylen);
    if (!meta || !yaml) { err_set(e, ERR_RUNTIME, "out of memory writing %s", path); goto out; }
    ckpt_section_t s[8];
    int n = 0;
    memset(s, 0, sizeof s);
    snprintf(s[n].name, CKPT_NAME_MAX, "meta"); s[n].data = meta; s[n].size = strlen(meta); n++;
    snprintf(s[n].name, CKPT_NAME_MAX, "params"); s[n].data = h.params; s[n].size = np * sizeof(float); n++;
    snprintf(s[n].name, CKPT_NAME_MAX, "buffers"); s[n].data = h.buffers; s[n].size = nb * sizeof(float); n++;
    for (int i = 0; i < h.n_optim; i++) {
        snprintf(s[n].name, CKPT_NAME_MAX, "optim.%s", optim_state_name(t->opt, i));
        s[n].data = h.optim[i];
        s[n].size = np * sizeof(float);
        n++;
    }
    snprintf(s[n].name, CKPT_NAME_MAX, "resolved.yaml"); s[n].data = yaml; s[n].size = ylen; n++;
    rc = ckpt_write(path, config_hash(t->e), s, n, e);
out:
    free(meta);
    free(yaml);
    host_state_free(&h);
    return rc;
}

/* Replaces dst by a hard link to src (atomic via a temporary name); copies if linking
 * is impossible. */
static int link_over(const char *src, const char *dst, err_t *e) {
    char tmp[CFG_PATH + 160];
    snprintf(tmp, sizeof tmp, "%s.link-%ld", dst, (long)getpid());
    unlink(tmp);
    if (link(src, tmp) == 0) {
        if (rename(tmp, dst) == 0) return 0;
        unlink(tmp);
    }
    return copy_file(src, dst, e);
}

/* The N of every epoch_<N>.ckpt in dir, newest first (at most max). Returns the count. */
static int list_epoch_checkpoints(const char *dir, int *epochs, int max) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < max) {
        int ep;
        char tail[8];
        if (sscanf(de->d_name, "epoch_%d.ck%7s", &ep, tail) == 2 && !strcmp(tail, "pt")) epochs[n++] = ep;
    }
    closedir(d);
    for (int i = 1; i < n; i++)   /* insertion sort, descending */
        for (int j = i; j > 0 && epochs[j - 1] < epochs[j]; j--) {
            int x = epochs[j]; epochs[j] = epochs[j - 1]; epochs[j - 1] = x;
        }
    return n;
}

/* Removes epoch_<N>.ckpt files beyond the newest keep_last. */
static void prune_epochs(const char *dir, int keep_last) {
    int epochs[4096];
    int n = list_epoch_checkpoints(dir, epochs, 4096);
    for (int i = keep_last; i < n; i++) {
        char p[CFG_PATH + 64];
        snprintf(p, sizeof p, "%s/epoch_%d.ckpt", dir, epochs[i]);
        unlink(p);
    }
}

int trainer_checkpoint_epoch(trainer_t *t, bool improved, err_t *e) {
    char dir[CFG_PATH + 16], main_path[CFG_PATH + 64], path[CFG_PATH + 64];
    _Static_assert(sizeof main_path + 32 <= CFG_PATH + 160, "link_over temp name fits");
    snprintf(dir, sizeof dir, "%s/checkpoints", t->run_dir);
    int n = t->epoch + 1;
    bool last = t->step >= t->p->total_steps;
    int every = t->e->checkpoint.every_epochs;   /* 0: only last/best */
    bool periodic = last || (every > 0 && n % every == 0);
    if (periodic && t->e->checkpoint.keep_last > 0) snprintf(main_path, sizeof main_path, "%s/epoch_%d.ckpt", dir, n);
    else snprintf(main_path, sizeof main_path, "%s/last.ckpt", dir);
    if (trainer_save_checkpoint(t, main_path, e)) return -1;
    snprintf(path, sizeof path, "%s/last.ckpt", dir);
    if (strcmp(main_path, path) && link_over(main_path, path, e)) return -1;
    if (improved && t->e->checkpoint.keep_best) {
        snprintf(path, sizeof path, "%s/best.ckpt", dir);
        if (link_over(main_path, path, e)) return -1;
    }
    if (t->e->checkpoint.keep_last > 0) prune_epochs(dir, t->e->checkpoint.keep_last);
    return 0;
}

int trainer_checkpoint_cut(trainer_t *t, bool improved, err_t *e) {
    char path[CFG_PATH + 64], best[CFG_PATH + 64];
    snprintf(path, sizeof path, "%s/checkpoints/last.ckpt", t->run_dir);
    if (trainer_save_checkpoint(t, path, e)) return -1;
    snprintf(best, sizeof best, "%s/checkpoints/best.ckpt", t->run_dir);
    return improved && t->e->checkpoint.keep_best ? link_over(path, best, e) : 0;
}

/* Candidate checkpoints for resume, best first: the plan's file, then epoch_<N>.ckpt
 * newest first. */
static int resume_candidates(const trainer_t *t, char out[][CFG_PATH + 128], int max) {
    int n = 0;
    snprintf(out[n++], CFG_PATH + 128, "%s", t->p->resume_from);
    char dir[CFG_PATH + 16];
    snprintf(dir, sizeof dir, "%s/checkpoints", t->run_dir);
    int epochs[256];
    int ne = list_epoch_checkpoints(dir, epochs, 256);
    for (int i = 0; i < ne && n < max; i++) snprintf(out[n++], CFG_PATH + 128, "%s/epoch_%d.ckpt", dir, epochs[i]);
    return n;
}

/* Applies a verified checkpoint to the trainer. */
static int apply_checkpoint(trainer_t *t, const ckpt_t *c, err_t *e) {
    const ckpt_section_t *ms = ckpt_find(c, "meta");
    if (!ms) return err_set(e, ERR_INPUT, "%s: section 'meta' missing", c->path);
    json_t *m = json_parse((const char *)ms->data, (size_t)ms->size, e);
    if (!m) return err_wrap(e, "%s: meta", c->path);
    int rc = -1;
    const char *arch = json_get_string(m, "arch", "?");
    int classes = (int)json_get_number(m, "num_classes", -1);
    int inc = (int)json_get_number(m, "in_channels", -1);
    int64_t pc = (int64_t)json_get_number(m, "param_count", -1);
    /* checkpoints from before model.stem existed are CIFAR-stem ones */
    const char *stem = json_get_string(m, "stem", "cifar");
    if (strcmp(stem, resnet_stem_name(t->p->stem))) {
        err_set(e, ERR_INPUT, "%s: checkpoint is for %s with the %s stem, but this experiment builds the %s "
                "stem (%s); resume with model.stem: %s, or set checkpoint.resume: never to start a new run",
                c->path, arch, stem, resnet_stem_name(t->p->stem), t->p->stem_reason, stem);
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
    snprintf(t->wandb_run_id, sizeof t->wandb_run_id, "%s", json_get_string(m, "wandb_run_id", ""));
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
    return rundir_write_env(t->run_dir, (const char *const *)t->hosts, t->n_hosts, e);
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int trainer_write_summary(trainer_t *t, const char *status, int exit_code, const char *error, err_t *e) {
    /* images/s: median over steady-state steps (the first 10% and the first 5 are warm-up) */
    double ips = NAN;
    if (t->n_ips > 0) {
        int64_t skip = t->n_ips / 10 > 5 ? t->n_ips / 10 : (t->n_ips > 5 ? 5 : 0);
        int64_t m = t->n_ips - skip;
        double *v = malloc((size_t)m * sizeof *v);
        if (v) {
            memcpy(v, t->ips + skip, (size_t)m * sizeof *v);
            qsort(v, (size_t)m, sizeof *v, cmp_double);
            ips = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
            free(v);
        }
    }
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
    jw_knum(&w, "images_per_second", ips);
    jw_knum(&w, "seconds_per_epoch", t->epochs_timed ? t->epoch_seconds_sum / t->epochs_timed : NAN);
    jw_kint(&w, "peak_memory_bytes", t->be && t->be->ops->peak_memory ? (int64_t)t->be->ops->peak_memory(t->be) : 0);
    jw_knum(&w, "comm_exposed_fraction", t->ddp && t->sum_step_s > 0 ? t->sum_comm_exposed_s / t->sum_step_s : 0);
    /* ddp totals over this process's steps: how long the gradient all-reduces ran, and how
     * much of that the step waited for (the rest was hidden behind backward) */
    jw_knum(&w, "comm_allreduce_seconds", t->ddp ? t->sum_comm_allreduce_s : 0);
    jw_knum(&w, "comm_exposed_seconds", t->ddp ? t->sum_comm_exposed_s : 0);
    jw_kstr(&w, "mode", t->p->mode);
    jw_kint(&w, "world_size", t->p->world_size);
    jw_kstr(&w, "precision", t->p->precision);
    jw_kint(&w, "batch_size", t->p->global_batch);
    jw_kstr(&w, "device", t->p->device);
    jw_kstr(&w, "arch", t->e->model.arch);
    jw_kstr(&w, "dataset", t->e->data.dataset);
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
