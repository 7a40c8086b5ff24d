/* compare.c: running a matrix of experiments one after another with resumable state in
 * compare.json, then writing the comparison report (compare.h). Running a member is the
 * caller's run function; this file never trains, loads YAML or calls config.c. */
#include "runner/report/compare.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runner/report/report.h"
#include "runner/report/report_impl.h"
#include "util/json.h"
#include "util/lockinfo.h"
#include "util/rng.h"

enum { STATE_JSON_MAX = 4 << 20 };

static const char *const member_status_names[] = {"pending", "running", "completed", "failed",
                                                  "interrupted"};

const char *compare_member_status_name(member_status_t s) {
    return (s >= MEMBER_PENDING && s <= MEMBER_INTERRUPTED) ? member_status_names[s] : "?";
}

int compare_member_count(const experiment_matrix_t *m) {
    return m->n * (m->repeats > 1 ? m->repeats : 1);
}

void compare_member_of(const experiment_matrix_t *m, int j, compare_member_t *out, int *entry) {
    int i = j % m->n, round = j / m->n;
    *entry = i;
    snprintf(out->entry, sizeof out->entry, "%s", m->entry_names[i]);
    out->seed = m->runs[i].seed + (uint64_t)round;
    out->has_seed = true;
    if (m->repeats > 1)
        snprintf(out->name, sizeof out->name, "%.200s/seed%llu", m->entry_names[i], (unsigned long long)out->seed);
    else
        snprintf(out->name, sizeof out->name, "%s", m->entry_names[i]);
}

static void now_iso(char *buf, size_t cap) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Flushes a directory's entries to disk so a rename inside it survives a crash. */
static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int compare_state_save(compare_state_t *s, err_t *e) {
    char path[CFG_PATH + 32], tmp[CFG_PATH + 32];
    snprintf(path, sizeof path, "%s/compare.json", s->parent);
    snprintf(tmp, sizeof tmp, "%s/.compare.json.tmp", s->parent);
    now_iso(s->updated, sizeof s->updated);
    FILE *f = fopen(tmp, "wb");
    if (!f) return err_errno(e, ERR_RUNTIME, "%s: cannot write", tmp);
    jw_t w;
    jw_init(&w, f, true);
    jw_obj_begin(&w);
    jw_kstr(&w, "matrix", s->matrix);
    jw_kstr(&w, "source", s->source);
    jw_kstr(&w, "status", s->status);
    jw_kstr(&w, "created", s->created);
    jw_kstr(&w, "updated", s->updated);
    jw_key(&w, "members");
    jw_arr_begin(&w);
    for (int i = 0; i < s->n; i++) {
        const compare_member_t *m = &s->members[i];
        jw_obj_begin(&w);
        jw_kstr(&w, "name", m->name);
        jw_kstr(&w, "entry", m->entry);
        if (m->has_seed && m->seed <= (1ull << 53)) {
            jw_kint(&w, "seed", (int64_t)m->seed);
        } else if (m->has_seed) {   /* beyond a double's exact integers: as text */
            char seed[32];
            snprintf(seed, sizeof seed, "%llu", (unsigned long long)m->seed);
            jw_kstr(&w, "seed", seed);
        }
        jw_kstr(&w, "status", compare_member_status_name(m->status));
        jw_key(&w, "exit_code");
        if (m->exit_code < 0) jw_null(&w);
        else jw_int(&w, m->exit_code);
        jw_kstr(&w, "run_dir", m->name);
        jw_kint(&w, "attempts", m->attempts);
        jw_kstr(&w, "message", m->message[0] ? m->message : NULL);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    fputc('\n', f);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (fclose(f) != 0) bad = 1;
    if (bad) {
        unlink(tmp);
        return err_errno(e, ERR_RUNTIME, "%s: write failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return err_errno(e, ERR_RUNTIME, "%s: cannot rename into place", path);
    }
    fsync_dir(s->parent);
    return 0;
}

/* Copies the string at key of obj into dst; a missing key is fine when optional. */
static int get_str(const json_t *obj, const char *key, char *dst, size_t cap, bool optional,
                   const char *path, const char *where, err_t *e) {
    const json_t *v = json_get(obj, key);
    if (!v || v->type == JSON_NULL) {
        dst[0] = '\0';
        if (optional) return 0;
        return err_set(e, ERR_INPUT, "%s: %s\"%s\" is missing; fix it or move this comparison "
                       "directory away to start afresh", path, where, key);
    }
    if (v->type != JSON_STRING)
        return err_set(e, ERR_INPUT, "%s: %s\"%s\" must be a string; fix it or move this comparison "
                       "directory away to start afresh", path, where, key);
    if (strlen(v->string) >= cap)
        return err_set(e, ERR_INPUT, "%s: %s\"%s\" is longer than %zu characters", path, where, key, cap - 1);
    memcpy(dst, v->string, strlen(v->string) + 1);
    return 0;
}

/* Fills one member from members[i] of compare.json. */
static int load_member(const json_t *o, int i, compare_member_t *m, const char *path, err_t *e) {
    char where[64], status[32];
    snprintf(where, sizeof where, "members[%d].", i);
    if (o->type != JSON_OBJECT)
        return err_set(e, ERR_INPUT, "%s: members[%d] must be an object; fix it or move this "
                       "comparison directory away to start afresh", path, i);
    if (get_str(o, "name", m->name, sizeof m->name, false, path, where, e) ||
        get_str(o, "status", status, sizeof status, false, path, where, e) ||
        get_str(o, "message", m->message, sizeof m->message, true, path, where, e))
        return -1;
    int k = 0;
    while (k <= MEMBER_INTERRUPTED && strcmp(status, member_status_names[k])) k++;
    if (k > MEMBER_INTERRUPTED)
        return err_set(e, ERR_INPUT, "%s: %sstatus '%s' is not one of pending, running, completed, "
                       "failed, interrupted", path, where, status);
    m->status = (member_status_t)k;
    if (get_str(o, "entry", m->entry, sizeof m->entry, true, path, where, e)) return -1;
    if (!m->entry[0])   /* written before repeats: the name is the entry */
        snprintf(m->entry, sizeof m->entry, "%.*s", (int)strcspn(m->name, "/"), m->name);
    const json_t *sd = json_get(o, "seed");
    char *end = NULL;
    if (sd && sd->type == JSON_NUMBER && sd->number >= 0 && sd->number <= 9007199254740992.0) {
        m->seed = (uint64_t)sd->number;
        m->has_seed = true;
    } else if (sd && sd->type == JSON_STRING && sd->string[0] >= '0' && sd->string[0] <= '9') {
        m->seed = strtoull(sd->string, &end, 10);
        m->has_seed = !*end;
    }
    const json_t *x = json_get(o, "exit_code");
    m->exit_code = x && x->type == JSON_NUMBER ? (int)x->number : -1;
    m->attempts = (int)json_get_number(o, "attempts", 0);
    return 0;
}

int compare_state_load(const char *parent, compare_state_t *s, err_t *e) {
    memset(s, 0, sizeof *s);
    snprintf(s->parent, sizeof s->parent, "%s", parent);
    char path[CFG_PATH + 32];
    snprintf(path, sizeof path, "%s/compare.json", parent);
    json_t *j = json_parse_file(path, STATE_JSON_MAX, e);
    if (!j) return -1;
    int rc = 0;
    const json_t *mem = json_get(j, "members");
    if (j->type != JSON_OBJECT || !mem || mem->type != JSON_ARRAY)
        rc = err_set(e, ERR_INPUT, "%s: expected an object with a \"members\" array; fix it or move "
                     "this comparison directory away to start afresh", path);
    else if (mem->count > CFG_MAX_MATRIX_RUNS)
        rc = err_set(e, ERR_INPUT, "%s: more than %d members", path, CFG_MAX_MATRIX_RUNS);
    if (rc == 0)
        rc = get_str(j, "matrix", s->matrix, sizeof s->matrix, false, path, "", e) ||
             get_str(j, "status", s->status, sizeof s->status, false, path, "", e) ||
             get_str(j, "source", s->source, sizeof s->source, true, path, "", e) ||
             get_str(j, "created", s->created, sizeof s->created, true, path, "", e) ||
             get_str(j, "updated", s->updated, sizeof s->updated, true, path, "", e) ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < mem->count; i++) {
        rc = load_member(mem->items[i], (int)i, &s->members[i], path, e);
        s->n = (int)i + 1;
    }
    json_free(j);
    return rc;
}

/* True when the state lists exactly m's member names in order. */
static bool same_members(const compare_state_t *s, const experiment_matrix_t *m) {
    if (s->n != compare_member_count(m)) return false;
    for (int j = 0; j < s->n; j++) {
        compare_member_t want;
        int entry;
        compare_member_of(m, j, &want, &entry);
        if (strcmp(s->members[j].name, want.name)) return false;
    }
    return true;
}

int compare_find_unfinished(const char *matrix_root, const experiment_matrix_t *m, char *out,
                            size_t cap, err_t *e) {
    DIR *d = opendir(matrix_root);
    if (!d) {
        if (errno == ENOENT) return 0;
        return err_errno(e, ERR_INPUT, "%s: cannot list", matrix_root);
    }
    compare_state_t *s = xmalloc(sizeof *s, e);
    if (!s) { closedir(d); return -1; }
    char best[256] = "";
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof best) continue;
        char dir[CFG_PATH + 256], state[CFG_PATH + 300];
        snprintf(dir, sizeof dir, "%s/%s", matrix_root, de->d_name);
        snprintf(state, sizeof state, "%s/compare.json", dir);
        struct stat st;
        if (stat(state, &st) != 0) continue;  /* not a comparison (or killed before its first save) */
        if (compare_state_load(dir, s, e)) { rc = -1; break; }
        bool unfinished = !strcmp(s->status, "running") || !strcmp(s->status, "interrupted");
        if (unfinished && same_members(s, m) && strcmp(de->d_name, best) > 0)
            snprintf(best, sizeof best, "%s", de->d_name);
    }
    closedir(d);
    free(s);
    if (rc) return -1;
    if (!best[0]) return 0;
    if ((size_t)snprintf(out, cap, "%s/%s", matrix_root, best) >= cap)
        return err_set(e, ERR_INPUT, "%s/%s: path too long", matrix_root, best);
    return 1;
}

int compare_new_parent(const char *matrix_root, char *out, size_t cap, err_t *e) {
    if (mkdir_p(matrix_root, ERR_INPUT, e)) return -1;
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    for (uint32_t attempt = 0; attempt < 64; attempt++) {
        rng_t r = rng_make(seed, RNG_STREAM_MISC, attempt, 0);
        char id[7];
        for (int i = 0; i < 6; i++) id[i] = alphabet[rng_below(&r, 36)];
        id[6] = '\0';
        if ((size_t)snprintf(out, cap, "%s/%s-%s", matrix_root, stamp, id) >= cap)
            return err_set(e, ERR_INPUT, "%s: path too long", matrix_root);
        if (mkdir(out, 0777) == 0) return 0;
        if (errno != EEXIST) return err_errno(e, ERR_INPUT, "%s: cannot create the directory", out);
    }
    return err_set(e, ERR_RUNTIME, "%s: could not find a free directory name", matrix_root);
}

/* Names for the row hints; local because this module may not call config.c. */
static const char *mode_name(par_mode_t m) {
    return m == PAR_SINGLE ? "single" : m == PAR_DP ? "dp" : m == PAR_DDP ? "ddp" : "";
}
static const char *precision_of(const experiment_t *x) {
    if (!x->amp.enabled) return "fp32";
    return x->amp.dtype == PREC_BF16 ? "bf16" : "fp16";
}
static const char *device_of(const experiment_t *x) {
    return x->device == DEVICE_CPU ? "cpu" : x->device == DEVICE_CUDA ? "cuda" : "auto";
}

/* Builds the report of every member (failed ones marked) into s->parent and prints its
 * verdict to log. */
static int write_report(const compare_state_t *s, const experiment_matrix_t *m, FILE *log, err_t *e) {
    report_input_t *in = xcalloc((size_t)s->n, sizeof *in, e);
    char (*dirs)[CFG_PATH + CFG_STR] = xcalloc((size_t)s->n, sizeof *dirs, e);
    if (!in || !dirs) {
        free(in);
        free(dirs);
        return -1;
    }
    char (*seeds)[32] = xcalloc((size_t)s->n, sizeof *seeds, e);
    if (!seeds) {
        free(in);
        free(dirs);
        return -1;
    }
    for (int i = 0; i < s->n; i++) {
        const compare_member_t *mb = &s->members[i];
        compare_member_t want;
        int entry;
        compare_member_of(m, i, &want, &entry);
        const experiment_t *x = &m->runs[entry];
        snprintf(dirs[i], sizeof dirs[i], "%s/%s", s->parent, mb->name);
        snprintf(seeds[i], sizeof seeds[i], "%llu", (unsigned long long)want.seed);
        in[i].dir = dirs[i];
        in[i].label = mb->name;
        in[i].group_key = m->entry_names[entry];
        in[i].group_label = m->entry_names[entry];
        in[i].seed = seeds[i];
        in[i].lenient = true;
        if (mb->status != MEMBER_COMPLETED) {
            in[i].status = compare_member_status_name(mb->status);
            in[i].exit_code = mb->exit_code;
            in[i].message = mb->message;
        }
        in[i].mode = mode_name(x->parallel.mode);
        in[i].precision = precision_of(x);
        in[i].device = device_of(x);
        in[i].world_size = x->parallel.mode == PAR_SINGLE ? 1 : x->parallel.world_size;
        in[i].batch_size = x->train.batch_size;
    }
    report_t r;
    int rc = report_build(in, s->n, s->matrix, &r, e);
    if (rc == 0) rc = report_write(&r, s->parent, e);
    if (rc == 0 && log) report_print_verdict(&r, "compare: ", log);
    report_free(&r);
    free(in);
    free(dirs);
    free(seeds);
    return rc;
}

/* Starts a fresh state for m in parent, or loads the one there and checks it is m's. */
static int open_state(const experiment_matrix_t *m, const char *parent, compare_state_t *s,
                      FILE *log, err_t *e) {
    char path[CFG_PATH + 32];
    snprintf(path, sizeof path, "%s/compare.json", parent);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (compare_state_load(parent, s, e)) return -1;
        if (!same_members(s, m))
            return err_set(e, ERR_INPUT, "%s: lists other members than the matrix %s (entries or repeats changed?); "
                           "move that directory away to start a fresh comparison", path, m->name);
        int done = 0;
        for (int i = 0; i < s->n; i++)
            done += s->members[i].status == MEMBER_COMPLETED || s->members[i].status == MEMBER_FAILED;
        if (log) fprintf(log, "compare: resuming %s (%d of %d runs done)\n", parent, done, s->n);
        return 0;
    }
    memset(s, 0, sizeof *s);
    snprintf(s->parent, sizeof s->parent, "%s", parent);
    snprintf(s->matrix, sizeof s->matrix, "%s", m->name);
    snprintf(s->source, sizeof s->source, "%s", m->runs[0].source_path);
    now_iso(s->created, sizeof s->created);
    s->n = compare_member_count(m);
    for (int j = 0; j < s->n; j++) {
        int entry;
        compare_member_of(m, j, &s->members[j], &entry);
        s->members[j].exit_code = -1;
    }
    if (log && m->repeats > 1)
        fprintf(log, "compare: %d runs (%d entries x %d seeds) in %s\n", s->n, m->n, m->repeats, parent);
    else if (log)
        fprintf(log, "compare: %d runs in %s\n", s->n, parent);
    return 0;
}

/* The last non-empty line of member_dir/logs/rank0.log (where a run's own error message
 * ends up when its output is logged), for a failure the run function did not explain.
 * Returns 0 when found. */
static int last_log_line(const char *member_dir, char *out, size_t cap) {
    char path[CFG_PATH + CFG_STR + 32];
    snprintf(path, sizeof path, "%s/logs/rank0.log", member_dir);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char buf[4096];
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
    size_t n = 0;
    if (size >= 0 && fseek(f, from, SEEK_SET) == 0) n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
    if (!n) return -1;
    char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    snprintf(out, cap, "%.1000s", line);
    return 0;
}

/* Runs member i and records the outcome. Returns its exit code. */
static int run_member(compare_state_t *s, int i, const experiment_t *x, compare_run_fn run, void *ctx,
                      FILE *log, err_t *e) {
    compare_member_t *mb = &s->members[i];
    char dir[CFG_PATH + CFG_STR];
    snprintf(dir, sizeof dir, "%s/%s", s->parent, mb->name);
    mb->status = MEMBER_RUNNING;
    mb->attempts++;
    mb->message[0] = '\0';
    if (strchr(mb->name, '/')) {   /* a repeat: its entry's directory holds the seeds' */
        char entry_dir[CFG_PATH + CFG_STR];
        snprintf(entry_dir, sizeof entry_dir, "%s/%s", s->parent, mb->entry);
        if (mkdir_p(entry_dir, ERR_RUNTIME, e)) return -1;
    }
    if (compare_state_save(s, e)) return -1;
    if (log) {
        fprintf(log, "compare: [%d/%d] %s -> %s\n", i + 1, s->n, mb->name, dir);
        fflush(log);
    }
    err_t me;
    err_clear(&me);
    int code = run(ctx, x, dir, &me);
    if (code < 0) code = me.code > 0 ? me.code : ERR_RUNTIME;
    mb->exit_code = code;
    if (code == 0) {
        mb->status = MEMBER_COMPLETED;
    } else {
        /* a member stopped by SIGINT (130) or a scheduler's SIGTERM/SIGUSR1 (75) resumes */
        bool stopped = code == ERR_INTERRUPT || code == ERR_PREEMPTED;
        mb->status = stopped ? MEMBER_INTERRUPTED : MEMBER_FAILED;
        if (me.msg[0]) snprintf(mb->message, sizeof mb->message, "%.1000s", me.msg);
        else if (stopped)
            snprintf(mb->message, sizeof mb->message, "interrupted; it resumes from its checkpoint");
        else if (last_log_line(dir, mb->message, sizeof mb->message) != 0)
            snprintf(mb->message, sizeof mb->message, "exited with code %d", code);
    }
    if (log) fprintf(log, "compare: %s %s (exit %d)%s%s\n", mb->name, compare_member_status_name(mb->status),
                     code, code ? ": " : "", code ? mb->message : "");
    if (code == ERR_INTERRUPT || code == ERR_PREEMPTED) snprintf(s->status, sizeof s->status, "interrupted");
    if (compare_state_save(s, e)) return -1;
    return code;
}

int compare_run(const experiment_matrix_t *m, const char *parent, compare_run_fn run, void *ctx,
                FILE *log, err_t *e) {
    if (m->n <= 0 || m->n > CFG_MAX_MATRIX)
        return err_set(e, ERR_INPUT, "%s: the matrix has %d entries; give between 1 and %d", m->name, m->n,
                       CFG_MAX_MATRIX);
    if (compare_member_count(m) > CFG_MAX_MATRIX_RUNS)
        return err_set(e, ERR_INPUT, "%s: %d entries x repeats %d = %d runs; at most %d", m->name, m->n,
                       m->repeats, compare_member_count(m), CFG_MAX_MATRIX_RUNS);
    struct stat st;
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(e, ERR_INPUT, "%s: not a directory; create it first (compare_new_parent)", parent);
    /* One process per comparison: the lock goes away with the process, even a killed one. */
    char lock_path[CFG_PATH + 32];
    snprintf(lock_path, sizeof lock_path, "%s/.compare.lock", parent);
    int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lock < 0) return err_errno(e, ERR_INPUT, "%s: cannot create", lock_path);
    if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
        char who[1024], host[256], stop[400] = "";
        long pid;
        lock_info_read(lock, who, sizeof who, &pid, host, sizeof host);
        close(lock);
        if (pid > 0) snprintf(stop, sizeof stop, ", or stop it (kill -INT %ld%s%s: the running member saves a "
                              "checkpoint first)", pid, host[0] ? " on host " : "", host);
        return err_set(e, ERR_INPUT, "%s: another runner compare is running this comparison (%s). One process "
                       "runs a comparison at a time; this one stopped without changing anything there. Wait for "
                       "it to end%s, then run the command again", parent, who, stop);
    }
    char holder[CFG_PATH + 32];
    snprintf(holder, sizeof holder, "runner compare %s", m->runs[0].source_path);
    lock_info_write(lock, holder);
    compare_state_t *s = xmalloc(sizeof *s, e);
    experiment_t *x = s ? xmalloc(sizeof *x, e) : NULL;
    if (!x) { free(s); close(lock); return -1; }
    int rc = open_state(m, parent, s, log, e);
    if (rc == 0) {
        snprintf(s->status, sizeof s->status, "running");
        rc = compare_state_save(s, e);
    }
    for (int i = 0; rc == 0 && i < s->n; i++) {
        member_status_t ms = s->members[i].status;
        if (ms == MEMBER_COMPLETED || ms == MEMBER_FAILED) {
            if (log) fprintf(log, "compare: [%d/%d] %s already %s, skipped\n", i + 1, s->n, s->members[i].name,
                             compare_member_status_name(ms));
            continue;
        }
        compare_member_t want;
        int entry;
        compare_member_of(m, i, &want, &entry);
        *x = m->runs[entry];
        x->seed = want.seed;   /* the repeat's seed: experiment.yaml and the run use it */
        int code = run_member(s, i, x, run, ctx, log, e);
        if (code < 0) rc = -1;
        else if (code == ERR_INTERRUPT || code == ERR_PREEMPTED)
            rc = err_set(e, code, "compare: %s during '%s'; run the same command again to resume %s",
                         code == ERR_PREEMPTED ? "preempted" : "interrupted", s->members[i].name, parent);
    }
    int failed = 0;
    char names[512] = "";
    for (int i = 0; rc == 0 && i < s->n; i++) {
        if (s->members[i].status != MEMBER_FAILED) continue;
        size_t l = strlen(names);
        snprintf(names + l, sizeof names - l, "%s%s (exit %d)", failed ? ", " : "", s->members[i].name,
                 s->members[i].exit_code);
        failed++;
    }
    if (rc == 0) rc = write_report(s, m, log, e);
    if (rc == 0) {
        snprintf(s->status, sizeof s->status, "%s", failed ? "failed" : "completed");
        rc = compare_state_save(s, e);
        if (log) fprintf(log, "compare: report in %s/report.html\n", parent);
    }
    if (rc == 0 && failed)
        rc = err_set(e, ERR_RUNTIME, "compare: %d of %d runs failed: %s; the report (failed rows marked) "
                     "is in %s/report.html and each run's logs in its directory", failed, s->n, names, parent);
    free(s);
    free(x);
    close(lock);
    return rc;
}

int compare_main(const experiment_matrix_t *m, compare_run_fn run, void *ctx, FILE *log,
                 char *parent_out, size_t cap, err_t *e) {
    if (m->n <= 0) return err_set(e, ERR_INPUT, "%s: the matrix has no entries", m->name);
    char root[CFG_PATH + CFG_STR + 2], parent[CFG_PATH + CFG_STR + 64];
    snprintf(root, sizeof root, "%s/%s", m->runs[0].output.root[0] ? m->runs[0].output.root : "runs", m->name);
    int found = compare_find_unfinished(root, m, parent, sizeof parent, e);
    if (found < 0) return -1;
    if (!found && compare_new_parent(root, parent, sizeof parent, e)) return -1;
    if (parent_out) snprintf(parent_out, cap, "%s", parent);
    return compare_run(m, parent, run, ctx, log, e);
}
