/* rundir.c: run directory creation, lookup for resume, atomic writes, env.json. */
#include "runner/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "model/backend.h"
#include "runner/checkpoint.h"
#include "runner/ckpt_writer.h"
#include "runner/config.h"
#include "util/json.h"

#ifndef RUNNER_GIT_COMMIT
#define RUNNER_GIT_COMMIT "unknown"
#endif
#ifndef RUNNER_VERSION
#define RUNNER_VERSION "0.1.0"
#endif

const char *runner_version(void) { return RUNNER_VERSION; }
const char *runner_commit(void) { return RUNNER_GIT_COMMIT; }

static void random_id(char out[7]) {
    static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char b[6];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        unsigned long x = (unsigned long)time(NULL) ^ ((unsigned long)getpid() << 16) ^ (unsigned long)clock();
        for (int i = 0; i < 6; i++) { b[i] = (unsigned char)x; x = x * 6364136223846793005ul + 1442695040888963407ul; x ^= x >> 29; }
    }
    for (int i = 0; i < 6; i++) out[i] = al[b[i] % 36];
    out[6] = '\0';
}

static void timestamp(char out[16]) {
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(out, 16, "%Y%m%d-%H%M%S", &tm);
}

/* The path <root>/<name>/<timestamp>-<id> to try for a new run. */
static void rundir_propose(const char *root, const char *name, char *out, size_t len) {
    char ts[16], id[7];
    timestamp(ts);
    random_id(id);
    snprintf(out, len, "%s/%s/%s-%s", root, name, ts, id);
}

int rundir_create(const char *root, const char *name, char *out, size_t len, err_t *e) {
    char parent[4096];
    snprintf(parent, sizeof parent, "%s/%s", root, name);
    if (mkdir_p(parent, ERR_INPUT, e)) return err_wrap(e, "output.root");
    for (int attempt = 0; attempt < 100; attempt++) {
        rundir_propose(root, name, out, len);
        if (mkdir(out, 0755) == 0) {
            char sub[4200];
            snprintf(sub, sizeof sub, "%s/logs", out);
            if (mkdir(sub, 0755) != 0) return err_errno(e, ERR_RUNTIME, "%s", sub);
            snprintf(sub, sizeof sub, "%s/checkpoints", out);
            if (mkdir(sub, 0755) != 0) return err_errno(e, ERR_RUNTIME, "%s", sub);
            return 0;
        }
        if (errno != EEXIST) return err_errno(e, ERR_INPUT, "%s: cannot create run directory", out);
    }
    return err_set(e, ERR_RUNTIME, "%s: could not find a free run directory name", parent);
}

bool rundir_is_run(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/resolved.yaml", dir);
    return access(p, R_OK) == 0;
}

/* True when <dir>/summary.json says the run completed. */
static bool run_completed(const char *dir) {
    char p[4600];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    err_t e = {0};
    json_t *j = json_parse_file(p, 1 << 20, &e);
    if (!j) return false;
    const char *st = json_get_string(j, "status", "");
    bool done = !strcmp(st, "completed");
    json_free(j);
    return done;
}

int rundir_resume_checkpoint(const char *run, char *out, size_t len) {
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/checkpoints", run);
    snprintf(out, len, "%s/last.ckpt", dir);
    if (access(out, R_OK) == 0) return 1;
    /* killed after a numbered checkpoint was renamed into place but before last.ckpt was
     * linked to it: that file is the newest state (written last) */
    static const char *const prefixes[] = {"epoch_", "step_"};
    time_t newest = 0;
    int found = 0;
    for (int k = 0; k < 2; k++) {
        int64_t nums[1];
        if (ckpt_list_numbered(dir, prefixes[k], nums, 1) < 1) continue;
        char path[4500];
        snprintf(path, sizeof path, "%s/%s%lld.ckpt", dir, prefixes[k], (long long)nums[0]);
        struct stat st;
        if (stat(path, &st) != 0 || access(path, R_OK) != 0 || (found && st.st_mtime < newest)) continue;
        newest = st.st_mtime;
        found = 1;
        snprintf(out, len, "%s", path);
    }
    if (!found) snprintf(out, len, "%s/last.ckpt", dir);
    return found;
}

int rundir_find_resumable(const char *root, const char *name, uint64_t hash, char *out, size_t len,
                          char *other, size_t other_len) {
    char parent[4096];
    snprintf(parent, sizeof parent, "%s/%s", root, name);
    if (other && other_len) other[0] = '\0';
    DIR *d = opendir(parent);
    if (!d) return 0;
    char best[256] = "", best_other[256] = "";
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof best) continue;
        char run[4400], ck[4500];
        snprintf(run, sizeof run, "%s/%s", parent, de->d_name);
        if (!rundir_resume_checkpoint(run, ck, sizeof ck) || run_completed(run)) continue;
        /* a checkpoint whose header cannot be read counts as this run's: resume then
         * reports it and falls back to an older checkpoint */
        uint64_t h;
        bool same = ckpt_read_config_hash(ck, &h) != 0 || h == hash;
        char *slot = same ? best : best_other;
        if (strcmp(de->d_name, slot) > 0) snprintf(slot, sizeof best, "%s", de->d_name);
    }
    closedir(d);
    if (best_other[0] && other && other_len) snprintf(other, other_len, "%s/%s", parent, best_other);
    if (!best[0]) return 0;
    snprintf(out, len, "%s/%s", parent, best);
    return 1;
}

int rundir_find_completed(const char *root, const char *name, char *out, size_t len) {
    char parent[4096];
    snprintf(parent, sizeof parent, "%s/%s", root, name);
    DIR *d = opendir(parent);
    if (!d) return 0;
    char best[256] = "";
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof best || strcmp(de->d_name, best) <= 0) continue;
        char run[4400], ck[4500];
        snprintf(run, sizeof run, "%s/%s", parent, de->d_name);
        if (run_completed(run) && rundir_resume_checkpoint(run, ck, sizeof ck)) snprintf(best, sizeof best, "%s", de->d_name);
    }
    closedir(d);
    if (!best[0]) return 0;
    snprintf(out, len, "%s/%s", parent, best);
    return 1;
}

int copy_file(const char *src, const char *dst, err_t *e) {
    FILE *f = fopen(src, "rb");
    if (!f) return err_errno(e, ERR_INPUT, "%s: cannot open", src);
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); return err_set(e, ERR_RUNTIME, "out of memory copying %s", src); }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    int rc = write_file_atomic(dst, buf, n, e);
    free(buf);
    return rc;
}

/* Copies the first line of file that starts with key into out (value after ':' or '='). */
static void read_keyed_line(const char *file, const char *key, char sep, char *out, size_t len) {
    out[0] = '\0';
    FILE *f = fopen(file, "r");
    if (!f) return;
    char line[512];
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl)) continue;
        char *v = strchr(line, sep);
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t' || *v == '"') v++;
        size_t l = strcspn(v, "\"\n");
        v[l] = '\0';
        snprintf(out, len, "%s", v);
        break;
    }
    fclose(f);
}

void rundir_cpu_model(char *out, size_t len) {
    read_keyed_line("/proc/cpuinfo", "model name", ':', out, len);
}

int rundir_write_env(const char *run_dir, const char *const *hosts, int n_hosts,
                     void (*extra)(struct jw *w, void *ctx), void *ctx, err_t *e) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return err_set(e, ERR_RUNTIME, "out of memory");
    jw_t w;
    jw_init(&w, f, true);
    jw_obj_begin(&w);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    jw_kstr(&w, "host", host);
    struct utsname u;
    char os[512] = "", pretty[256];
    read_keyed_line("/etc/os-release", "PRETTY_NAME", '=', pretty, sizeof pretty);
    if (uname(&u) == 0) snprintf(os, sizeof os, "%s (%s %s %s)", pretty, u.sysname, u.release, u.machine);
    jw_kstr(&w, "os", os);
    char cpu[256];
    rundir_cpu_model(cpu, sizeof cpu);
    jw_kstr(&w, "cpu", cpu);
    jw_kint(&w, "cpu_cores", sysconf(_SC_NPROCESSORS_ONLN));
    jw_key(&w, "gpus");
    jw_arr_begin(&w);
    int ng = backend_cuda_device_count();
    for (int i = 0; i < ng; i++) {
        char name[256];
        if (backend_cuda_device_name(i, name, sizeof name) == 0) jw_str(&w, name);
    }
    jw_arr_end(&w);
    /* one key per component (null without CUDA), from "driver 13.0, runtime 13.0,
     * cuDNN 9.1.0, cuBLASLt 13.0.0, NCCL 2.28.3" */
    char versions[512];
    backend_cuda_versions(versions, sizeof versions);
    static const char *const parts[][2] = {{"driver", "driver"}, {"cuda", "runtime"}, {"cudnn", "cuDNN"},
                                           {"cublaslt", "cuBLASLt"}, {"nccl", "NCCL"}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char v[64] = "";
        size_t l = strlen(parts[i][1]);
        for (const char *p = versions; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
            while (*p == ' ') p++;
            if (!strncmp(p, parts[i][1], l) && p[l] == ' ') {
                snprintf(v, sizeof v, "%.*s", (int)strcspn(p + l + 1, ","), p + l + 1);
                break;
            }
        }
        jw_kstr(&w, parts[i][0], v[0] && strcmp(v, "none") ? v : NULL);
    }
    jw_kstr(&w, "runner_version", runner_version());
    jw_kstr(&w, "runner_commit", runner_commit());
    jw_key(&w, "hosts");
    jw_arr_begin(&w);
    if (n_hosts == 0) jw_str(&w, host);
    for (int i = 0; i < n_hosts; i++) jw_str(&w, hosts[i]);
    jw_arr_end(&w);
    if (extra) extra(&w, ctx);
    jw_obj_end(&w);
    fputc('\n', f);
    fclose(f);
    char path[4200];
    snprintf(path, sizeof path, "%s/env.json", run_dir);
    int rc = write_file_atomic(path, buf, len, e);
    free(buf);
    return rc;
}

int rundir_record_config_changes(const char *run_dir, const experiment_t *now, int64_t step, int epoch,
                                 char *summary, size_t summary_len, int *total, err_t *e) {
    if (summary_len) summary[0] = '\0';
    *total = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/config_changes.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    if (f) {   /* earlier records: one per line */
        int c, prev = '\n';
        while ((c = fgetc(f)) != EOF) {
            if (c == '\n' && prev != '\n') (*total)++;
            prev = c;
        }
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/resolved.yaml", run_dir);
    experiment_t *old = malloc(sizeof *old);
    enum { MAX_CH = 96 };
    config_change_t *ch = malloc(MAX_CH * sizeof *ch);
    err_t le = {0};
    int n = -1;
    if (old && ch) n = config_load(path, NULL, 0, old, &le) == 0 ? config_diff(old, now, false, ch, MAX_CH) : -1;
    free(old);
    if (n <= 0) {   /* nothing changed, or no readable resolved.yaml to compare with */
        free(ch);
        return n < 0 && !le.code ? err_set(e, ERR_RUNTIME, "out of memory") : 0;
    }
    if (n > MAX_CH) n = MAX_CH;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) { free(ch); return err_set(e, ERR_RUNTIME, "out of memory"); }
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    jw_t w;
    jw_init(&w, m, false);
    jw_obj_begin(&w);
    jw_kint(&w, "step", step);
    jw_kint(&w, "epoch", epoch);
    jw_kstr(&w, "time", when);
    jw_key(&w, "changes");
    jw_arr_begin(&w);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        jw_obj_begin(&w);
        jw_kstr(&w, "key", ch[i].key);
        jw_kstr(&w, "from", ch[i].before);
        jw_kstr(&w, "to", ch[i].after);
        jw_kbool(&w, "hashed", ch[i].hashed);
        jw_obj_end(&w);
        if (used < summary_len)
            used += (size_t)snprintf(summary + used, summary_len - used, "%s%s %.200s -> %.200s", i ? ", " : "",
                                     ch[i].key, ch[i].before, ch[i].after);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    fputc('\n', m);
    fclose(m);
    free(ch);
    snprintf(path, sizeof path, "%s/config_changes.jsonl", run_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write(fd, buf, len) == (ssize_t)len && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    free(buf);
    if (!ok) return err_errno(e, ERR_RUNTIME, "%s: cannot append", path);
    (*total)++;
    return 1;
}
