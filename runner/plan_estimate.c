/* plan_estimate.c: how long the plan's steps will take (plan.h plan_estimate).
 *
 * Only a measured rate gives a number: summary.json's images_per_second (a finished run's
 * steady-state rate: the images of its steady steps over their time) from a run of the
 * same setup, looked for first among the runs of this experiment, then among every run
 * under output.root (newest first, 2000 directories at most). Same setup: plan.json's
 * device, GPU name, mode, world size, precision, dataset, arch, stem, input shape, global
 * batch, accumulation and CPU threads per rank, and on the CPU env.json's CPU model. The
 * estimate covers the training steps still to run (a resumed run: from the step its
 * summary.json says it reached), counting the images they train (an epoch's training set
 * over its steps, so a partial last batch counts as partial); evaluation, start-up and
 * checkpoints add to it, and the plan says so. Without a measurement there is no number:
 * FLOPs alone give no honest time for an unknown machine, so the plan says where the ETA
 * will come from and what the steps cost.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/arch/arch.h"
#include "runner/plan.h"
#include "runner/rundir.h"
#include "util/json.h"

enum { MAX_CANDIDATES = 2000 };

/* A JSON file of run_dir, NULL when missing or unreadable. */
static json_t *run_json(const char *run_dir, const char *file) {
    char path[CFG_PATH + 64];
    snprintf(path, sizeof path, "%s/%s", run_dir, file);
    err_t ignore = {0};
    return json_parse_file(path, 1 << 22, &ignore);
}

static bool same_str(const json_t *j, const char *key, const char *want) {
    return !strcmp(json_get_string(j, key, "\x01"), want);
}

static bool same_num(const json_t *j, const char *key, double want) {
    return json_get_number(j, key, NAN) == want;
}

/* A key that runs planned before it existed lack (arch_width, arch_groups: ResNets only then,
 * which have them fixed by the name) */
static bool same_num_or_absent(const json_t *j, const char *key, double want) {
    return !json_get(j, key) || same_num(j, key, want);
}

/* True when the run in dir was planned for the setup p describes (plan.json, env.json). */
static bool same_setup(const char *dir, const plan_t *p, const char *cpu) {
    json_t *j = run_json(dir, "plan.json");
    if (!j) return false;
    const json_t *in = json_get(j, "input");
    bool same = same_str(j, "device", p->device) && same_str(j, "gpu_name", p->gpu_name) &&
                same_str(j, "mode", p->mode) && same_num(j, "world_size", p->world_size) &&
                same_str(j, "precision", p->precision) && same_str(j, "dataset", p->dataset) &&
                same_str(j, "arch", p->arch) && same_str(j, "stem", arch_stem_name(p->stem)) &&
                same_num_or_absent(j, "arch_width", p->arch_width) &&
                same_num_or_absent(j, "arch_groups", p->arch_groups) &&
                same_num(j, "global_batch", p->global_batch) && same_num(j, "grad_accum", p->grad_accum) &&
                in && in->type == JSON_ARRAY && in->count == 3 && in->items[0]->number == p->channels &&
                in->items[1]->number == p->height && in->items[2]->number == p->width;
    if (same && !strcmp(p->device, "cpu")) same = same_num(j, "threads_per_rank", p->threads_per_rank);
    json_free(j);
    if (same && !strcmp(p->device, "cpu")) {
        json_t *env = run_json(dir, "env.json");
        same = env && same_str(env, "cpu", cpu);
        json_free(env);
    }
    return same;
}

/* The measured training rate of the run in dir (images/s), NAN when it has none. */
static double measured_rate(const char *dir) {
    json_t *s = run_json(dir, "summary.json");
    double ips = s ? json_get_number(s, "images_per_second", NAN) : NAN;
    json_free(s);
    return ips > 0 && isfinite(ips) ? ips : NAN;
}

static int newest_first(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    const char *bx = strrchr(x, '/'), *by = strrchr(y, '/');
    return strcmp(by ? by + 1 : y, bx ? bx + 1 : x);
}

/* Adds the run directories under dir (prefixed by it) to list. */
static void list_runs(const char *dir, char **list, int *n) {
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && *n < MAX_CANDIDATES && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[CFG_PATH + 512];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (rundir_is_run(path) && (list[*n] = strdup(path))) (*n)++;
    }
    if (d) closedir(d);
}

/* The newest run among list[0..n) of p's setup with a measured rate: its rate and path. */
static double pick(char **list, int n, const plan_t *p, const char *cpu, char *from, size_t len) {
    qsort(list, (size_t)n, sizeof *list, newest_first);
    for (int i = 0; i < n; i++) {
        double ips = measured_rate(list[i]);
        if (isfinite(ips) && same_setup(list[i], p, cpu)) {
            snprintf(from, len, "%s", list[i]);
            return ips;
        }
    }
    return NAN;
}

/* "1.2 PFLOP", "39 GFLOP". */
static void human_flop(double gflop, char *out, size_t len) {
    static const char *const unit[] = {"GFLOP", "TFLOP", "PFLOP", "EFLOP"};
    int u = 0;
    while (gflop >= 1000 && u < 3) { gflop /= 1000; u++; }
    snprintf(out, len, "%.3g %s", gflop, unit[u]);
}

/* "2 h 05 min", "7 min", "40 s". */
static void human_duration(double s, char *out, size_t len) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, len, "%ld h %02ld min", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(out, len, "%ld min", (t + 30) / 60);
    else if (t >= 1) snprintf(out, len, "%ld s", t);
    else snprintf(out, len, "under a second");
}

void plan_estimate(const experiment_t *e, plan_t *p) {
    p->est_seconds = NAN;
    char cpu[256] = "", own[CFG_PATH + CFG_STR + 2], from[CFG_PATH + 512] = "";
    rundir_cpu_model(cpu, sizeof cpu);
    int64_t done = 0;
    if (p->resumes) {   /* where the run to resume got to */
        json_t *s = run_json(p->run_dir, "summary.json");
        done = s ? (int64_t)json_get_number(s, "steps", 0) : 0;
        json_free(s);
    }
    int64_t steps = p->total_steps > done ? p->total_steps - done : 0;
    char **list = calloc(MAX_CANDIDATES, sizeof *list);
    int n = 0;
    double ips = NAN;
    bool same_experiment = true;
    if (list) {
        snprintf(own, sizeof own, "%s/%s", e->output.root, e->name);
        list_runs(own, list, &n);
        ips = pick(list, n, p, cpu, from, sizeof from);
        if (!isfinite(ips)) {   /* any experiment under the root */
            same_experiment = false;
            for (int i = 0; i < n; i++) free(list[i]);
            n = 0;
            DIR *d = opendir(e->output.root);
            struct dirent *de;
            while (d && n < MAX_CANDIDATES && (de = readdir(d))) {
                char sub[CFG_PATH + 512];
                snprintf(sub, sizeof sub, "%s/%s", e->output.root, de->d_name);
                if (de->d_name[0] != '.' && strcmp(de->d_name, e->name)) list_runs(sub, list, &n);
            }
            if (d) closedir(d);
            ips = pick(list, n, p, cpu, from, sizeof from);
        }
        for (int i = 0; i < n; i++) free(list[i]);
        free(list);
    }
    /* the images the steps train: an epoch's training set (padded by DDP's sampler) spread
     * over its steps, so a partial last batch counts as partial */
    double per_step = p->steps_per_epoch > 0
                          ? (double)p->samples_per_rank * (!strcmp(p->mode, "ddp") ? p->world_size : 1) /
                                (double)p->steps_per_epoch
                          : p->global_batch;
    double images = (double)steps * per_step;
    if (isfinite(ips)) {
        p->est_seconds = images / ips;
        char d[64];
        human_duration(p->est_seconds, d, sizeof d);
        snprintf(p->est_source, sizeof p->est_source, "about %s for %lld steps (estimate: %.1f images/s as "
                 "measured by %s%s, same device, model, input, batch and precision; evaluation and start-up not "
                 "included)", d, (long long)steps, ips, from, same_experiment ? "" : ", another experiment");
    } else {
        char flop[32];
        human_flop(3.0 * p->forward_gflops_per_sample * images, flop, sizeof flop);
        snprintf(p->est_source, sizeof p->est_source, "unknown until the first steps run: no finished run under "
                 "%.400s has this device, model, input, batch and precision to measure a rate from (the %lld "
                 "steps need ~%s, 3 x forward; the progress line shows an ETA)", e->output.root,
                 (long long)steps, flop);
    }
}
