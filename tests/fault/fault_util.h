/* fault_util.h: what the fault tests share: a tiny experiment, starting the runner in a
 * session of its own (so every process of a run, DDP ranks included, can be found and
 * killed), killing a whole session, and checking a run directory's checkpoints and CSVs.
 * Builds on tests/dist/dist_util.h. */
#ifndef RUNNER_TESTS_FAULT_UTIL_H
#define RUNNER_TESTS_FAULT_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/dist/dist_util.h"

/* resnet20 on 8x8 synthetic images, 4 steps per epoch (train_size / batch_size), a
 * checkpoint every 3 steps (checkpoint.every_steps: step_<N>.ckpt, written by the
 * background writer, mid-epoch too) and every epoch: "checkpoints every few steps".
 * %s: name, %d: epochs, %s: mode line ("single, world_size: 1" or "ddp, world_size: 2"). */
static const char *fault_yaml =
    "name: %s\n"
    "seed: 5\n"
    "device: cpu\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 64, val_size: 16, image: [3, 8, 8], classes: 4}\n"
    "  workers: 1\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.02, momentum: 0.9, weight_decay: 5.0e-4}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: %d, batch_size: 16}\n"
    "parallel: {mode: %s}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, every_steps: 3, keep_last: 2, resume: auto}\n";

static inline void fault_write_exp(char *path, size_t len, const char *dir, const char *name, int epochs,
                                   const char *mode) {
    char text[2048];
    snprintf(text, sizeof text, fault_yaml, name, epochs, mode);
    snprintf(path, len, "%s/%s.yaml", dir, name);
    test_write_file(path, text);
}

/* Starts `runner ARGV...` (NULL-terminated, argv[0] not included) as the leader of a new
 * session, output to log, with the "KEY=VALUE" strings of env (NULL-terminated or NULL)
 * added to its environment. Returns its pid (= the session id). */
static inline pid_t fault_spawn(const char *const *args, const char *const *env, const char *log) {
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
        const char *argv[32] = {"runner"};
        int n = 1;
        for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
        argv[n] = NULL;
        execv(test_runner_exe(), (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Reaps every child (and orphan: the test is a subreaper) that has exited. */
static inline void fault_reap(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
}

/* SIGKILL to every process of session sid until none is left (2 s at most). Returns how
 * many processes it killed the first time. */
static inline int fault_kill_session(pid_t sid) {
    pid_t pids[256];
    int first = -1;
    for (int round = 0; round < 200; round++) {
        int n = dist_procs_of(sid, true, pids, 256);
        if (first < 0) first = n;
        if (n == 0) break;
        for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
        usleep(10000);   /* killed processes turn into zombies (skipped above); not reaped
                            here, so the caller still gets its child's status */
    }
    return first;
}

/* Waits for pid (a child) and returns its exit code, 128 + signal when killed. */
static inline int fault_wait(pid_t pid) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Every *.ckpt in run_dir/checkpoints reads and verifies (ckpt_read). Returns the number
 * of checkpoints, -1 if one does not (its error printed). */
static inline int fault_checkpoints_loadable(const char *run_dir) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, bad = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 5, ".ckpt")) continue;
        char p[4500];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        err_t e = {0};
        ckpt_t *c = ckpt_read(p, &e);
        if (!c) { fprintf(stderr, "not loadable: %s\n", e.msg); bad++; }
        ckpt_free(c);
        n++;
    }
    closedir(d);
    return bad ? -1 : n;
}

/* Number of entries of dir, hidden ones aside (0 when it cannot be read). */
static inline int fault_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) n += de->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

/* Number of files in run_dir/checkpoints whose name contains s. */
static inline int fault_count_files(const char *run_dir, const char *s) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) n += strstr(de->d_name, s) != NULL;
    if (d) closedir(d);
    return n;
}

/* 1 when section name of a/checkpoints/last.ckpt and b/checkpoints/last.ckpt have the
 * same bytes. */
static inline int fault_same_section(const char *a, const char *b, const char *name) {
    char pa[4200], pb[4200];
    snprintf(pa, sizeof pa, "%s/checkpoints/last.ckpt", a);
    snprintf(pb, sizeof pb, "%s/checkpoints/last.ckpt", b);
    size_t na = 0, nb = 0;
    void *x = ckpt_section_copy(pa, name, &na), *y = ckpt_section_copy(pb, name, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* The first ncols cells of every line of a CSV (the columns that do not hold timings),
 * joined: two runs that computed the same thing give equal strings. Caller frees. */
static inline char *fault_csv_cols(const char *path, int ncols) {
    size_t n = 0;
    char *s = test_read_file(path, &n);
    if (!s) return NULL;
    char *out = malloc(n + 1), *o = out;
    int col = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') { *o++ = '\n'; col = 0; continue; }
        if (s[i] == ',') col++;
        if (col < ncols) *o++ = s[i];
    }
    *o = 0;
    free(s);
    return out;
}

/* 1 when the run's summary.json says completed. */
static inline int fault_completed(const char *run_dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/summary.json", run_dir);
    char *s = test_read_file(p, NULL);
    int done = s && strstr(s, "\"status\": \"completed\"");
    free(s);
    return done;
}

/* The completed run directory under root/name (NULL if none). */
static inline const char *fault_completed_run(const char *root, const char *name) {
    static char out[4200];
    char parent[4200];
    snprintf(parent, sizeof parent, "%s/%s", root, name);
    DIR *d = opendir(parent);
    const char *found = NULL;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(out, sizeof out, "%s/%s", parent, de->d_name);
        if (fault_completed(out)) { found = out; break; }
    }
    if (d) closedir(d);
    return found;
}

/* Every run directory under root/name has only loadable checkpoints: their count, or -1. */
static inline int fault_all_checkpoints_loadable(const char *root, const char *name) {
    char parent[4200];
    snprintf(parent, sizeof parent, "%s/%s", root, name);
    DIR *d = opendir(parent);
    int total = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char run[4500];
        snprintf(run, sizeof run, "%s/%s", parent, de->d_name);
        int n = fault_checkpoints_loadable(run);
        if (n < 0) total = -1;
        else if (total >= 0) total += n;
    }
    if (d) closedir(d);
    return total;
}

/* The finished run in run computed what the reference run in ref did: the same weights,
 * BN buffers and momentum bit for bit, and the same metrics.csv / steps.csv rows apart
 * from their timing columns. Reports each difference through CHECK. */
static inline void fault_check_same_run(const char *ref, const char *run) {
    CHECK(fault_same_section(ref, run, "params"));
    CHECK(fault_same_section(ref, run, "buffers"));
    CHECK(fault_same_section(ref, run, "optim.momentum_buffer"));
    static const struct { const char *file; int cols; } csv[] = {{"metrics.csv", 8}, {"steps.csv", 5}};
    for (int i = 0; i < 2; i++) {
        char a[4400], b[4400];
        snprintf(a, sizeof a, "%s/%s", ref, csv[i].file);
        snprintf(b, sizeof b, "%s/%s", run, csv[i].file);
        char *ca = fault_csv_cols(a, csv[i].cols), *cb = fault_csv_cols(b, csv[i].cols);
        CHECK(ca && cb && !strcmp(ca, cb));
        free(ca);
        free(cb);
    }
}

#endif
