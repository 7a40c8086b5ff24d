/* main.c: the `runner` command line. Parses the verb and its options, turns every
 * err_t into one message on stderr and an exit code (0 ok, 1 runtime failure, 2 bad
 * input, 75 preempted, 130 interrupted). Everything else lives in the modules.
 *
 *   runner EXP.yaml [--set k=v]... [--nnodes N --node-rank R --master-addr A --master-port P]
 *   runner run EXP.yaml ...            same
 *   runner plan EXP.yaml [--json] [--set k=v]...
 *   runner resume RUN_DIR [--set k=v]...
 *   runner compare MATRIX.yaml [--set k=v]...
 *   runner report RUN_DIR... [--output DIR]
 *   runner check RUN_DIR --baseline FILE
 *   runner export RUN_DIR [--format safetensors] [--output FILE] [--checkpoint last|best|PATH] [--ema]
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/dataset.h"
#include "runner/config.h"
#include "runner/console_log.h"
#include "runner/export.h"
#include "runner/launch.h"
#include "runner/plan.h"
#include "runner/report/check.h"
#include "runner/report/compare.h"
#include "runner/report/report.h"
#include "runner/rundir.h"
#include "runner/runlock.h"
#include "runner/train.h"
#include "util/json.h"

static const char usage[] =
    "runner: reproducible data-parallel training of image classifiers from a YAML file\n"
    "\n"
    "usage:\n"
    "  runner EXPERIMENT.yaml [--set key=value]...      plan, launch, train, write a run directory\n"
    "  runner plan EXPERIMENT.yaml [--json] [--set ...]  print the resolved plan; starts nothing\n"
    "  runner resume RUN_DIR [--set key=value]...        continue an interrupted run exactly; with --set,\n"
    "                                                    continue it changed (recorded in config_changes.jsonl)\n"
    "  runner compare MATRIX.yaml [--set ...]            run a matrix of experiments + a report\n"
    "  runner report RUN_DIR... [--output DIR]           tables and plots from finished runs\n"
    "  runner check RUN_DIR --baseline FILE              regression gate (exit 1 on regression)\n"
    "  runner export RUN_DIR [--format safetensors] [--output FILE] [--checkpoint last|best|PATH] [--ema]\n"
    "\n"
    "Running the same experiment again continues its newest unfinished run (checkpoint.resume:\n"
    "auto); after a change to a key that defines the numbers (docs/experiment-files.md, column\n"
    "'hashed') it starts a new run directory instead and says so.\n"
    "multi-host: --nnodes N --node-rank R --master-addr HOST --master-port PORT\n"
    "docs: README.md, docs/experiment-files.md, docs/architecture.md\n";

typedef struct cli {
    const char *verb;
    const char *positional[64];
    int n_positional;
    const char *sets[CFG_MAX_SETS];
    int n_sets;
    bool json, ema;
    const char *output, *format, *baseline, *checkpoint;
    int nnodes, node_rank, master_port;
    const char *master_addr;
    bool has_nnodes, has_node_rank, has_master_port;
} cli_t;

static int parse_int_arg(const char *flag, const char *v, int lo, int hi, int *out, err_t *e) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi)
        return err_set(e, ERR_INPUT, "%s %s: expected an integer in [%d, %d]", flag, v, lo, hi);
    *out = (int)x;
    return 0;
}

/* Path arguments the shell left alone ('~/runs/x' quoted, or a value it never saw as a
 * path) get the expansion experiment files get (util/fs.h path_expand). A positional
 * argument loses trailing slashes (shells complete directories as 'runs/x/'), so the run
 * directories it names are printed and named as 'runs/x'. The changed strings live until
 * the process exits. */
static int cli_expand_paths(cli_t *c, err_t *e) {
    const char **paths[64 + 3];
    int n = 0;
    for (int i = 0; i < c->n_positional; i++) {
        const char *v = c->positional[i];
        size_t l = strlen(v);
        if (l < 2 || v[l - 1] != '/') continue;
        while (l > 1 && v[l - 1] == '/') l--;
        if (!(c->positional[i] = strndup(v, l))) return err_set(e, ERR_RUNTIME, "out of memory");
    }
    for (int i = 0; i < c->n_positional; i++) paths[n++] = &c->positional[i];
    paths[n++] = &c->output;
    paths[n++] = &c->baseline;
    paths[n++] = &c->checkpoint;
    for (int i = 0; i < n; i++) {
        const char *v = *paths[i];
        if (!v || !strpbrk(v, "~$")) continue;
        char buf[CFG_PATH];
        if (path_expand(v, buf, sizeof buf, e)) return err_wrap(e, "command line");
        if (!(*paths[i] = strdup(buf))) return err_set(e, ERR_RUNTIME, "out of memory");
    }
    return 0;
}

/* A first argument that is no verb and cannot be an experiment file (no such path, and
 * no '/' or '.' as a file name has): an unknown command, named with the verb it is a typo
 * of. "train" is no verb (a bare experiment file trains), but users type it. */
static int unknown_verb(int argc, char **argv, err_t *e) {
    static const char *const words[] = {"run", "plan", "resume", "compare", "report", "check", "export",
                                        "train"};
    const char *a = argv[1], *rest = argc > 2 ? argv[2] : "EXPERIMENT.yaml";
    const char *near = config_closest_word(a, words, (int)(sizeof words / sizeof *words));
    if (near && !strcmp(near, "train"))
        return err_set(e, ERR_INPUT, "unknown command '%s'; to train, give the experiment file itself: "
                       "runner %s (or runner run %s)", a, rest, rest);
    if (near)
        return err_set(e, ERR_INPUT, "unknown command '%s'; did you mean '%s'? (runner %s %s)", a, near, near,
                       argc > 2 ? argv[2] : "...");
    return err_set(e, ERR_INPUT, "unknown command '%s' (and no file of that name); the commands are plan, "
                   "resume, compare, report, check and export, or an experiment file to train "
                   "(runner EXPERIMENT.yaml); see runner --help", a);
}

/* `--set k v` (two arguments) or `--set k`: the form is one argument key=value. */
static int set_without_equals(const char *key, const char *next, err_t *e) {
    size_t n = next ? strlen(next) : 0;
    bool yaml = n > 5 && (!strcmp(next + n - 5, ".yaml") || !strcmp(next + n - 4, ".yml"));
    if (next && next[0] != '-' && !yaml)
        return err_set(e, ERR_INPUT, "--set %s %s: the form is --set key=value, as one argument; write "
                       "--set %s=%s", key, next, key, next);
    return err_set(e, ERR_INPUT, "--set %s: the form is --set key=value, e.g. --set %s=VALUE", key, key);
}

static int parse_cli(int argc, char **argv, cli_t *c, err_t *e) {
    memset(c, 0, sizeof *c);
    static const char *verbs[] = {"run", "plan", "resume", "compare", "report", "check", "export", "_member"};
    int i = 1;
    if (argc < 2) return err_set(e, ERR_INPUT, "no experiment given\n\n%s", usage);
    c->verb = "run";
    for (size_t k = 0; k < sizeof verbs / sizeof *verbs; k++)
        if (!strcmp(argv[1], verbs[k])) { c->verb = verbs[k]; i = 2; }
    if (i == 1 && argv[1][0] != '-' && !strpbrk(argv[1], "/.") && access(argv[1], F_OK) != 0)
        return unknown_verb(argc, argv, e);
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE() do { if (!v) return err_set(e, ERR_INPUT, "%s needs a value; see runner --help", a); i++; } while (0)
        if (!strcmp(a, "--set") || !strcmp(a, "-s")) {
            NEED_VALUE();
            if (!strchr(v, '=')) return set_without_equals(v, i + 1 < argc ? argv[i + 1] : NULL, e);
            if (c->n_sets == CFG_MAX_SETS) return err_set(e, ERR_INPUT, "at most %d --set options", CFG_MAX_SETS);
            c->sets[c->n_sets++] = v;
        } else if (!strncmp(a, "--set=", 6)) {
            if (!strchr(a + 6, '=')) return set_without_equals(a + 6, i + 1 < argc ? argv[i + 1] : NULL, e);
            if (c->n_sets == CFG_MAX_SETS) return err_set(e, ERR_INPUT, "at most %d --set options", CFG_MAX_SETS);
            c->sets[c->n_sets++] = a + 6;
        } else if (!strcmp(a, "--json")) {
            c->json = true;
        } else if (!strcmp(a, "--ema")) {
            c->ema = true;
        } else if (!strcmp(a, "--output") || !strcmp(a, "-o")) {
            NEED_VALUE(); c->output = v;
        } else if (!strcmp(a, "--format")) {
            NEED_VALUE(); c->format = v;
        } else if (!strcmp(a, "--baseline")) {
            NEED_VALUE(); c->baseline = v;
        } else if (!strcmp(a, "--checkpoint")) {
            NEED_VALUE(); c->checkpoint = v;
        } else if (!strcmp(a, "--nnodes")) {
            NEED_VALUE(); if (parse_int_arg(a, v, 1, 4096, &c->nnodes, e)) return -1; c->has_nnodes = true;
        } else if (!strcmp(a, "--node-rank")) {
            NEED_VALUE(); if (parse_int_arg(a, v, 0, 4095, &c->node_rank, e)) return -1; c->has_node_rank = true;
        } else if (!strcmp(a, "--master-addr")) {
            NEED_VALUE(); c->master_addr = v;
        } else if (!strcmp(a, "--master-port")) {
            NEED_VALUE(); if (parse_int_arg(a, v, 0, 65535, &c->master_port, e)) return -1; c->has_master_port = true;
        } else if (a[0] == '-' && a[1]) {
            return err_set(e, ERR_INPUT, "unknown option %s; see runner --help", a);
        } else {
            if (c->n_positional == 64) return err_set(e, ERR_INPUT, "too many arguments");
            c->positional[c->n_positional++] = a;
        }
#undef NEED_VALUE
    }
    return cli_expand_paths(c, e);
}

/* --nnodes and friends become --set overrides so the plan sees them. */
static void cli_parallel_sets(cli_t *c, char storage[4][300]) {
    int k = 0;
    if (c->has_nnodes && c->n_sets < CFG_MAX_SETS) {
        snprintf(storage[k], 300, "parallel.nnodes=%d", c->nnodes);
        c->sets[c->n_sets++] = storage[k++];
    }
    if (c->master_addr && c->n_sets < CFG_MAX_SETS) {
        snprintf(storage[k], 300, "parallel.master_addr=%s", c->master_addr);
        c->sets[c->n_sets++] = storage[k++];
    }
    if (c->has_master_port && c->n_sets < CFG_MAX_SETS) {
        snprintf(storage[k], 300, "parallel.master_port=%d", c->master_port);
        c->sets[c->n_sets++] = storage[k++];
    }
}

static int fail(const err_t *e) {
    fprintf(stderr, "runner: %s\n", e->msg[0] ? e->msg : "failed");
    return e->code ? e->code : 1;
}

/* Loads the experiment a run verb names: EXP.yaml, or RUN_DIR/resolved.yaml (resume). */
static int load_experiment(const cli_t *c, experiment_t *x, const char **exp_path, char *buf, size_t len,
                           err_t *e) {
    if (c->n_positional != 1)
        return err_set(e, ERR_INPUT, "%s takes exactly one %s; see runner --help", c->verb,
                       !strcmp(c->verb, "resume") ? "run directory" : "experiment file");
    if (!strcmp(c->verb, "resume") || !strcmp(c->verb, "_member")) {
        const char *dir = c->positional[0];
        if (!strcmp(c->verb, "_member")) snprintf(buf, len, "%s/experiment.yaml", dir);
        else snprintf(buf, len, "%s/resolved.yaml", dir);
        struct stat st;
        if (!strcmp(c->verb, "resume") && stat(dir, &st) == 0 && S_ISREG(st.st_mode))
            return err_set(e, ERR_INPUT, "%s is a file, not a run directory: to continue the newest unfinished run "
                           "of an experiment file, run the file itself (runner %s); resume takes the directory "
                           "runner printed when the run started (runs/<name>/<timestamp>-<id>)", dir, dir);
        if (access(buf, R_OK) != 0)
            return err_set(e, ERR_INPUT, "%s: not a run directory (no %s); give the directory runner printed "
                           "when the run started (runs/<name>/<timestamp>-<id>)", dir, strrchr(buf, '/') + 1);
        *exp_path = buf;
    } else {
        *exp_path = c->positional[0];
    }
    return config_load(*exp_path, c->sets, c->n_sets, x, e);
}

/* Where the run goes: resume dir, or a fresh run dir (created). */
static int prepare_run_dir(const cli_t *c, const experiment_t *x, plan_t *p, err_t *e) {
    if (!strcmp(c->verb, "_member")) {
        snprintf(p->run_dir, sizeof p->run_dir, "%s", c->positional[0]);
        char ck[CFG_PATH + 128];
        p->resumes = rundir_resume_checkpoint(p->run_dir, ck, sizeof ck);
        snprintf(p->resume_from, sizeof p->resume_from, "%s", p->resumes ? ck : "");
        snprintf(ck, sizeof ck, "%s/logs", p->run_dir);
        if (mkdir_p(ck, ERR_INPUT, e)) return -1;
        snprintf(ck, sizeof ck, "%s/checkpoints", p->run_dir);
        return mkdir_p(ck, ERR_INPUT, e);
    }
    if (p->resumes) return 0;
    return rundir_create(x->output.root, x->name, p->run_dir, sizeof p->run_dir, e);
}

/* The command line, for the run directory's lock file (whose process is writing it). */
static void command_line(int argc, char **argv, char *out, size_t len) {
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < argc && at + 1 < len; i++)
        at += (size_t)snprintf(out + at, len - at, "%s%s", i ? " " : "", i ? argv[i] : "runner");
}

/* Makes this process the one writer of the run directory (runlock.h) and creates it when
 * the run is new. A directory found to resume is locked before anything is printed or
 * written, and its checkpoint looked up again under the lock: a runner that held it until
 * a moment ago may have written a newer one. `runner resume DIR` and members locked DIR
 * before planning (lock->fd already set). Busy: ERR_INPUT naming the holder. The launcher
 * of a host other than rank 0's (--node-rank > 0) locks nothing: the directory it resumes
 * is rank 0's, locked by rank 0's host, and its own new one holds only its ranks' logs. */
static int claim_run_dir(const cli_t *c, const experiment_t *x, plan_t *p, run_lock_t *lock, const char *cmd,
                         err_t *e) {
    bool held = lock->fd >= 0 || lock->warning[0] || (c->has_node_rank && c->node_rank > 0);
    if (!held && p->resumes) {
        if (run_lock_take(p->run_dir, cmd, lock, e)) {
            if (!strcmp(c->verb, "run") && !strcmp(x->checkpoint.resume, "auto")) {
                size_t l = strlen(e->msg);
                snprintf(e->msg + l, sizeof e->msg - l, ". To start a separate new run of %s instead: add --set "
                         "checkpoint.resume=never", x->name);
            }
            return -1;
        }
        held = true;
        char ck[CFG_PATH + 128];
        if (rundir_resume_checkpoint(p->run_dir, ck, sizeof ck)) snprintf(p->resume_from, sizeof p->resume_from, "%s", ck);
    }
    if (prepare_run_dir(c, x, p, e)) return -1;
    if (!held && run_lock_take(p->run_dir, cmd, lock, e)) return -1;
    if (lock->warning[0]) fprintf(stderr, "runner: warning: %s\n", lock->warning);
    return 0;
}

/* What the plan wants the user to know as the run starts: an unfinished run of this name
 * that a changed configuration does not continue, and an oversubscribed CPU. */
static void print_plan_notes(const plan_t *p) {
    if (p->changed_from[0])
        printf("runner: not continuing the unfinished run %s: the configuration changed (%s); this is a new run. "
               "To continue that run with the change instead: runner resume %s%s\n", p->changed_from, p->changes,
               p->changed_from, p->change_sets);
    if (p->extends[0])
        printf("runner: continuing the completed run %s: %s. To start a new run instead: --set "
               "checkpoint.resume=never\n", p->run_dir, p->extends);
    if (p->note[0]) printf("runner: %s\n", p->note);
    if (p->warning[0]) fprintf(stderr, "runner: warning: %s\n", p->warning);
    fflush(stdout);
}

/* Downloads missing dataset files once, before ranks start, and plans again from them. */
static int fetch_data(const experiment_t *x, plan_t *p, err_t *e) {
    if (!p->will_download) return 0;
    for (int split = 0; split < 2; split++) {
        dataset_opts_t o = {.name = x->data.dataset, .root = p->data_root, .split = (data_split_t)split,
                            .download = true, .download_url = x->data.download_url,
                            .download_md5 = x->data.download_md5};
        dataset_t *d = NULL;
        if (dataset_open(&o, &d, e)) return -1;
        dataset_free(d);
    }
    return plan_after_download(x, p, e);
}

/* How a worker reports its failure. Under this runner's launcher (RUNNER_RUN_DIR set) the
 * launcher already prints one message naming the first rank that failed, with the last
 * lines of that rank's log; rank 0's output is also copied to the terminal, so printing
 * its error there too would give two messages for one failure (and, when rank 1 was
 * killed, rank 0's "rank 1 exited" would precede the launcher's own line). So rank 0
 * appends its message to logs/rank0.log only, where the launcher's excerpt shows it when
 * rank 0 is the one that failed. Elsewhere (torchrun, Slurm, rank != 0) it is fail(). */
static int worker_fail(const launch_env_t *le, const err_t *e) {
    const char *dir = getenv("RUNNER_RUN_DIR");
    if (le->rank != 0 || !dir || !dir[0]) return fail(e);
    char path[CFG_PATH + 32];
    snprintf(path, sizeof path, "%s/logs/rank0.log", dir);
    FILE *f = fopen(path, "a");
    if (!f) return fail(e);
    fflush(stdout);
    fprintf(f, "runner: %s\n", e->msg[0] ? e->msg : "failed");
    fclose(f);
    return e->code ? e->code : 1;
}

/* A DDP worker (started by our launcher, torchrun, srun or mpirun). */
static int run_worker(const cli_t *c, const launch_env_t *le, int argc, char **argv, err_t *e) {
    char name[16];   /* ps/top: runner[rank N] (15 characters at most) */
    snprintf(name, sizeof name, le->rank < 100 ? "runner[rank %d]" : "runner[r%d]", le->rank);
    prctl(PR_SET_NAME, name, 0, 0, 0);
    experiment_t x;
    const char *exp_path;
    char buf[CFG_PATH + 64];
    if (load_experiment(c, &x, &exp_path, buf, sizeof buf, e)) return worker_fail(le, e);
    const char *run_dir = getenv("RUNNER_RUN_DIR");
    const char *resume_from = getenv("RUNNER_RESUME_FROM");
    plan_request_t req = {0};
    req.for_worker = run_dir != NULL || le->rank != 0;
    if (!strcmp(c->verb, "resume")) req.resume_dir = c->positional[0];
    plan_t p;
    if (plan_build(&x, &req, &p, e)) return worker_fail(le, e);
    /* checked before rank 0 creates a run directory, which a failed start must not leave */
    if (p.world_size != le->world_size) {
        err_set(e, ERR_INPUT, "the launcher started %d ranks (WORLD_SIZE) but %s says parallel.world_size %d; "
                "make them agree (--set parallel.world_size=%d)", le->world_size, exp_path, p.world_size,
                le->world_size);
        return worker_fail(le, e);
    }
    /* the run directory's one writer is rank 0's: under this runner's launcher the
     * launcher locked it and passed the lock on (RUNNER_LOCK_FD); under torchrun or srun
     * rank 0 takes it here. Other ranks write only their own logs and never lock it (on
     * other hosts it is rank 0's directory, locked by rank 0's host). */
    char cmd[512];
    command_line(argc, argv, cmd, sizeof cmd);
    run_lock_t lock = {.fd = -1};
    if (run_dir) {
        snprintf(p.run_dir, sizeof p.run_dir, "%s", run_dir);
        p.resumes = resume_from && resume_from[0];
        snprintf(p.resume_from, sizeof p.resume_from, "%s", p.resumes ? resume_from : "");
        if (le->rank == 0 ? run_lock_take(run_dir, cmd, &lock, e) : (run_lock_adopt(run_dir, &lock), 0))
            return worker_fail(le, e);
    } else if (le->rank == 0) {
        if (claim_run_dir(c, &x, &p, &lock, cmd, e)) return worker_fail(le, e);
        print_plan_notes(&p);
    }
    train_env_t env = {0};
    env.rank = le->rank;
    env.world_size = le->world_size;
    env.local_rank = le->local_rank;
    env.local_world_size = le->local_world_size;
    snprintf(env.master_addr, sizeof env.master_addr, "%s", le->master_addr);
    env.master_port = le->master_port;
    env.run_dir = p.run_dir[0] && (run_dir || le->rank == 0) ? p.run_dir : NULL;
    env.config_text_path = exp_path;
    train_install_signal_handlers();
    int rc = train_run(&x, &p, &env, e);
    plan_free(&p);
    rc = rc < 0 ? worker_fail(le, e) : rc;
    run_lock_release(&lock);
    return rc;
}

/* After a DDP launch that failed: rank 0 normally writes summary.json on its way out, but
 * a rank 0 that was killed (kill -9, OOM killer) never does, and a run directory without
 * a summary reads as still running. Then the launcher writes a minimal one: the run's
 * identity, status "failed", the exit code and the launcher's message. Best effort. */
static void ensure_failed_summary(const experiment_t *x, const plan_t *p, int code, const err_t *e) {
    char path[CFG_PATH + 32];
    snprintf(path, sizeof path, "%s/summary.json", p->run_dir);
    if (access(path, F_OK) == 0) return;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return;
    jw_t w;
    jw_init(&w, f, true);
    jw_obj_begin(&w);
    jw_kstr(&w, "name", x->name);
    jw_kstr(&w, "status", "failed");
    jw_kint(&w, "exit_code", code);
    jw_kstr(&w, "error", e->msg);
    jw_kstr(&w, "mode", p->mode);
    jw_kint(&w, "world_size", p->world_size);
    jw_kstr(&w, "precision", p->precision);
    jw_kint(&w, "batch_size", p->global_batch);
    jw_kstr(&w, "device", p->device);
    jw_kstr(&w, "arch", x->model.arch);
    jw_kstr(&w, "dataset", x->data.dataset);
    jw_obj_end(&w);
    fputc('\n', f);
    fclose(f);
    err_t ignore = {0};
    write_file_atomic(path, buf, len, &ignore);
    free(buf);
}

/* `runner EXP`, `runner resume DIR`, `runner _member DIR`: plan, then train in this
 * process (single, dp) or launch one worker per rank (ddp). */
static int verb_run(cli_t *c, int argc, char **argv, err_t *e) {
    experiment_t x;
    const char *exp_path;
    char buf[CFG_PATH + 64];
    if (load_experiment(c, &x, &exp_path, buf, sizeof buf, e)) return fail(e);
    char cmd[512];
    command_line(argc, argv, cmd, sizeof cmd);
    /* held until this process exits; a directory named on the command line is locked
     * before anything about it is decided (the lock dies with the process) */
    run_lock_t lock = {.fd = -1};
    if ((!strcmp(c->verb, "resume") || !strcmp(c->verb, "_member")) && run_lock_take(c->positional[0], cmd, &lock, e))
        return fail(e);
    plan_request_t req = {0};
    if (!strcmp(c->verb, "resume")) req.resume_dir = c->positional[0];
    if (!strcmp(c->verb, "_member")) req.for_worker = true;
    plan_t p;
    /* the download comes before the run directory: a failed start leaves none behind */
    if (plan_build(&x, &req, &p, e) || fetch_data(&x, &p, e) || claim_run_dir(c, &x, &p, &lock, cmd, e))
        return fail(e);
    /* single and dp: the console also goes to logs/rank0.log, as rank 0's does in ddp */
    if (strcmp(p.mode, "ddp") && console_log_start(p.run_dir, e)) return fail(e);
    print_plan_notes(&p);
    printf("runner: %s %s\n", p.resumes ? "resuming" : "run directory", p.run_dir);
    fflush(stdout);
    if (!strcmp(p.mode, "ddp")) {
        launch_opts_t lo = {0};
        lo.nproc_per_node = p.local_world_size;
        lo.nnodes = p.nnodes;
        lo.node_rank = c->has_node_rank ? c->node_rank : 0;
        snprintf(lo.master_addr, sizeof lo.master_addr, "%s", x.parallel.master_addr);
        lo.master_port = x.parallel.master_port;
        lo.run_dir = p.run_dir;
        char env_dir[CFG_PATH + 32], env_res[CFG_PATH + 160], env_lock[64];
        snprintf(env_dir, sizeof env_dir, "RUNNER_RUN_DIR=%s", p.run_dir);
        snprintf(env_res, sizeof env_res, "RUNNER_RESUME_FROM=%s", p.resume_from);
        run_lock_env(&lock, env_lock, sizeof env_lock);   /* the ranks share the lock */
        const char *extra[] = {env_dir, env_res, env_lock, NULL};
        lo.extra_env = extra;
        lo.lock_fd = lock.fd;
        lo.max_restarts = x.parallel.max_restarts;
        lo.restart_resume = p.run_dir;   /* parallel.max_restarts: a restart resumes its newest checkpoint */
        lo.restart_checkpoint = rundir_resume_checkpoint;
        int code = launch_run(&lo, argv, e);
        if (code == ERR_PREEMPTED) fprintf(stderr, "runner: %s\n", e->msg);
        if (code != 0 && code != ERR_INTERRUPT && code != ERR_PREEMPTED) {
            ensure_failed_summary(&x, &p, code, e);
            plan_free(&p);
            return fail(e);
        }
        plan_free(&p);
        return code;
    }
    train_env_t env = {0};
    env.world_size = 1;
    env.local_world_size = 1;
    env.run_dir = p.run_dir;
    env.config_text_path = exp_path;
    train_install_signal_handlers();
    int rc = train_run(&x, &p, &env, e);
    plan_free(&p);
    return rc < 0 ? fail(e) : rc;
}

static int verb_plan(cli_t *c, err_t *e) {
    experiment_t x;
    const char *exp_path;
    char buf[CFG_PATH + 64];
    if (load_experiment(c, &x, &exp_path, buf, sizeof buf, e)) return fail(e);
    plan_t p;
    plan_request_t req = {.read_only = true};   /* the plan writes nothing, not even the image index */
    if (plan_build(&x, &req, &p, e)) return fail(e);
    plan_estimate(&x, &p);
    if (c->json) plan_write_json(&p, stdout);
    else plan_print(&p, &x, stdout);
    plan_free(&p);
    return 0;
}

/* compare: each member runs as `runner _member MEMBER_DIR` in a child process, so a
 * member that fails (or crashes) is recorded and the others still run.
 *
 * SIGINT and SIGTERM are blocked in the compare process and read from a signalfd while a
 * member runs. One sent to the compare process alone (kill -INT PID, a scheduler) is
 * passed on to the member, which saves its checkpoint and exits 130; the comparison is
 * then recorded as interrupted and ends with 130, and the same command resumes it. A
 * terminal's Ctrl-C reaches the member itself (same process group), so that one is not
 * passed on: a second copy would make the member exit at once without a checkpoint. */
typedef struct member_ctx {
    const char *exe;
    int sfd;                  /* signalfd for SIGINT/SIGTERM (blocked in this process) */
    sigset_t old_mask;        /* the mask to restore in the child */
    bool stopped;             /* a stop signal arrived: no further member starts */
} member_ctx_t;

/* Reads the pending stop signals; passes each one not sent by the terminal to child
 * (when > 0). */
static void member_signals(member_ctx_t *m, pid_t child) {
    struct signalfd_siginfo si;
    while (read(m->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        m->stopped = true;
        if (child > 0 && si.ssi_code != SI_KERNEL) kill(child, (int)si.ssi_signo);
    }
}

static int run_member(void *ctx, const experiment_t *x, const char *member_dir, err_t *e) {
    member_ctx_t *m = ctx;
    member_signals(m, 0);
    if (m->stopped)
        return err_set(e, ERR_INTERRUPT, "interrupted before it started; it runs when the comparison resumes"),
               ERR_INTERRUPT;
    if (mkdir_p(member_dir, ERR_INPUT, e)) return -1;
    char path[CFG_PATH + 64];
    snprintf(path, sizeof path, "%s/experiment.yaml", member_dir);
    size_t len = 0;
    char *buf = config_yaml_string(x, &len);
    if (!buf) return err_set(e, ERR_RUNTIME, "out of memory");
    int rc = write_file_atomic(path, buf, len, e);
    free(buf);
    if (rc) return -1;
    fflush(stdout);
    fflush(stderr);
    /* the child's stderr passes through a pipe, so its last line (its one error message)
     * can be recorded for the comparison report */
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) return err_errno(e, ERR_RUNTIME, "pipe");
    pid_t pid = fork();
    if (pid < 0) return err_errno(e, ERR_RUNTIME, "fork");
    if (pid == 0) {
        dup2(pfd[1], 2);
        sigprocmask(SIG_SETMASK, &m->old_mask, NULL);
        execl(m->exe, "runner", "_member", member_dir, (char *)NULL);
        fprintf(stderr, "runner: cannot start %s: %s\n", m->exe, strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    char last[1024] = "", line[1024], chunk[4096];
    size_t ll = 0;
    for (;;) {
        struct pollfd pf[2] = {{pfd[0], POLLIN, 0}, {m->sfd, POLLIN, 0}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR) break;
        if (pf[1].revents & POLLIN) member_signals(m, pid);
        if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t r = read(pfd[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        fwrite(chunk, 1, (size_t)r, stderr);
        for (ssize_t i = 0; i < r; i++) {
            if (chunk[i] == '\n') {
                line[ll] = '\0';
                if (ll) memcpy(last, line, ll + 1);
                ll = 0;
            } else if (ll + 1 < sizeof line) {
                line[ll++] = chunk[i];
            }
        }
    }
    close(pfd[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    member_signals(m, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code != 0 && last[0]) {
        const char *msg = strncmp(last, "runner: ", 8) ? last : last + 8;
        err_set(e, code == 2 ? ERR_INPUT : code == ERR_INTERRUPT ? ERR_INTERRUPT : ERR_RUNTIME, "%s", msg);
    }
    return code;
}

/* Before the first member starts: every member's dataset files are there, or are
 * downloaded now, once per dataset and root. Missing files or an offline machine give one
 * message and exit 2 here instead of the same failure, with its download retries, in
 * every member and a report of empty charts. */
static int compare_check_data(const experiment_matrix_t *m, err_t *e) {
    plan_t *p = malloc(sizeof *p);
    if (!p) return err_set(e, ERR_RUNTIME, "out of memory");
    int rc = 0;
    for (int i = 0; i < m->n && rc == 0; i++) {
        const experiment_t *x = &m->runs[i];
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(m->runs[j].data.dataset, x->data.dataset) && !strcmp(m->runs[j].data.root, x->data.root);
        memset(p, 0, sizeof *p);
        if (!seen && (plan_data_files(x, p->data_root, sizeof p->data_root, &p->data_present, &p->will_download, e) ||
                      fetch_data(x, p, e)))
            rc = err_wrap(e, "compare: no member was started: the data of matrix entry '%s'%s is not there",
                          m->entry_names[i], m->n > 1 ? " (and of every entry with the same data)" : "");
    }
    free(p);
    return rc;
}

static int verb_compare(cli_t *c, err_t *e) {
    if (c->n_positional != 1) return err_set(e, ERR_INPUT, "compare takes one matrix file"), fail(e);
    experiment_matrix_t *m = config_load_matrix(c->positional[0], c->sets, c->n_sets, e);
    if (!m) return fail(e);
    if (compare_check_data(m, e)) { free(m); return fail(e); }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) { free(m); err_errno(e, ERR_RUNTIME, "/proc/self/exe"); return fail(e); }
    exe[n] = '\0';
    member_ctx_t ctx = {.exe = exe};
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, &ctx.old_mask);
    ctx.sfd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
    if (ctx.sfd < 0) { free(m); err_errno(e, ERR_RUNTIME, "signalfd"); return fail(e); }
    char parent[CFG_PATH];
    int rc = compare_main(m, run_member, &ctx, stdout, parent, sizeof parent, e);
    close(ctx.sfd);
    free(m);
    if (rc < 0) return fail(e);
    return rc;
}

static int verb_report(cli_t *c, err_t *e) {
    if (c->n_positional < 1) return err_set(e, ERR_INPUT, "report needs at least one run directory"), fail(e);
    if (report_runs(c->positional, c->n_positional, c->output, stdout, e)) return fail(e);
    return 0;
}

static int verb_check(cli_t *c, err_t *e) {
    if (c->n_positional != 1 || !c->baseline)
        return err_set(e, ERR_INPUT, "usage: runner check RUN_DIR --baseline FILE"), fail(e);
    int rc = check_run(c->positional[0], c->baseline, stdout, e);
    if (rc == 2 || (rc != 0 && rc != 1)) return fail(e);
    return rc;
}

static int verb_export(cli_t *c, err_t *e) {
    if (c->n_positional != 1)
        return err_set(e, ERR_INPUT, "usage: runner export RUN_DIR [--format safetensors] [--output FILE]"), fail(e);
    if (c->format && strcmp(c->format, "safetensors"))
        return err_set(e, ERR_INPUT, "--format %s: only safetensors is supported", c->format), fail(e);
    char out[CFG_PATH + 64];
    export_info_t info;
    if (export_run(c->positional[0], c->checkpoint, c->output, c->ema, out, sizeof out, &info, e)) return fail(e);
    printf("runner: wrote %s\n", out);
    export_print_usage(&info, out, stdout);
    return 0;
}

/* The CPU backend parallelises with its own thread pool, and oneDNN runs an OpenMP team
 * next to it. libgomp's default (active) wait policy makes that team spin between
 * primitives, fighting the pool's threads for the cores: on a busy 2-core host one
 * process with 2 threads ran 5-30x slower than with OMP_WAIT_POLICY=passive
 * (bench/results/ddp.md). libgomp reads the variable once, when it is loaded, so setting
 * it here means running the program again: when OMP_WAIT_POLICY is unset, set it to
 * passive and re-execute this binary with the same arguments (same pid; nothing has
 * happened yet). A user's own setting is kept; if re-executing fails the run goes on. */
static void prefer_passive_omp(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
}

int main(int argc, char **argv) {
    prefer_passive_omp(argv);
    /* ps and top show the executable's name, which the re-execution through
     * /proc/self/exe (and the launcher's) would make "exe" */
    prctl(PR_SET_NAME, "runner", 0, 0, 0);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        printf("runner %s (%s)\n", runner_version(), runner_commit());
        return 0;
    }
    err_t e = {0};
    cli_t c;
    if (parse_cli(argc, argv, &c, &e)) return fail(&e);
    char storage[4][300];
    cli_parallel_sets(&c, storage);
    const char *v = c.verb;
    if (!strcmp(v, "plan")) return verb_plan(&c, &e);
    if (!strcmp(v, "compare")) return verb_compare(&c, &e);
    if (!strcmp(v, "report")) return verb_report(&c, &e);
    if (!strcmp(v, "check")) return verb_check(&c, &e);
    if (!strcmp(v, "export")) return verb_export(&c, &e);
    launch_env_t le;
    int w = launch_worker_env(&le, &e);
    if (w < 0) return fail(&e);
    if (w == 1) return run_worker(&c, &le, argc, argv, &e);
    return verb_run(&c, argc, argv, &e);
}
