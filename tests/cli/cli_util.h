/* cli_util.h: helpers shared by the end-to-end tests (run the binary, write tiny
 * experiments, read checkpoint sections, compare two runs). Not a library: static inline
 * functions, included by each test; the check helpers use tests/test.h's CHECKs. */
#ifndef RUNNER_TESTS_CLI_UTIL_H
#define RUNNER_TESTS_CLI_UTIL_H

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner/checkpoint.h"
#include "tests/test.h"
#include "util/json.h"

/* Runs `runner ARGS` (shell syntax) with output captured; returns the exit status. */
static inline int run_runner(const char *args, char *out, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s", test_runner_exe(), args);
    return test_run_cmd(cmd, out, cap);
}

/* A number of a JSON object held in text[0..n) (which this frees), NAN when the text is
 * missing or not JSON, or the key is missing or not a number. */
static inline double cli_json_number_of(char *text, size_t n, const char *key) {
    if (!text) return NAN;
    err_t e = {0};
    json_t *j = json_parse(text, n, &e);
    free(text);
    if (!j) return NAN;
    const json_t *v = json_get(j, key);
    double x = v && v->type == JSON_NUMBER ? v->number : NAN;
    json_free(j);
    return x;
}

/* A number from DIR/FILE (a JSON object: summary.json, plan.json), NAN when missing. */
static inline double cli_json_number(const char *dir, const char *file, const char *key) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    size_t n = 0;
    char *s = test_read_file(p, &n);
    return cli_json_number_of(s, n, key);
}

/* The single run directory under root/name (NULL if none or several). */
static inline char *only_run_dir(const char *root, const char *name) {
    static char path[4096];
    char cmd[4200], out[4096];
    snprintf(cmd, sizeof cmd, "ls -d %s/%s/*/ 2>/dev/null", root, name);
    if (test_run_cmd(cmd, out, sizeof out) != 0) return NULL;
    char *nl = strchr(out, '\n');
    if (!nl || strchr(nl + 1, '/')) return NULL;
    *nl = '\0';
    if (nl > out && nl[-1] == '/') nl[-1] = '\0';
    snprintf(path, sizeof path, "%s", out);
    return path;
}

/* Runs `runner EXP --set output.root=ROOT SETS` to the end, output in out; returns its run
 * directory root/<EXP's file name without .yaml> (a static buffer per call slot, 0..7), or
 * NULL on failure (the output is printed then). */
static inline const char *cli_run(const char *exp, const char *root, const char *sets, int slot, char *out,
                                  size_t cap) {
    static char dirs[8][4096];
    char args[4096];
    snprintf(args, sizeof args, "%s --set output.root=%s %s", exp, root, sets ? sets : "");
    int rc = run_runner(args, out, cap);
    if (rc != 0) {
        fprintf(stderr, "runner %s exited %d:\n%s\n", args, rc, out);
        return NULL;
    }
    const char *base = strrchr(exp, '/') ? strrchr(exp, '/') + 1 : exp;
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(base) - 5), base);   /* minus ".yaml" */
    const char *d = only_run_dir(root, name);
    if (!d) { fprintf(stderr, "no single run directory under %s/%s\n", root, name); return NULL; }
    snprintf(dirs[slot], sizeof dirs[slot], "%s", d);
    return dirs[slot];
}

/* Reads a checkpoint section into a malloc'd buffer. */
static inline void *ckpt_section_copy(const char *path, const char *name, size_t *size) {
    err_t e = {0};
    ckpt_t *c = ckpt_read(path, &e);
    if (!c) { fprintf(stderr, "%s\n", e.msg); return NULL; }
    const ckpt_section_t *s = ckpt_find(c, name);
    void *b = NULL;
    if (s) {
        b = malloc(s->size ? s->size : 1);
        memcpy(b, s->data, s->size);
        *size = s->size;
    }
    ckpt_free(c);
    return b;
}

/* A number from the meta JSON of DIR/checkpoints/last.ckpt (NAN when missing). */
static inline double cli_meta_number(const char *dir, const char *key) {
    char p[4400];
    snprintf(p, sizeof p, "%s/checkpoints/last.ckpt", dir);
    size_t n = 0;
    char *m = ckpt_section_copy(p, "meta", &n);
    return cli_json_number_of(m, n, key);
}

/* The bn_counters array of DIR's last.ckpt meta as text ("" when missing). */
static inline void cli_bn_counters(const char *dir, char *buf, size_t len) {
    size_t n = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/checkpoints/last.ckpt", dir);
    char *meta = ckpt_section_copy(path, "meta", &n);
    buf[0] = '\0';
    if (!meta) return;
    char *m = realloc(meta, n + 1);
    if (!m) {
        free(meta);
        return;
    }
    m[n] = '\0';
    const char *p = strstr(m, "\"bn_counters\"");
    const char *q = p ? strchr(p, ']') : NULL;
    if (p && q) snprintf(buf, len, "%.*s", (int)(q - p + 1), p);
    free(m);
}

/* Two runs' last.ckpt agree on the step counters and the loss scaler (meta optim_steps,
 * loss_scale, growth_tracker, step; a difference is printed) and on the BN counters,
 * which must be there (CHECKs). */
static inline void cli_same_meta_counters(const char *a, const char *b) {
    const char *meta[] = {"optim_steps", "loss_scale", "growth_tracker", "step"};
    for (int i = 0; i < 4; i++) {
        double x = cli_meta_number(a, meta[i]), y = cli_meta_number(b, meta[i]);
        if (x != y) fprintf(stderr, "  meta %s: %.9g vs %.9g\n", meta[i], x, y);
        CHECK(x == y);
    }
    char ca[4096], cb[4096];
    cli_bn_counters(a, ca, sizeof ca);
    cli_bn_counters(b, cb, sizeof cb);
    CHECK(ca[0] != '\0');
    CHECK_STR(ca, cb);
}

/* Starts `runner EXP --set output.root=ROOT [--set SETS[i]]...` (at most 8) in the
 * background, stdout and stderr appended to log; returns its pid. */
static inline pid_t cli_spawn(const char *exp, const char *root, const char *log, const char *const *sets, int n) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char set_root[4200];
        snprintf(set_root, sizeof set_root, "output.root=%s", root);
        const char *argv[24] = {"runner", exp, "--set", set_root};
        int k = 4;
        for (int i = 0; i < n && i < 8; i++) { argv[k++] = "--set"; argv[k++] = sets[i]; }
        argv[k] = NULL;
        execv(test_runner_exe(), (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Waits for a child; its exit code, or 128 + the signal that ended it. */
static inline int cli_wait(pid_t pid) {
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The single run directory root/name once its steps.csv has at least `steps` rows (a
 * static buffer), NULL after 300 s. */
static inline const char *cli_wait_steps(const char *root, const char *name, int steps) {
    static char dir[4096];
    char path[4300];
    for (int i = 0; i < 30000; i++) {
        const char *d = only_run_dir(root, name);
        if (d) {
            snprintf(path, sizeof path, "%s/steps.csv", d);
            if (test_count_lines(path) >= steps + 1) {
                snprintf(dir, sizeof dir, "%s", d);
                return dir;
            }
        }
        usleep(10000);
    }
    return NULL;
}

/* Starts the run as cli_spawn does, sends it sig once its run directory root/name has
 * `steps` rows in steps.csv (or after 300 s without), and waits for it. Returns its exit
 * code; the run directory goes to dir when not NULL ("" if it never got that far). */
static inline int cli_interrupt_at(const char *exp, const char *root, const char *log, const char *name,
                                   const char *const *sets, int n, int steps, int sig, char *dir, size_t len) {
    pid_t pid = cli_spawn(exp, root, log, sets, n);
    const char *d = cli_wait_steps(root, name, steps);
    if (dir) snprintf(dir, len, "%s", d ? d : "");
    kill(pid, sig);
    return cli_wait(pid);
}

/* Checks that sections names[0..n) of DIR_A/checkpoints/last.ckpt and DIR_B's are there
 * and equal byte for byte (a differing one is named on stderr). */
static inline void cli_check_same_sections(const char *dir_a, const char *dir_b, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        char pa[4400], pb[4400];
        size_t na = 0, nb = 0;
        snprintf(pa, sizeof pa, "%s/checkpoints/last.ckpt", dir_a);
        snprintf(pb, sizeof pb, "%s/checkpoints/last.ckpt", dir_b);
        void *x = ckpt_section_copy(pa, names[i], &na), *y = ckpt_section_copy(pb, names[i], &nb);
        CHECK(x && y);
        CHECK_INT(na, nb);
        if (x && y && na == nb && memcmp(x, y, na)) {
            fprintf(stderr, "section %s differs\n", names[i]);
            CHECK(0);
        }
        free(x);
        free(y);
    }
}

/* Checks that FILE (a CSV) is in both run dirs with as many lines, and the same text in
 * columns cols[0..ncols) of every line, the header included (a missing cell differs). */
static inline void cli_check_same_csv(const char *dir_a, const char *dir_b, const char *file, const int *cols,
                                      int ncols) {
    char pa[4400], pb[4400];
    snprintf(pa, sizeof pa, "%s/%s", dir_a, file);
    snprintf(pb, sizeof pb, "%s/%s", dir_b, file);
    char *x = test_read_file(pa, NULL), *y = test_read_file(pb, NULL);
    CHECK(x && y);
    if (!x || !y) { free(x); free(y); return; }
    CHECK_INT(test_count_lines(pa), test_count_lines(pb));
    char *sx, *sy, *lx = strtok_r(x, "\n", &sx), *ly = strtok_r(y, "\n", &sy);
    int row = 0, bad = 0;
    while (lx && ly) {
        for (int k = 0; k < ncols; k++) {
            /* the cols[k]-th cell of each line */
            const char *cx = lx, *cy = ly;
            for (int c = 0; c < cols[k] && cx && cy; c++) {
                cx = strchr(cx, ',');
                cy = strchr(cy, ',');
                if (cx) cx++;
                if (cy) cy++;
            }
            size_t nx = cx ? strcspn(cx, ",") : 0, ny = cy ? strcspn(cy, ",") : 0;
            if (!cx || !cy || nx != ny || strncmp(cx, cy, nx)) {
                if (!bad++) fprintf(stderr, "%s row %d column %d: '%.*s' vs '%.*s'\n", file, row, cols[k],
                                    (int)nx, cx ? cx : "", (int)ny, cy ? cy : "");
            }
        }
        lx = strtok_r(NULL, "\n", &sx);
        ly = strtok_r(NULL, "\n", &sy);
        row++;
    }
    CHECK_INT(bad, 0);
    free(x);
    free(y);
}

/* Checks the training columns of two runs with train.ema on: steps.csv up to top1 and
 * grad_norm, metrics.csv's validation columns and their _ema twins (not the timings). */
static inline void cli_check_same_ema_csvs(const char *dir_a, const char *dir_b) {
    static const int step_cols[] = {0, 1, 2, 3, 4, 11};                   /* ..., top1, grad_norm */
    static const int metric_cols[] = {0, 1, 2, 3, 4, 5, 6, 7, 11, 12, 13}; /* val and val_*_ema */
    cli_check_same_csv(dir_a, dir_b, "steps.csv", step_cols, 6);
    cli_check_same_csv(dir_a, dir_b, "metrics.csv", metric_cols, 11);
}

#endif
