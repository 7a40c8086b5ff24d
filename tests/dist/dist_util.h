/* dist_util.h: helpers shared by the distributed-training end-to-end tests (tests/dist):
 * a tiny synthetic experiment, running the binary, reading run-directory files, and
 * comparing two runs' checkpoint sections (within a tolerance) and CSV cells, the children
 * of a launcher and their environment. Builds on tests/cli/cli_util.h. */
#ifndef RUNNER_TESTS_DIST_UTIL_H
#define RUNNER_TESTS_DIST_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/json.h"
#include "tests/cli/cli_util.h"

/* The experiment every dist test starts from: resnet20 on 8x8 synthetic images, 40
 * training samples (divisible by the global batch 8 and by 2 ranks, so no rank is
 * padded), SGD with momentum and weight decay at a constant LR of 0.01 (at 0.05 this tiny
 * problem is ill-conditioned enough that 1e-7 differences in the weights grow to 1e-3 in
 * ten steps), one CSV row per step.
 * Tests vary it with --set. */
static const char *dist_base_yaml =
    "name: %s\n"
    "seed: 7\n"
    "device: cpu\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 40, val_size: 12, image: [3, 8, 8], classes: 4}\n"
    "  workers: 1\n"
    "  shuffle: %s\n"
    "  augment: %s\n"
    "model: {arch: resnet20}\n"
    "optimizer: {name: sgd, lr: 0.01, momentum: 0.9, weight_decay: 5.0e-4}\n"
    "schedule: {name: constant, warmup_epochs: 0}\n"
    "train: {epochs: %d, batch_size: 8}\n"
    "parallel: {mode: ddp, world_size: 2}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 1, resume: never}\n";

/* Writes dir/name.yaml from dist_base_yaml; augment is a YAML flow value. */
static inline void dist_write_exp(char *path, size_t len, const char *dir, const char *name, bool shuffle,
                                  const char *augment, int epochs) {
    char text[2048];
    snprintf(text, sizeof text, dist_base_yaml, name, shuffle ? "true" : "false", augment, epochs);
    snprintf(path, len, "%s/%s.yaml", dir, name);
    test_write_file(path, text);
}

/* cli_run with the output in a buffer of its own (printed when the run fails). */
static inline const char *dist_run(const char *exp, const char *root, const char *sets, int slot) {
    static char out[1 << 16];
    return cli_run(exp, root, sets, slot, out, sizeof out);
}

/* Compares section `name` of DIR_A/checkpoints/last.ckpt and DIR_B's as fp32 arrays:
 * returns how many elements are outside |a - b| <= atol + rtol * |b| (-1 if a section is
 * missing or the sizes differ), stores the largest |a - b| in *max_abs and, when rel_l2 is
 * not NULL, ||a - b|| / ||b|| (2-norms over the whole section) in *rel_l2. */
static inline long dist_compare_section2(const char *dir_a, const char *dir_b, const char *name, double atol,
                                         double rtol, double *max_abs, double *rel_l2) {
    char pa[4200], pb[4200];
    snprintf(pa, sizeof pa, "%s/checkpoints/last.ckpt", dir_a);
    snprintf(pb, sizeof pb, "%s/checkpoints/last.ckpt", dir_b);
    size_t na = 0, nb = 0;
    float *a = ckpt_section_copy(pa, name, &na), *b = ckpt_section_copy(pb, name, &nb);
    long bad = -1;
    *max_abs = INFINITY;
    if (rel_l2) *rel_l2 = INFINITY;
    if (a && b && na == nb && na > 0) {
        bad = 0;
        double worst = 0, dd = 0, bb = 0;
        size_t wi = 0;
        for (size_t i = 0; i < na / sizeof(float); i++) {
            double d = fabs((double)a[i] - (double)b[i]);
            if (d > worst) { worst = d; wi = i; }
            if (!(d <= atol + rtol * fabs((double)b[i]))) bad++;
            dd += d * d;
            bb += (double)b[i] * b[i];
        }
        *max_abs = worst;
        if (rel_l2) *rel_l2 = bb > 0 ? sqrt(dd / bb) : sqrt(dd);
        fprintf(stderr, "  %s: %zu values, max |diff| %.3g (at %zu: %.9g vs %.9g), %ld outside %g + %g*|b|, "
                "||a-b||/||b|| %.3g\n", name, na / sizeof(float), worst, wi, a[wi], b[wi], bad, atol, rtol,
                bb > 0 ? sqrt(dd / bb) : sqrt(dd));
    }
    free(a);
    free(b);
    return bad;
}

static inline long dist_compare_section(const char *dir_a, const char *dir_b, const char *name, double atol,
                                        double rtol, double *max_abs) {
    return dist_compare_section2(dir_a, dir_b, name, atol, rtol, max_abs, NULL);
}

/* Checks that sections names[0..n) of DIR's last.ckpt equal REF's, element for element
 * with no tolerance (none outside |a - b| <= 0, the largest |a - b| 0). */
static inline void dist_check_same_sections(const char *dir, const char *ref, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        double m;
        CHECK_INT(dist_compare_section(dir, ref, names[i], 0, 0, &m), 0);
        CHECK(m == 0);
    }
}

/* Cell `col` (0-based) of line `row` (0 = header) of a CSV file, copied into buf. */
static inline const char *dist_csv_cell(const char *path, int row, int col, char *buf, size_t len) {
    buf[0] = '\0';
    char *s = test_read_file(path, NULL);
    if (!s) return NULL;
    char *line = s;
    for (int r = 0; r < row && line; r++) {
        line = strchr(line, '\n');
        if (line) line++;
    }
    const char *res = NULL;
    if (line && *line) {
        char *c = line;
        for (int k = 0; k < col && c; k++) {
            c = strpbrk(c, ",\n");
            if (c && *c == ',') c++;
            else c = NULL;
        }
        if (c) {
            size_t l = strcspn(c, ",\n");
            snprintf(buf, len, "%.*s", (int)l, c);
            res = buf;
        }
    }
    free(s);
    return res;
}

/* Checks that the cells of FILE in rows row0..row1 (0 = the header) and columns
 * col0..col1 are there and the same text in both run dirs. */
static inline void dist_check_same_cells(const char *dir_a, const char *dir_b, const char *file, int row0, int row1,
                                         int col0, int col1) {
    char a[4300], b[4300], ca[64], cb[64];
    snprintf(a, sizeof a, "%s/%s", dir_a, file);
    snprintf(b, sizeof b, "%s/%s", dir_b, file);
    for (int row = row0; row <= row1; row++)
        for (int col = col0; col <= col1; col++)
            CHECK_STR(dist_csv_cell(a, row, col, ca, sizeof ca), dist_csv_cell(b, row, col, cb, sizeof cb));
}

static inline int dist_count_lines(const char *path) { return test_count_lines(path); }

/* A free TCP port on 127.0.0.1 for MASTER_PORT; -1 on failure. The port stays held by a
 * socket bound with SO_REUSEADDR that never listens, open until this test process exits:
 * no other test running in parallel can be given it, while the runner's store server
 * (SO_REUSEADDR too) binds and listens on it. (Bound and closed at once, it could be
 * handed to another test's listener before the runner started.) */
static inline int dist_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    int ok = fd >= 0 && !setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) &&
             !bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &l);
    if (fd >= 0 && !ok) close(fd);
    return ok ? ntohs(a.sin_port) : -1;
}

static inline double dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads state, parent and session of pid from /proc/PID/stat. 0, or -1 when it is gone. */
static inline int dist_proc_stat(pid_t pid, char *state, pid_t *ppid, pid_t *sid) {
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t k = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[k] = '\0';
    char *rp = strrchr(stat, ')');   /* comm may contain spaces */
    int pp, pg, ss;
    if (!rp || sscanf(rp + 1, " %c %d %d %d", state, &pp, &pg, &ss) != 4) return -1;
    *ppid = pp;
    *sid = ss;
    return 0;
}

/* The live (not zombie) processes whose parent (by_session: session) is id, at most max. */
static inline int dist_procs_of(pid_t id, bool by_session, pid_t *out, int max) {
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        char state;
        pid_t pp, sid;
        if (*end || pid <= 0 || dist_proc_stat((pid_t)pid, &state, &pp, &sid)) continue;
        if ((by_session ? sid : pp) == id && state != 'Z') out[n++] = (pid_t)pid;
    }
    if (d) closedir(d);
    return n;
}

/* The live (not zombie) children of ppid, at most max. */
static inline int dist_children_of(pid_t ppid, pid_t *out, int max) {
    return dist_procs_of(ppid, false, out, max);
}

/* Reads /proc/PID/environ and returns the value of var in buf ("" if absent). */
static inline const char *dist_proc_env(pid_t pid, const char *var, char *buf, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    buf[0] = '\0';
    static char s[1 << 16];   /* /proc files have no size: read until EOF */
    int fd = open(path, O_RDONLY);
    if (fd < 0) return buf;
    size_t n = 0;
    ssize_t r;
    while (n < sizeof s - 1 && (r = read(fd, s + n, sizeof s - 1 - n)) > 0) n += (size_t)r;
    close(fd);
    s[n] = '\0';
    size_t vl = strlen(var);
    for (size_t i = 0; i < n; i += strlen(s + i) + 1)
        if (!strncmp(s + i, var, vl) && s[i + vl] == '=') {
            snprintf(buf, len, "%s", s + i + vl + 1);
            break;
        }
    return buf;
}

/* The state letter of a process from /proc/PID/stat ('?' when gone). */
static inline char dist_proc_state(pid_t pid) {
    char state = '?';
    pid_t pp, sid;
    return dist_proc_stat(pid, &state, &pp, &sid) ? '?' : state;
}

/* Processes other than this one whose environment has RUNNER_RUN_DIR=dir (each printed);
 * zombies (exited, not yet reaped) count only when count_zombies. */
static inline int dist_processes_of_run(const char *dir, bool count_zombies) {
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *de;
    char v[4096];
    while (d && (de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid()) continue;
        if (strcmp(dist_proc_env((pid_t)pid, "RUNNER_RUN_DIR", v, sizeof v), dir)) continue;
        char st = dist_proc_state((pid_t)pid);
        if (st == 'Z' && !count_zombies) continue;
        fprintf(stderr, "left behind: pid %ld (state %c)\n", pid, st);
        n++;
    }
    if (d) closedir(d);
    return n;
}

#endif
