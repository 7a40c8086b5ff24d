/* gpu_cli_util.h: helpers for the end-to-end GPU tests (tests/gpu/test_gpu_cli_*.c), which
 * drive the runner binary with `device: cuda` experiments: skip without a GPU, write an
 * experiment, run it, read steps.csv columns by name, checkpoint sections and the meta
 * JSON, spawn a run in the background, find its rank processes, clean up after them.
 * Builds on tests/dist/dist_util.h (which builds on tests/cli/cli_util.h).
 *
 * Skipping: gc_setup() exits 77 when backend_cuda_device_count() is 0.
 * Dry run: RUNNER_GPU_CLI_DRYRUN=cpu runs the same tests with `device: cpu` (gc_dev) and
 * the shm communicator in place of NCCL, so the logic of a test (file names, columns,
 * the interrupt, the checks) can be exercised on a machine without a GPU. Checks that only
 * mean something on a GPU (plan messages about GPU counts, NCCL) are skipped then, and
 * GPU-vs-CPU comparisons compare the CPU with itself.
 *
 * Not a library: static functions, included by each test.
 */
#ifndef RUNNER_TESTS_GPU_CLI_UTIL_H
#define RUNNER_TESTS_GPU_CLI_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/backend.h"
#include "model/net.h"
#include "model/arch/resnet.h"
#include "tests/dist/dist_util.h"

static const char *gc_dev = "cuda";    /* the device the tests put on the GPU side */
static const char *gc_nccl = "nccl";   /* the communicator of a GPU DDP run */
static bool gc_dry = false;            /* RUNNER_GPU_CLI_DRYRUN=cpu */
static int gc_gpus = 0;                /* visible CUDA devices */
static char gc_tmp[512];               /* this test's scratch directory */
static char gc_out[1 << 16];           /* output of the last gc_runner */

/* Skips (77) without a GPU, unless the dry run is asked for; makes gc_tmp. */
static inline void gc_setup(void) {
    const char *d = getenv("RUNNER_GPU_CLI_DRYRUN");
    gc_gpus = backend_cuda_device_count();
    if (d && !strcmp(d, "cpu")) {
        gc_dry = true;
        gc_dev = "cpu";
        gc_nccl = "shm";
        fprintf(stderr, "RUNNER_GPU_CLI_DRYRUN=cpu: device cpu and shm instead of cuda and nccl\n");
    } else if (gc_gpus <= 0) {
        test_skip("no CUDA GPU visible (backend_cuda_device_count() is 0)");
    }
    if (test_tmpdir(gc_tmp, sizeof gc_tmp)) {
        fprintf(stderr, "cannot create a scratch directory\n");
        exit(1);
    }
}

/* Removes gc_tmp when every case passed (kept for inspection otherwise). */
static inline int gc_finish(void) {
    int rc = test_main_end();
    if (rc == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf %s", gc_tmp);
        test_run_cmd(cmd, NULL, 0);
    } else {
        fprintf(stderr, "run directories kept under %s\n", gc_tmp);
    }
    return rc;
}

/* Writes gc_tmp/NAME.yaml with the printf-formatted text; path gets its path. */
static inline void gc_write_exp(char *path, size_t len, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void gc_write_exp(char *path, size_t len, const char *name, const char *fmt, ...) {
    char text[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    snprintf(path, len, "%s/%s.yaml", gc_tmp, name);
    if (test_write_file(path, text)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* Runs `runner ARGS` (printf format, shell syntax); output in gc_out; returns the status. */
static inline int gc_runner(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int gc_runner(const char *fmt, ...) {
    char args[6144];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return run_runner(args, gc_out, sizeof gc_out);
}

/* Runs `runner EXP --set output.root=gc_tmp/ROOT SETS`, expecting exit 0, and copies the
 * run directory into dir (returns dir, or NULL after printing the output). */
static inline const char *gc_run(const char *exp, const char *root, const char *sets, char *dir, size_t len) {
    double t0 = dist_now();
    int rc = gc_runner("%s --set output.root=%s/%s %s", exp, gc_tmp, root, sets ? sets : "");
    double dt = dist_now() - t0;
    const char *base = strrchr(exp, '/') ? strrchr(exp, '/') + 1 : exp;
    char name[256], r[700];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(base) - 5), base);   /* minus ".yaml" */
    snprintf(r, sizeof r, "%s/%s", gc_tmp, root);
    fprintf(stderr, "  runner %s [%s] %s: exit %d after %.1f s\n", base, root, sets ? sets : "", rc, dt);
    if (rc != 0) {
        fprintf(stderr, "runner %s %s exited %d:\n%s\n", exp, sets ? sets : "", rc, gc_out);
        return NULL;
    }
    const char *d = only_run_dir(r, name);
    if (!d) {
        fprintf(stderr, "no single run directory under %s/%s\n", r, name);
        return NULL;
    }
    snprintf(dir, len, "%s", d);
    return dir;
}

/* ---- run directory files ---- */

/* Index of column `name` in the header of the CSV file, -1 if absent. */
static inline int gc_csv_index(const char *path, const char *name) {
    char *s = test_read_file(path, NULL);
    if (!s) return -1;
    int idx = -1, k = 0;
    size_t nl = strlen(name);
    for (char *c = s; *c && *c != '\n'; k++) {
        size_t l = strcspn(c, ",\n");
        if (l == nl && !strncmp(c, name, nl)) { idx = k; break; }
        c += l;
        if (*c == ',') c++;
    }
    free(s);
    return idx;
}

/* Column `name` of DIR/FILE as numbers (NAN for an empty cell); returns the number of data
 * rows read (at most max), -1 when the file or column is missing. */
static inline int gc_csv_column(const char *dir, const char *file, const char *name, double *out, int max) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int col = gc_csv_index(path, name);
    if (col < 0) {
        fprintf(stderr, "%s: no column %s\n", path, name);
        return -1;
    }
    char *s = test_read_file(path, NULL);
    if (!s) return -1;
    int rows = 0;
    char *line = strchr(s, '\n');
    while (line && line[1] && rows < max) {
        line++;
        char *c = line;
        for (int k = 0; k < col && c; k++) {
            c = strpbrk(c, ",\n");
            c = c && *c == ',' ? c + 1 : NULL;
        }
        double v = NAN;
        if (c && *c != ',' && *c != '\n' && *c) v = strtod(c, NULL);
        out[rows++] = v;
        line = strchr(line, '\n');
    }
    free(s);
    return rows;
}

/* Cell (row, column `name`) of DIR/FILE as text ("" when empty or missing). */
static inline const char *gc_csv_text(const char *dir, const char *file, int row, const char *name, char *buf,
                                      size_t len) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    buf[0] = '\0';
    int col = gc_csv_index(path, name);
    if (col < 0) return buf;
    dist_csv_cell(path, row, col, buf, len);
    return buf;
}

/* Counts the rows 1..rows whose cell in column `name` of DIR/FILE differs as text between
 * runs a and b (or is empty in a); prints the first few. */
static inline int gc_same_cells(const char *a, const char *b, const char *file, const char *name, int rows) {
    int bad = 0;
    for (int r = 1; r <= rows; r++) {
        char x[64], y[64];
        gc_csv_text(a, file, r, name, x, sizeof x);
        gc_csv_text(b, file, r, name, y, sizeof y);
        if (!x[0] || strcmp(x, y)) {
            if (bad++ < 5) fprintf(stderr, "  %s row %d %s: \"%s\" vs \"%s\"\n", file, r, name, x, y);
        }
    }
    if (bad > 5) fprintf(stderr, "  %s %s: %d rows differ\n", file, name, bad);
    return bad;
}

/* A string from DIR/FILE (a JSON object), copied into buf ("" when missing). */
static inline const char *gc_json_string(const char *dir, const char *file, const char *key, char *buf,
                                         size_t len) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    buf[0] = '\0';
    size_t n = 0;
    char *s = test_read_file(p, &n);
    if (!s) return buf;
    err_t e = {0};
    json_t *j = json_parse(s, n, &e);
    free(s);
    if (!j) return buf;
    snprintf(buf, len, "%s", json_get_string(j, key, ""));
    json_free(j);
    return buf;
}

/* Section `name` of DIR/checkpoints/last.ckpt (malloc'd; *n gets its size in floats). */
static inline float *gc_section(const char *dir, const char *name, size_t *n) {
    char p[4400];
    snprintf(p, sizeof p, "%s/checkpoints/last.ckpt", dir);
    size_t bytes = 0;
    float *f = ckpt_section_copy(p, name, &bytes);
    *n = bytes / sizeof(float);
    if (!f) fprintf(stderr, "%s: no section %s\n", p, name);
    return f;
}

/* Compares section `name` of two runs' last.ckpt bit for bit: returns how many 4-byte
 * words differ (-1 when missing or of different sizes) and prints the first one and the
 * largest |a - b|. When value_equal, +0 and -0 count as equal. */
static inline long gc_diff_bits(const char *dir_a, const char *dir_b, const char *name, bool value_equal) {
    size_t na = 0, nb = 0;
    float *a = gc_section(dir_a, name, &na), *b = gc_section(dir_b, name, &nb);
    long bad = -1;
    if (a && b && na == nb && na > 0) {
        bad = 0;
        long first = -1;
        double worst = 0;
        for (size_t i = 0; i < na; i++) {
            bool same = value_equal ? (a[i] == b[i] || (isnan(a[i]) && isnan(b[i])))
                                    : memcmp(&a[i], &b[i], sizeof(float)) == 0;
            if (same) continue;
            if (first < 0) first = (long)i;
            bad++;
            double d = fabs((double)a[i] - (double)b[i]);
            if (d > worst) worst = d;
        }
        if (bad)
            fprintf(stderr, "  %s: %ld of %zu values differ; first at %ld (%.9g vs %.9g), largest |diff| %.3g\n",
                    name, bad, na, first, a[first], b[first], worst);
        else
            fprintf(stderr, "  %s: all %zu values identical\n", name, na);
    } else if (a && b) {
        fprintf(stderr, "  %s: %zu vs %zu values\n", name, na, nb);
    }
    free(a);
    free(b);
    return bad;
}

/* ||a - b|| / ||b|| over section `name` of two runs' last.ckpt (INFINITY when missing);
 * *max_abs gets the largest |a - b|. */
static inline double gc_rel_l2(const char *dir_a, const char *dir_b, const char *name, double *max_abs) {
    double m = INFINITY, l2 = INFINITY;
    dist_compare_section2(dir_a, dir_b, name, 0.0, 0.0, &m, &l2);
    if (max_abs) *max_abs = m;
    return l2;
}

/* The parameters net_init gives resnet20 with seed on the CPU backend (what every backend
 * starts from: net_init draws on the host). *n gets the count. NULL on failure. */
static inline float *gc_init_params(const char *arch, int channels, int classes, int hw, uint64_t seed, size_t *n) {
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 1};
    backend_t *be = backend_create(&bo, &e);
    net_t *net = be ? resnet_build(arch, channels, classes, false, &e) : NULL;
    float *p = NULL;
    if (net && !net_bind(net, be, 1, hw, hw, DT_F32, &e) && !net_init(net, seed, &e)) {
        *n = net_num_params(net);
        p = malloc(*n * sizeof(float));
        if (p && net_download_params(net, p, &e)) {
            free(p);
            p = NULL;
        }
    }
    if (!p) fprintf(stderr, "computing the initial parameters: %s\n", e.msg);
    net_free(net);
    backend_free(be);
    return p;
}

/* ---- background runs ---- */

/* Starts `runner EXP --set output.root=ROOT [--set EXTRA]` with stdout+stderr to log and
 * returns its pid. */
static inline pid_t gc_spawn(const char *exp, const char *root, const char *extra_set, const char *log) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        char set[800];
        snprintf(set, sizeof set, "output.root=%s", root);
        if (extra_set)
            execl(test_runner_exe(), "runner", exp, "--set", set, "--set", extra_set, (char *)NULL);
        else
            execl(test_runner_exe(), "runner", exp, "--set", set, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits for our child pid up to limit_s; returns its exit code (128 + signal), or -1 on
 * timeout (the child is then killed with SIGKILL and reaped). *elapsed: seconds waited. */
static inline int gc_wait(pid_t pid, double limit_s, double *elapsed) {
    double t0 = dist_now();
    for (;;) {
        int st = 0;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            if (elapsed) *elapsed = dist_now() - t0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (dist_now() - t0 > limit_s) {
            if (elapsed) *elapsed = dist_now() - t0;
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(5000);
    }
}

/* The one run directory under ROOT/NAME, found with opendir (fast enough to poll);
 * returns false when there is none yet. */
static inline bool gc_find_run_dir(const char *root, const char *name, char *dir, size_t len) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", root, name);
    DIR *d = opendir(p);
    if (!d) return false;
    struct dirent *de;
    bool found = false;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(dir, len, "%s/%s", p, de->d_name);
        found = true;
        break;
    }
    closedir(d);
    return found;
}

/* Lines in a file (0 if unreadable). */
static inline int gc_count_lines(const char *path) { return dist_count_lines(path); }





/* Ends the rank processes this test found (continued first, in case they were stopped),
 * each only while it still belongs to run_dir (RUNNER_RUN_DIR in its environment, so a
 * recycled pid is left alone): the cleanup after a failed check, so that nothing
 * outlives the test. */
static inline void gc_kill_ranks(const pid_t *pids, int n, const char *run_dir) {
    char v[4096];
    for (int i = 0; i < n; i++)
        if (pids[i] > 0 && kill(pids[i], 0) == 0 &&
            !strcmp(dist_proc_env(pids[i], "RUNNER_RUN_DIR", v, sizeof v), run_dir)) {
            kill(pids[i], SIGCONT);
            kill(pids[i], SIGKILL);
        }
}

static inline int gc_count_substr(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

#endif
