/* track.c: the metrics bus. Receives steps, epochs, summary values and console lines
 * from the training loop and routes them to the sinks (progress, CSV, TensorBoard, the
 * W&B offline log and the W&B online sender). See track.h for the contract.
 *
 * W&B history uses the optimizer step as _step. Rows reported at the same step (the
 * print_every row and the epoch row at an epoch's last step) are merged into one history
 * row, as the SDK does for wandb.log(..., step=s); a row is emitted when a later step
 * arrives or at close.
 *
 * Not here: the encodings (tensorboard.c, wandb_offline.c), HTTP (wandb.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/track/track_impl.h"
#include "util/fs.h"
#include "util/json.h"

#define STEPS_HEADER "step,epoch,lr,loss,top1,images_per_second,step_seconds,compute_seconds," \
                     "comm_exposed_seconds,data_wait_seconds,loss_scale,grad_norm"
#define METRICS_HEADER "epoch,step,lr,train_loss,train_top1,val_loss,val_top1,val_top5," \
                       "epoch_seconds,images_per_second,peak_memory_bytes,val_loss_ema,val_top1_ema," \
                       "val_top5_ema"
#define TIMING_HEADER "step,steps,epoch,since_start,images,seconds"

enum { SUMMARY_MAX = 96 };

typedef struct summary_item {
    char key[64];
    char value[256];          /* JSON text */
} summary_item_t;

struct track {
    bool active;              /* rank 0 with a run dir: sinks open */
    int print_every;
    int64_t total_steps;
    double close_timeout_s;
    FILE *warn;
    char run_dir[1024];
    char run_id[16];
    bool csv_on;
    track_csv_t steps_csv, metrics_csv, timing_csv;
    track_progress_sink_t prog;
    track_tb_t *tb;
    track_wlog_t *wlog;
    track_wandb_t *wb;
    double t0_mono, t0_wall;
    int64_t resume_step;      /* W&B rows at or below this step were sent before */
    /* the pending W&B history row */
    int64_t pend_step;        /* -1: none */
    int pend_n;
    track_kv_t pend[TRACK_MAX_KV];
    int64_t last_hist_step;
    summary_item_t summary[SUMMARY_MAX];
    int n_summary;
    bool summary_dirty;
};

void track_opts_init(track_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->print_every = 50;
    o->csv = true;
    o->wandb_mode = "disabled";
    o->progress = TRACK_PROGRESS_AUTO;
}

static const char *nonempty(const char *s) { return s && *s ? s : NULL; }

/* Environment variable if set and non-empty, else fallback. */
static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v && *v ? v : nonempty(fallback);
}

/* A fresh run id: 8 characters [a-z0-9] from /dev/urandom (time and pid as fallback). */
static void new_run_id(char *id) {
    static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    uint8_t r[8];
    int fd = open("/dev/urandom", O_RDONLY);
    ssize_t got = fd >= 0 ? read(fd, r, sizeof r) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof r) {
        uint64_t x = (uint64_t)(track_now_wall() * 1e6) ^ ((uint64_t)getpid() << 32);
        for (int i = 0; i < 8; i++) { x = x * 6364136223846793005ull + 1442695040888963407ull; r[i] = (uint8_t)(x >> 56); }
    }
    for (int i = 0; i < 8; i++) id[i] = al[r[i] % 36];
    id[8] = 0;
}

/* Picks the W&B run id: given > remembered in the run dir (resume) > WANDB_RUN_ID > new,
 * and remembers it in <run_dir>/wandb/run_id. */
static int choose_run_id(track_t *t, const track_opts_t *o, err_t *e) {
    char path[1200];
    snprintf(path, sizeof path, "%s/wandb/run_id", t->run_dir);
    const char *id = nonempty(o->wandb_run_id);
    char buf[64] = "";
    if (!id && o->is_resume) {
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(buf, sizeof buf, f)) buf[strcspn(buf, "\r\n \t")] = 0;
            fclose(f);
            if (*buf) id = buf;
        }
    }
    if (!id) id = nonempty(getenv("WANDB_RUN_ID"));
    if (id) {
        if (strlen(id) >= sizeof t->run_id || strspn(id, "abcdefghijklmnopqrstuvwxyz"
                "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != strlen(id))
            return err_set(e, ERR_INPUT, "W&B run id \"%.64s\" (WANDB_RUN_ID or %s): use 1-15 "
                           "characters of [a-zA-Z0-9_-]", id, path);
        snprintf(t->run_id, sizeof t->run_id, "%.15s", id);
    } else {
        new_run_id(t->run_id);
    }
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/wandb", t->run_dir);
    if (mkdir_p(dir, ERR_RUNTIME, e) != 0) return -1;
    char line[64];
    int n = snprintf(line, sizeof line, "%s\n", t->run_id);
    return write_file_atomic(path, line, (size_t)n, e);   /* a kill never leaves half an id */
}

/* Splits a comma list (WANDB_TAGS) into tags stored in buf. Returns the count. */
static int split_tags(const char *list, char *buf, size_t len, const char **tags) {
    snprintf(buf, len, "%s", list);
    int n = 0;
    for (char *tok = strtok(buf, ","); tok && n < TRACK_MAX_TAGS; tok = strtok(NULL, ",")) {
        while (*tok == ' ') tok++;
        char *end = tok + strlen(tok);
        while (end > tok && end[-1] == ' ') *--end = 0;
        if (*tok) tags[n++] = tok;
    }
    return n;
}

/* Opens the W&B offline log and, in online mode, the sender. */
static int open_wandb(track_t *t, const track_opts_t *o, const char *mode, err_t *e) {
    if (choose_run_id(t, o, e) != 0) return -1;
    char name_buf[256];
    const char *slash = strrchr(t->run_dir, '/');
    snprintf(name_buf, sizeof name_buf, "%.255s", slash && slash[1] ? slash + 1 : t->run_dir);
    char tag_buf[1024];
    const char *tags[TRACK_MAX_TAGS];
    int n_tags = 0;
    const char *env_tags = getenv("WANDB_TAGS");
    if (env_tags && *env_tags) {
        n_tags = split_tags(env_tags, tag_buf, sizeof tag_buf, tags);
    } else {
        for (int i = 0; i < o->n_wandb_tags && i < TRACK_MAX_TAGS; i++)
            if (nonempty(o->wandb_tags[i])) tags[n_tags++] = o->wandb_tags[i];
    }
    track_wrun_t run = {
        .run_id = t->run_id,
        .entity = env_or("WANDB_ENTITY", o->wandb_entity),
        .project = env_or("WANDB_PROJECT", nonempty(o->wandb_project) ? o->wandb_project
                          : nonempty(o->experiment) ? o->experiment : "uncategorized"),
        .display_name = env_or("WANDB_NAME", nonempty(o->run_name) ? o->run_name : name_buf),
        .group = env_or("WANDB_RUN_GROUP", o->wandb_group),
        .host = nonempty(o->host),
        .commit = nonempty(o->commit),
        .tags = tags,
        .n_tags = n_tags,
        .config_json = nonempty(o->config_json),
        .resumed = o->is_resume,
        .starting_step = o->is_resume ? o->resume_step : 0,
        .start_time = t->t0_wall,
    };
    char dir[1100];
    const char *wdir = getenv("WANDB_DIR");
    if (wdir && *wdir) snprintf(dir, sizeof dir, "%s/wandb", wdir);
    else snprintf(dir, sizeof dir, "%s/wandb", t->run_dir);
    if (mkdir_p(dir, ERR_RUNTIME, e) != 0) return -1;
    t->wlog = track_wlog_open(dir, &run, e);
    if (!t->wlog) return -1;
    if (strcmp(mode, "online") != 0) return 0;

    const char *base = env_or("WANDB_BASE_URL", "https://api.wandb.ai");
    char key[256];
    if (track_wandb_api_key(base, key, sizeof key) != 0) {
        char host[256];
        track_url_host(base, host, sizeof host);
        fprintf(t->warn, "warning: W&B: no API key for %s (set WANDB_API_KEY or add "
                "\"machine %s login user password <key>\" to ~/.netrc); logging offline only "
                "to %s (upload later with `wandb sync`)\n", base, host,
                track_wlog_path(t->wlog));
        return 0;
    }
    track_wandb_opts_t wo = {
        .run = run, .base_url = base, .api_key = key, .resume = o->is_resume,
        .timeout_s = o->wandb_timeout_s > 0 ? o->wandb_timeout_s : 10.0,
        .warn_out = t->warn, .offline_hint = track_wlog_path(t->wlog),
    };
    t->wb = track_wandb_start(&wo, e);
    memset(key, 0, sizeof key);
    return t->wb ? 0 : -1;
}

/* Opens the sinks; see track.h. */
track_t *track_open(const track_opts_t *o, err_t *e) {
    track_t *t = xcalloc(1, sizeof *t, e);
    if (!t) return NULL;
    t->pend_step = -1;
    t->last_hist_step = -1;
    t->warn = o->warn_out ? o->warn_out : stderr;
    t->print_every = o->print_every > 0 ? o->print_every : 1;
    t->total_steps = o->total_steps;
    t->close_timeout_s = o->close_timeout_s > 0 ? o->close_timeout_s : 10.0;
    t->resume_step = o->is_resume ? o->resume_step : -1;
    t->t0_mono = now_s();
    t->t0_wall = track_now_wall();
    if (o->rank != 0) return t;                   /* other ranks: a bus that does nothing */
    if (!nonempty(o->run_dir)) {
        free(t);
        err_set(e, ERR_RUNTIME, "track_open: no run directory given");
        return NULL;
    }
    t->active = true;
    snprintf(t->run_dir, sizeof t->run_dir, "%s", o->run_dir);
    track_progress_init(&t->prog, o->progress_out ? o->progress_out : stdout, o->progress,
                        t->print_every, o->total_steps, o->total_epochs);

    const char *mode = env_or("WANDB_MODE", nonempty(o->wandb_mode) ? o->wandb_mode : "disabled");
    if (!strcmp(mode, "dryrun")) mode = "offline";
    if (strcmp(mode, "online") && strcmp(mode, "offline") && strcmp(mode, "disabled")) {
        free(t);
        err_set(e, ERR_INPUT, "W&B mode \"%.64s\" (WANDB_MODE or logging.wandb.mode): use "
                "online, offline or disabled", mode);
        return NULL;
    }
    char path[1200];
    if (o->csv) {
        t->csv_on = true;
        snprintf(path, sizeof path, "%s/steps.csv", t->run_dir);
        if (track_csv_open(&t->steps_csv, path, STEPS_HEADER, 0, o->is_resume, o->resume_step, e))
            goto fail;
        snprintf(path, sizeof path, "%s/metrics.csv", t->run_dir);
        if (track_csv_open(&t->metrics_csv, path, METRICS_HEADER, 1, o->is_resume,
                           o->resume_step - (o->resume_mid_epoch ? 1 : 0), e))
            goto fail;
        snprintf(path, sizeof path, "%s/timing.csv", t->run_dir);
        if (track_csv_open(&t->timing_csv, path, TIMING_HEADER, 0, o->is_resume, o->resume_step, e))
            goto fail;
    }
    if (o->tensorboard) {
        snprintf(path, sizeof path, "%s/tensorboard", t->run_dir);
        if (mkdir_p(path, ERR_RUNTIME, e) != 0) goto fail;
        t->tb = track_tb_open(path, nonempty(o->host) ? o->host : "localhost", t->t0_wall, e);
        if (!t->tb) goto fail;
    }
    if (strcmp(mode, "disabled") != 0 && open_wandb(t, o, mode, e) != 0) goto fail;
    return t;
fail:
    track_csv_close(&t->steps_csv);
    track_csv_close(&t->metrics_csv);
    track_csv_close(&t->timing_csv);
    track_tb_close(t->tb);
    track_wlog_close(t->wlog);
    free(t);
    return NULL;
}

/* Sets summary[key] = JSON text value. */
static void summary_set(track_t *t, const char *key, const char *value_json) {
    int i = 0;
    while (i < t->n_summary && strcmp(t->summary[i].key, key) != 0) i++;
    if (i == t->n_summary) {
        if (t->n_summary == SUMMARY_MAX) return;
        t->n_summary++;
        snprintf(t->summary[i].key, sizeof t->summary[i].key, "%s", key);
    }
    snprintf(t->summary[i].value, sizeof t->summary[i].value, "%s", value_json);
    t->summary_dirty = true;
}

static void num_json(double v, char *buf, size_t len) {
    if (isfinite(v)) snprintf(buf, len, "%.17g", v);
    else snprintf(buf, len, "null");
}

/* Sends the whole summary to the online sender when it changed. */
static void summary_push(track_t *t) {
    if (!t->summary_dirty || !t->wb) return;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return;
    fputc('{', f);
    for (int i = 0; i < t->n_summary; i++) {
        if (i) fputc(',', f);
        json_write_string(f, t->summary[i].key);
        fprintf(f, ":%s", t->summary[i].value);
    }
    fputc('}', f);
    fclose(f);
    track_wandb_summary(t->wb, buf);
    free(buf);
    t->summary_dirty = false;
}

/* Emits the pending W&B history row (offline log, online sender, summary of last values). */
static int flush_history(track_t *t, err_t *e) {
    if (t->pend_step < 0) return 0;
    int64_t step = t->pend_step;
    t->pend_step = -1;
    if (step <= t->last_hist_step || step <= t->resume_step) return 0;
    t->last_hist_step = step;
    double runtime = now_s() - t->t0_mono, ts = track_now_wall();
    if (t->wlog && track_wlog_history(t->wlog, step, runtime, ts, t->pend, t->pend_n, e) != 0)
        return -1;
    char v[64];
    for (int i = 0; i < t->pend_n; i++) {
        num_json(t->pend[i].value, v, sizeof v);
        summary_set(t, t->pend[i].key, v);
    }
    if (!t->wb) return 0;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return 0;
    fprintf(f, "{\"_step\":%" PRId64 ",\"_runtime\":%.6f,\"_timestamp\":%.6f", step, runtime, ts);
    for (int i = 0; i < t->pend_n; i++) {
        fputc(',', f);
        json_write_string(f, t->pend[i].key);
        num_json(t->pend[i].value, v, sizeof v);
        fprintf(f, ":%s", v);
    }
    fputc('}', f);
    fclose(f);
    track_wandb_history(t->wb, step, buf);
    free(buf);
    summary_push(t);
    return 0;
}

/* Adds scalars to the W&B history row for step (merging rows of the same step) and
 * writes them to TensorBoard. */
static int emit_scalars(track_t *t, int64_t step, const track_kv_t *kv, int n, err_t *e) {
    if (t->tb && track_tb_scalars(t->tb, step, track_now_wall(), kv, n, e) != 0) return -1;
    if (!t->wlog) return 0;
    if (t->pend_step >= 0 && t->pend_step != step && flush_history(t, e) != 0) return -1;
    t->pend_step = step;
    for (int i = 0; i < n; i++) {
        if (isnan(kv[i].value)) continue;
        int j = 0;
        while (j < t->pend_n && strcmp(t->pend[j].key, kv[i].key) != 0) j++;
        if (j == t->pend_n) {
            if (t->pend_n == TRACK_MAX_KV) continue;
            t->pend_n++;
        }
        t->pend[j] = kv[i];                       /* keys are string literals */
    }
    return 0;
}

/* Reports one optimizer step; see track.h. */
int track_step(track_t *t, const track_step_t *r, err_t *e) {
    if (!t || !t->active) return 0;
    track_progress_step(&t->prog, r, now_s());
    bool last = t->total_steps > 0 && r->step >= t->total_steps;
    if (r->step % t->print_every != 0 && !last) return 0;
    double cells[12] = {(double)r->step, r->epoch, r->lr, r->loss, r->top1,
                        r->images_per_second, r->step_seconds, r->compute_seconds,
                        r->comm_exposed_seconds, r->data_wait_seconds, r->loss_scale, r->grad_norm};
    if (t->csv_on && track_csv_row(&t->steps_csv, cells, 12, 0x3, e) != 0) return -1;
    track_kv_t kv[] = {
        {"epoch", r->epoch}, {"train/lr", r->lr}, {"train/loss", r->loss},
        {"train/top1", r->top1}, {"perf/images_per_second", r->images_per_second},
        {"perf/step_seconds", r->step_seconds}, {"perf/compute_seconds", r->compute_seconds},
        {"perf/comm_exposed_seconds", r->comm_exposed_seconds},
        {"perf/data_wait_seconds", r->data_wait_seconds}, {"amp/loss_scale", r->loss_scale},
        {"train/grad_norm", r->grad_norm},
    };
    return emit_scalars(t, r->step, kv, (int)(sizeof kv / sizeof kv[0]), e);
}

/* Reports one read-back window; see track.h. */
int track_window(track_t *t, const track_window_t *w, err_t *e) {
    if (!t || !t->active || !t->csv_on) return 0;
    double cells[6] = {(double)w->step, (double)w->steps, w->epoch, (double)w->since_start,
                       (double)w->images, w->seconds};
    return track_csv_row(&t->timing_csv, cells, 6, 0x1f, e);
}

/* Reports one epoch; see track.h. */
int track_epoch(track_t *t, const track_epoch_t *r, err_t *e) {
    if (!t || !t->active) return 0;
    track_progress_epoch(&t->prog, r);
    double mem = r->peak_memory_bytes >= 0 ? (double)r->peak_memory_bytes : NAN;
    double cells[14] = {r->epoch, (double)r->step, r->lr, r->train_loss, r->train_top1,
                        r->val_loss, r->val_top1, r->val_top5, r->epoch_seconds,
                        r->images_per_second, mem, r->val_loss_ema, r->val_top1_ema, r->val_top5_ema};
    if (t->csv_on && (track_csv_row(&t->metrics_csv, cells, 14, 0x3 | (1u << 10), e) != 0 ||
                      track_csv_sync(&t->metrics_csv, e) != 0 || track_csv_sync(&t->steps_csv, e) != 0 ||
                      track_csv_sync(&t->timing_csv, e) != 0))
        return -1;
    track_kv_t kv[] = {
        {"epoch", r->epoch}, {"epoch/train_loss", r->train_loss},
        {"epoch/train_top1", r->train_top1}, {"val/loss", r->val_loss},
        {"val/top1", r->val_top1}, {"val/top5", r->val_top5},
        {"epoch/seconds", r->epoch_seconds}, {"epoch/images_per_second", r->images_per_second},
        {"epoch/peak_memory_bytes", mem}, {"epoch/lr", r->lr},
        {"val_ema/loss", r->val_loss_ema}, {"val_ema/top1", r->val_top1_ema},
        {"val_ema/top5", r->val_top5_ema},
    };
    return emit_scalars(t, r->step, kv, (int)(sizeof kv / sizeof kv[0]), e);
}

void track_eval_progress(track_t *t, int epoch, int64_t batch, int64_t batches, int64_t images) {
    if (!t || !t->active) return;
    track_progress_eval(&t->prog, epoch, batch, batches, images, now_s());
}

void track_summary(track_t *t, const char *key, double value) {
    if (!t || !t->active || !t->wlog || !key) return;
    char v[64];
    num_json(value, v, sizeof v);
    summary_set(t, key, v);
    track_wlog_summary(t->wlog, key, v, NULL);
    summary_push(t);
}

void track_summary_str(track_t *t, const char *key, const char *value) {
    if (!t || !t->active || !t->wlog || !key) return;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return;
    json_write_string(f, value ? value : "");
    fclose(f);
    summary_set(t, key, buf);
    track_wlog_summary(t->wlog, key, buf, NULL);
    free(buf);
    summary_push(t);
}

void track_console(track_t *t, const char *line) {
    if (!t || !t->active || !line) return;
    track_progress_line(&t->prog, line);
    if (t->wlog) track_wlog_output(t->wlog, line, track_now_wall(), NULL);
    if (t->wb) track_wandb_output(t->wb, line);
}

const char *track_wandb_run_id(const track_t *t) { return t && t->active ? t->run_id : ""; }

/* Finishes every sink; see track.h. */
int track_close(track_t *t, int exit_code, err_t *e) {
    if (!t) return 0;
    int rc = 0;
    if (t->active) {
        if (flush_history(t, e) != 0) rc = -1;
        track_progress_finish(&t->prog);
        double runtime = now_s() - t->t0_mono;
        if (t->wlog && t->n_summary) {
            /* the final summary in one record: `wandb sync` takes it as the run's summary */
            const char *keys[SUMMARY_MAX], *vals[SUMMARY_MAX];
            for (int i = 0; i < t->n_summary; i++) {
                keys[i] = t->summary[i].key;
                vals[i] = t->summary[i].value;
            }
            if (track_wlog_summary_items(t->wlog, keys, vals, t->n_summary, rc ? NULL : e) != 0)
                rc = -1;
        }
        if (t->wlog) {
            if (track_wlog_exit(t->wlog, exit_code, runtime, rc ? NULL : e) != 0) rc = -1;
            track_wlog_close(t->wlog);
        }
        if (t->wb) {
            summary_push(t);
            track_wandb_finish(t->wb, exit_code, t->close_timeout_s);
        }
        track_tb_close(t->tb);
        track_csv_close(&t->steps_csv);
        track_csv_close(&t->metrics_csv);
        track_csv_close(&t->timing_csv);
    }
    free(t);
    return rc;
}
