/* test_track_wandb.c: the W&B online sender against a stand-in service on loopback.
 *
 * The stand-in (a C thread on a random port) answers GraphQL (Viewer, RunResumeStatus,
 * UpsertBucket) and file_stream requests the way the service does, checks HTTP Basic auth
 * (user "api"), records every body, checks that file_stream offsets are consecutive (no
 * gap, no duplicate, also across retries) and can inject faults: 500s, 429 with
 * Retry-After, a hang past the client timeout, failures at the start of the run, every
 * request failing, or no server at all. After each run: the CSVs are complete, the warning
 * is printed exactly once when the service stays unreachable (never when it recovers),
 * the final request says complete/exitcode, close returns within its bound, and the API
 * key appears in no file of the run directory and in no output.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/track/track.h"
#include "runner/track/track_impl.h"
#include "util/json.h"
#include "tests/test.h"

#define KEY "sk-TEST-KEY-do-not-leak-7f3a9c41"
#define ENTITY "test-entity"

typedef struct srv {
    int fd, port;
    pthread_t th;
    atomic_int stop;
    pthread_mutex_t mu;
    /* faults */
    int upsert_fail_first;    /* the first N UpsertBucket requests get 500 */
    int fs_fail_first;        /* the first N file_stream requests get 500 (not processed) */
    int fs_429_first;         /* the first N file_stream requests get 429 Retry-After: 1 */
    double fs_hang_first_s;   /* the first file_stream request hangs this long, no answer */
    bool all_500;
    /* what arrived */
    int n_req, n_bad_auth, n_upsert, n_resume, n_viewer, n_fs, n_fs_seen;
    char upsert_body[16384];
    char fs_path[512];
    char *hist[256];
    int64_t hist_step[256];
    int n_hist, n_out, offset_errors, step_errors, rewrites, complete, exitcode, after_complete;
    char summary[8192];
    char out_last[512];
    double t_429, t_after_429;
} srv_t;

static void b64(const char *in, char *out) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint8_t)in[i] << 16;
        if (i + 1 < n) v |= (uint8_t)in[i + 1] << 8;
        if (i + 2 < n) v |= (uint8_t)in[i + 2];
        out[o++] = al[(v >> 18) & 63];
        out[o++] = al[(v >> 12) & 63];
        out[o++] = i + 1 < n ? al[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? al[v & 63] : '=';
    }
    out[o] = 0;
}

static void reply(int c, int status, const char *extra, const char *body) {
    char head[512];
    int n = snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n%s\r\n", status,
                     strlen(body), extra ? extra : "");
    if (send(c, head, (size_t)n, MSG_NOSIGNAL) < 0 || send(c, body, strlen(body), MSG_NOSIGNAL) < 0) {}
}

/* Reads one HTTP request: head (NUL-terminated) and body (malloc'd). */
static int read_request(int c, char *head, size_t cap, char **body) {
    size_t n = 0;
    char *end = NULL;
    while (!end) {
        if (n + 1 >= cap) return -1;
        ssize_t k = recv(c, head + n, cap - 1 - n, 0);
        if (k <= 0) return -1;
        n += (size_t)k;
        head[n] = 0;
        end = strstr(head, "\r\n\r\n");
    }
    size_t hlen = (size_t)(end - head) + 4, clen = 0;
    for (char *p = head; p && p < end; p = strchr(p, '\n')) {
        if (*p == '\n') p++;
        if (!strncasecmp(p, "Content-Length:", 15)) clen = strtoul(p + 15, NULL, 10);
        if (!strncasecmp(p, "Expect: 100-continue", 20) && send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL) < 0) {}
    }
    *body = malloc(clen + 1);
    size_t have = n - hlen;
    memcpy(*body, head + hlen, have);
    while (have < clen) {
        ssize_t k = recv(c, *body + have, clen - have, 0);
        if (k <= 0) { free(*body); return -1; }
        have += (size_t)k;
    }
    (*body)[clen] = 0;
    head[hlen] = 0;
    return 0;
}

/* Appends the file_stream body's files to the server's copy, checking offsets. */
static void fs_process(srv_t *s, const char *body) {
    json_t *j = json_parse(body, strlen(body), NULL);
    if (!j) { s->offset_errors++; return; }
    const json_t *fin = json_get(j, "complete");
    bool is_final = fin && fin->type == JSON_BOOL && fin->boolean;
    if (s->complete && !is_final) s->after_complete++;   /* a retried final is fine */
    const json_t *files = json_get(j, "files");
    const json_t *h = json_get(files, "wandb-history.jsonl");
    if (h) {
        /* like the service: content is written at offset (a retry of a request that was
         * processed after the client gave up rewrites the same lines); a gap is an error */
        int off = (int)json_get_number(h, "offset", -1);
        if (off < 0 || off > s->n_hist) {
            fprintf(stderr, "history offset %d, have %d lines\n", off, s->n_hist);
            s->offset_errors++;
        } else {
            if (off < s->n_hist) s->rewrites++;
            while (s->n_hist > off) free(s->hist[--s->n_hist]);
        }
        const json_t *c = json_get(h, "content");
        for (size_t i = 0; c && i < c->count && s->n_hist < 256; i++) {
            json_t *row = json_parse(c->items[i]->string, strlen(c->items[i]->string), NULL);
            int64_t st = (int64_t)json_get_number(row, "_step", -1);
            if (!json_get(row, "_runtime") || !json_get(row, "_timestamp")) s->step_errors++;
            if (s->n_hist && st <= s->hist_step[s->n_hist - 1]) s->step_errors++;
            json_free(row);
            s->hist_step[s->n_hist] = st;
            s->hist[s->n_hist++] = strdup(c->items[i]->string);
        }
    }
    const json_t *o = json_get(files, "output.log");
    if (o) {
        int off = (int)json_get_number(o, "offset", -1);
        if (off < 0 || off > s->n_out) s->offset_errors++;
        else s->n_out = off;
        const json_t *c = json_get(o, "content");
        s->n_out += c ? (int)c->count : 0;
        if (c && c->count) snprintf(s->out_last, sizeof s->out_last, "%s", c->items[c->count - 1]->string);
    }
    const json_t *sm = json_get(files, "wandb-summary.json");
    if (sm) {
        const json_t *c = json_get(sm, "content");
        if (c && c->count) snprintf(s->summary, sizeof s->summary, "%s", c->items[0]->string);
    }
    if (is_final) {
        s->complete = 1;
        s->exitcode = (int)json_get_number(j, "exitcode", -999);
    }
    json_free(j);
}

/* Answers one request per connection. */
static void serve_one(srv_t *s, int c) {
    char head[8192], *body = NULL;
    if (read_request(c, head, sizeof head, &body) != 0) return;
    pthread_mutex_lock(&s->mu);
    s->n_req++;
    char want[256], auth[300];
    b64("api:" KEY, want);
    snprintf(auth, sizeof auth, "Authorization: Basic %s\r\n", want);
    if (!strstr(head, auth)) {
        s->n_bad_auth++;
        pthread_mutex_unlock(&s->mu);
        reply(c, 401, NULL, "{\"error\":\"unauthorized\"}");
        free(body);
        return;
    }
    if (s->all_500) {
        pthread_mutex_unlock(&s->mu);
        reply(c, 500, NULL, "{}");
        free(body);
        return;
    }
    char out[16384];
    int status = 200;
    const char *extra = NULL;
    double hang = 0;
    if (!strncmp(head, "POST /graphql ", 14)) {
        if (strstr(body, "UpsertBucket")) {
            s->n_upsert++;
            if (s->n_upsert <= s->upsert_fail_first) {
                status = 500;
                snprintf(out, sizeof out, "{\"errors\":[{\"message\":\"boom\"}]}");
            } else {
                snprintf(s->upsert_body, sizeof s->upsert_body, "%s", body);
                snprintf(out, sizeof out, "{\"data\":{\"upsertBucket\":{\"bucket\":{\"id\":\"b1\","
                         "\"name\":\"x\",\"displayName\":\"x\",\"project\":{\"id\":\"p1\",\"name\":"
                         "\"proj\",\"entity\":{\"id\":\"e1\",\"name\":\"" ENTITY "\"}}},\"inserted\":true}}}");
            }
        } else if (strstr(body, "RunResumeStatus")) {
            s->n_resume++;
            char *tail = NULL, *tail_str = NULL;
            size_t tl = 0, tsl = 0;
            FILE *f = open_memstream(&tail, &tl);
            fputc('[', f);
            if (s->n_hist) json_write_string(f, s->hist[s->n_hist - 1]);
            fputc(']', f);
            fclose(f);
            f = open_memstream(&tail_str, &tsl);
            json_write_string(f, tail);
            fclose(f);
            snprintf(out, sizeof out, "{\"data\":{\"model\":{\"id\":\"p1\",\"name\":\"proj\",\"entity\":"
                     "{\"id\":\"e1\",\"name\":\"" ENTITY "\"},\"bucket\":{\"id\":\"b1\",\"name\":\"x\","
                     "\"historyLineCount\":%d,\"logLineCount\":%d,\"eventsLineCount\":0,"
                     "\"historyTail\":%s}}}}", s->n_hist, s->n_out, tail_str);
            free(tail);
            free(tail_str);
        } else if (strstr(body, "Viewer")) {
            s->n_viewer++;
            snprintf(out, sizeof out, "{\"data\":{\"viewer\":{\"id\":\"v1\",\"entity\":\"" ENTITY "\"}}}");
        } else {
            status = 400;
            snprintf(out, sizeof out, "{}");
        }
    } else if (strstr(head, "/file_stream ")) {
        s->n_fs++;
        sscanf(head, "POST %511s", s->fs_path);
        if (s->t_429 > 0 && s->t_after_429 == 0) s->t_after_429 = now_s();
        if (s->n_fs == 1 && s->fs_hang_first_s > 0) {
            hang = s->fs_hang_first_s;
        } else if (s->n_fs <= s->fs_429_first) {
            status = 429;
            extra = "Retry-After: 1\r\n";
            s->t_429 = now_s();
            s->t_after_429 = 0;
            snprintf(out, sizeof out, "{}");
        } else if (s->n_fs <= s->fs_fail_first) {
            status = 500;
            snprintf(out, sizeof out, "{}");
        } else {
            s->n_fs_seen++;
            fs_process(s, body);
            snprintf(out, sizeof out, "{\"exitcode\":null,\"limits\":{}}");
        }
    } else {
        status = 404;
        snprintf(out, sizeof out, "{}");
    }
    pthread_mutex_unlock(&s->mu);
    free(body);
    if (hang > 0) {                                /* never answer this one */
        for (double t = 0; t < hang && !atomic_load(&s->stop); t += 0.05) usleep(50000);
        return;
    }
    reply(c, status, extra, out);
}

static void *srv_main(void *arg) {
    srv_t *s = arg;
    while (!atomic_load(&s->stop)) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0) continue;
        if (!atomic_load(&s->stop)) serve_one(s, c);
        close(c);
    }
    return NULL;
}

static int srv_start(srv_t *s) {
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(s->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->fd, 16) != 0) return -1;
    getsockname(s->fd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    pthread_mutex_init(&s->mu, NULL);
    struct timeval tv = {0, 200000};             /* accept wakes up to see stop */
    setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return pthread_create(&s->th, NULL, srv_main, s);
}

static void srv_stop(srv_t *s) {
    atomic_store(&s->stop, 1);
    shutdown(s->fd, SHUT_RDWR);
    pthread_join(s->th, NULL);
    close(s->fd);
    pthread_mutex_destroy(&s->mu);
}

/* Frees what the stand-in recorded (after the checks). */
static void srv_free(srv_t *s) {
    for (int i = 0; i < s->n_hist; i++) free(s->hist[i]);
    s->n_hist = 0;
}

/* A port nothing listens on. */
static int dead_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);
    return ntohs(a.sin_port);
}

/* Non-zero if the key occurs in any file under dir (recursively). */
static int key_in_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int found = 0;
    while (!found && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) { found = key_in_tree(p); continue; }
        size_t n = 0;
        char *txt = test_read_file(p, &n);
        if (txt && memmem(txt, n, KEY, strlen(KEY))) found = 1;
        free(txt);
    }
    closedir(d);
    return found;
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void set_env(int port) {
    const char *names[] = {"WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_ID",
                           "WANDB_NAME", "WANDB_TAGS", "WANDB_RUN_GROUP", "WANDB_DIR",
                           "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                           "ALL_PROXY", "all_proxy", NULL};
    for (int i = 0; names[i]; i++) unsetenv(names[i]);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    setenv("WANDB_BASE_URL", url, 1);
    setenv("WANDB_API_KEY", KEY, 1);
}

typedef struct run_result {
    char dir[512];
    char warn[4096];
    char run_id[16];
    double close_seconds;
    int rc_close;
} run_result_t;

/* Runs steps first..last (print_every 2, epochs of 10 steps) against the service;
 * resume continues dir from resume_step. */
static void run_steps(run_result_t *r, int first, int last, bool resume, int64_t resume_step,
                      double close_timeout) {
    if (!resume) CHECK_INT(test_tmpdir(r->dir, sizeof r->dir), 0);
    char *warn = NULL, *prog = NULL;
    size_t wl = 0, pl = 0;
    FILE *wf = open_memstream(&warn, &wl), *pf = open_memstream(&prog, &pl);
    track_opts_t o;
    track_opts_init(&o);
    o.run_dir = r->dir;
    o.experiment = "exp";
    o.config_json = "{\"seed\": 3, \"train\": {\"epochs\": 2}}";
    o.print_every = 2;
    o.tensorboard = true;
    o.progress = TRACK_PROGRESS_PLAIN;
    o.progress_out = pf;
    o.warn_out = wf;
    o.wandb_mode = "online";
    o.wandb_project = "proj";
    o.wandb_tags[0] = "t1";
    o.wandb_tags[1] = "t2";
    o.n_wandb_tags = 2;
    o.wandb_group = "grp";
    o.host = "hostA";
    o.commit = "abc123";
    o.total_steps = 30;
    o.total_epochs = 3;
    o.is_resume = resume;
    o.resume_step = resume_step;
    o.wandb_timeout_s = 1.0;
    o.close_timeout_s = close_timeout;
    err_t e = {0};
    track_t *t = track_open(&o, &e);
    CHECK(t != NULL);
    if (!t) { fprintf(stderr, "%s\n", e.msg); return; }
    snprintf(r->run_id, sizeof r->run_id, "%s", track_wandb_run_id(t));
    for (int s = first; s <= last; s++) {
        track_step_t row = {.step = s, .epoch = (s - 1) / 10 + 1, .lr = 0.1, .loss = 1.0 / s,
                            .top1 = 0.5, .images_per_second = 100, .step_seconds = 0.01,
                            .compute_seconds = 0.01, .comm_exposed_seconds = 0,
                            .data_wait_seconds = 0, .loss_scale = NAN};
        CHECK_INT(track_step(t, &row, &e), 0);
        if (s % 10 == 0) {
            track_epoch_t er = {.epoch = s / 10, .step = s, .lr = 0.1, .train_loss = 0.5,
                                .train_top1 = 0.5, .val_loss = 0.25, .val_top1 = 0.75,
                                .val_top5 = 0.875, .epoch_seconds = 1, .images_per_second = 100,
                                .peak_memory_bytes = 4096};
            CHECK_INT(track_epoch(t, &er, &e), 0);
        }
    }
    track_console(t, "all steps done");
    track_summary(t, "best_val_top1", 0.75);
    double t0 = now_s();
    r->rc_close = track_close(t, 0, &e);
    r->close_seconds = now_s() - t0;
    fclose(wf);
    fclose(pf);
    snprintf(r->warn, sizeof r->warn, "%s", warn ? warn : "");
    CHECK(strstr(prog, KEY) == NULL);
    free(warn);
    free(prog);
}

/* The CSVs hold every row of steps 1..last (print_every 2) and every epoch. */
static void check_csv(const char *dir, int last) {
    char path[700];
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    char *csv = test_read_file(path, NULL);
    int lines = 0;
    for (char *p = csv; p && *p; p++) lines += *p == '\n';
    CHECK_INT(lines, 1 + last / 2);
    free(csv);
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    csv = test_read_file(path, NULL);
    lines = 0;
    for (char *p = csv; p && *p; p++) lines += *p == '\n';
    CHECK_INT(lines, 1 + last / 10);
    free(csv);
}

/* Every row arrived once, in order, and the run was completed with exit code 0. */
static void check_delivered(srv_t *s, const run_result_t *r, int rows) {
    CHECK_INT(s->n_bad_auth, 0);
    CHECK_INT(s->offset_errors, 0);
    CHECK_INT(s->step_errors, 0);
    CHECK_INT(s->n_hist, rows);
    CHECK_INT(s->complete, 1);
    CHECK_INT(s->exitcode, 0);
    CHECK_INT(s->after_complete, 0);
    char want[256];
    snprintf(want, sizeof want, "/files/" ENTITY "/proj/%s/file_stream", r->run_id);
    CHECK_STR(s->fs_path, want);
    CHECK_CONTAINS(s->summary, "\"best_val_top1\":0.75");
    CHECK_CONTAINS(s->summary, "\"val/top1\":0.75");
    CHECK_CONTAINS(s->out_last, " all steps done");
    CHECK(!key_in_tree(r->dir));
    CHECK(strstr(r->warn, KEY) == NULL);
}

static void test_clean_run(void) {
    srv_t s = {0};
    CHECK_INT(srv_start(&s), 0);
    set_env(s.port);
    run_result_t r;
    run_steps(&r, 1, 20, false, 0, 10);
    srv_stop(&s);
    CHECK_INT(r.rc_close, 0);
    check_csv(r.dir, 20);
    check_delivered(&s, &r, 10);
    CHECK_STR(r.warn, "");
    CHECK_INT(s.n_upsert, 1);
    CHECK(r.close_seconds < 5);
    /* the UpsertBucket request carries the run's description */
    json_t *j = json_parse(s.upsert_body, strlen(s.upsert_body), NULL);
    CHECK(j != NULL);
    const json_t *v = json_get(j, "variables");
    CHECK_CONTAINS(json_get_string(j, "query", ""), "upsertBucket(input:");
    CHECK_STR(json_get_string(v, "name", ""), r.run_id);
    CHECK_STR(json_get_string(v, "project", ""), "proj");
    CHECK_STR(json_get_string(v, "groupName", ""), "grp");
    CHECK_STR(json_get_string(v, "host", ""), "hostA");
    CHECK_STR(json_get_string(v, "commit", ""), "abc123");
    const char *slash = strrchr(r.dir, '/');
    CHECK_STR(json_get_string(v, "displayName", ""), slash + 1);
    CHECK(json_get(v, "entity") == NULL);
    const json_t *tags = json_get(v, "tags");
    CHECK(tags && tags->count == 2 && !strcmp(tags->items[1]->string, "t2"));
    const char *cfg = json_get_string(v, "config", "");
    CHECK_STR(cfg, "{\"seed\":{\"value\":3},\"train\":{\"value\":{\"epochs\":2}}}");
    json_free(j);
    /* history row 5 is step 10: the step row merged with the epoch row */
    json_t *row = json_parse(s.hist[4], strlen(s.hist[4]), NULL);
    CHECK_INT(json_get_number(row, "_step", -1), 10);
    CHECK_NEAR(json_get_number(row, "train/loss", -1), 0.1, 1e-12, 0);
    CHECK_NEAR(json_get_number(row, "val/top5", -1), 0.875, 0, 0);
    CHECK(json_get(row, "amp/loss_scale") == NULL);
    json_free(row);
    srv_free(&s);
}

static void test_server_errors_500(void) {
    srv_t s = {.fs_fail_first = 2};
    CHECK_INT(srv_start(&s), 0);
    set_env(s.port);
    run_result_t r;
    run_steps(&r, 1, 20, false, 0, 15);
    srv_stop(&s);
    check_csv(r.dir, 20);
    check_delivered(&s, &r, 10);
    CHECK_STR(r.warn, "");                        /* it recovered: no warning */
    CHECK_INT(s.n_fs, s.n_fs_seen + 2);           /* two requests really failed */
    srv_free(&s);
}

static void test_rate_limited_429(void) {
    srv_t s = {.fs_429_first = 1};
    CHECK_INT(srv_start(&s), 0);
    set_env(s.port);
    run_result_t r;
    run_steps(&r, 1, 20, false, 0, 15);
    srv_stop(&s);
    check_csv(r.dir, 20);
    check_delivered(&s, &r, 10);
    CHECK_STR(r.warn, "");
    CHECK(s.t_after_429 - s.t_429 >= 0.95);       /* Retry-After: 1 was honoured */
    srv_free(&s);
}

static void test_hang_past_timeout(void) {
    srv_t s = {.fs_hang_first_s = 2.5};
    CHECK_INT(srv_start(&s), 0);
    set_env(s.port);
    run_result_t r;
    double t0 = now_s();
    run_steps(&r, 1, 20, false, 0, 15);
    double took = now_s() - t0;
    srv_stop(&s);
    check_csv(r.dir, 20);
    check_delivered(&s, &r, 10);
    CHECK_STR(r.warn, "");
    CHECK(took < 12);
    srv_free(&s);
}

static void test_failure_at_start(void) {
    srv_t s = {.upsert_fail_first = 2};
    CHECK_INT(srv_start(&s), 0);
    set_env(s.port);
    run_result_t r;
    run_steps(&r, 1, 20, false, 0, 15);
    srv_stop(&s);
    check_csv(r.dir, 20);
    check_delivered(&s, &r, 10);
    CHECK_INT(s.n_upsert, 3);
    CHECK_STR(r.warn, "");
    srv_free(&s);
}

/* No server at all: the run finishes within the close bound, one warning naming the URL. */
static void test_service_down(void) {
    int port = dead_port();
    set_env(port);
    run_result_t r;
    run_steps(&r, 1, 20, false, 0, 2);
    check_csv(r.dir, 20);
    CHECK_INT(r.rc_close, 0);
    CHECK(r.close_seconds < 4.5);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    CHECK_INT(count_of(r.warn, "warning: W&B"), 1);
    CHECK_CONTAINS(r.warn, url);
    char sync[700];
    snprintf(sync, sizeof sync, "`wandb sync %s/wandb/offline-run-", r.dir);
    CHECK_CONTAINS(r.warn, sync);
    CHECK(strstr(r.warn, KEY) == NULL);
    CHECK(!key_in_tree(r.dir));
}

/* Every request fails: still one warning, and close stays bounded. */
static void test_always_500(void) {
    srv_t s = {.all_500 = true};
    CHECK_INT(srv_start(&s), 0);
    set_env(s.port);
    run_result_t r;
    run_steps(&r, 1, 20, false, 0, 2);
    srv_stop(&s);
    check_csv(r.dir, 20);
    CHECK(r.close_seconds < 4.5);
    CHECK_INT(count_of(r.warn, "warning: W&B"), 1);
    CHECK_CONTAINS(r.warn, "HTTP 500");
    CHECK(s.n_req >= 2);
    CHECK(!key_in_tree(r.dir));
    srv_free(&s);
}

/* A run crashes after step 20 with a checkpoint at 12, then resumes to 30: the CSVs are
 * trimmed and appended, W&B continues the same run id after the service's last step. */
static void test_resume_same_run(void) {
    srv_t s = {0};
    CHECK_INT(srv_start(&s), 0);
    set_env(s.port);
    run_result_t r;
    run_steps(&r, 1, 20, false, 0, 10);
    char first_id[16];
    snprintf(first_id, sizeof first_id, "%s", r.run_id);
    CHECK_INT(s.n_hist, 10);
    s.complete = 0;
    run_steps(&r, 13, 30, true, 12, 10);
    srv_stop(&s);
    CHECK_STR(r.run_id, first_id);
    CHECK_INT(s.n_resume, 1);
    CHECK_INT(s.n_viewer, 1);                    /* entity unknown: asked the viewer */
    CHECK_INT(s.n_upsert, 2);
    CHECK_INT(s.offset_errors, 0);
    CHECK_INT(s.step_errors, 0);
    CHECK_INT(s.n_hist, 15);                     /* steps 2..20, then 22..30 */
    CHECK_INT(s.hist_step[10], 22);
    CHECK_INT(s.hist_step[14], 30);
    CHECK_INT(s.complete, 1);
    check_csv(r.dir, 30);
    CHECK_STR(r.warn, "");
    CHECK(!key_in_tree(r.dir));
    srv_free(&s);
}

static void test_api_key_sources(void) {
    char dir[512], path[700], key[128];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    snprintf(path, sizeof path, "%s/netrc", dir);
    test_write_file(path, "machine other.host login a password wrong\n"
                          "machine api.example.org\n  login user\n  password k-from-netrc\n"
                          "default login d password k-default\n");
    unsetenv("WANDB_API_KEY");
    setenv("NETRC", path, 1);
    CHECK_INT(track_wandb_api_key("https://api.example.org:8443/x", key, sizeof key), 0);
    CHECK_STR(key, "k-from-netrc");
    CHECK_INT(track_wandb_api_key("https://elsewhere.org", key, sizeof key), 0);
    CHECK_STR(key, "k-default");
    setenv("WANDB_API_KEY", "k-env", 1);
    CHECK_INT(track_wandb_api_key("https://api.example.org", key, sizeof key), 0);
    CHECK_STR(key, "k-env");
    unsetenv("WANDB_API_KEY");
    test_write_file(path, "machine other.host login a password wrong\n");
    CHECK_INT(track_wandb_api_key("https://api.example.org", key, sizeof key), -1);
    /* HOME/.netrc when NETRC is unset */
    unsetenv("NETRC");
    char home[512];
    snprintf(home, sizeof home, "%s", dir);
    snprintf(path, sizeof path, "%s/.netrc", dir);
    test_write_file(path, "machine api.wandb.ai login user password k-home\n");
    const char *old_home = getenv("HOME");
    char saved[512];
    snprintf(saved, sizeof saved, "%s", old_home ? old_home : "");
    setenv("HOME", home, 1);
    CHECK_INT(track_wandb_api_key("https://api.wandb.ai", key, sizeof key), 0);
    CHECK_STR(key, "k-home");
    setenv("HOME", saved, 1);
    char host[64];
    track_url_host("http://user@127.0.0.1:8080/path", host, sizeof host);
    CHECK_STR(host, "127.0.0.1");
}

/* Online mode without any key: one warning, offline log only, no network. */
static void test_no_key_goes_offline(void) {
    set_env(dead_port());
    unsetenv("WANDB_API_KEY");
    setenv("NETRC", "/nonexistent/netrc", 1);
    char dir[512];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    char *warn = NULL;
    size_t wl = 0;
    FILE *wf = open_memstream(&warn, &wl);
    track_opts_t o;
    track_opts_init(&o);
    o.run_dir = dir;
    o.wandb_mode = "online";
    o.warn_out = wf;
    o.progress = TRACK_PROGRESS_OFF;
    err_t e = {0};
    track_t *t = track_open(&o, &e);
    CHECK(t != NULL);
    double t0 = now_s();
    track_close(t, 0, &e);
    CHECK(now_s() - t0 < 1.0);
    fclose(wf);
    CHECK_INT(count_of(warn, "warning: W&B"), 1);
    CHECK_CONTAINS(warn, "no API key");
    free(warn);
    unsetenv("NETRC");
}

/* A wrong key: the service answers 401; one warning naming the status, nothing retried
 * forever, the run finishes at once. */
static void test_wrong_key(void) {
    srv_t s = {0};
    CHECK_INT(srv_start(&s), 0);
    set_env(s.port);
    setenv("WANDB_API_KEY", "not-the-key", 1);
    run_result_t r;
    run_steps(&r, 1, 10, false, 0, 10);
    srv_stop(&s);
    check_csv(r.dir, 10);
    CHECK_INT(s.n_bad_auth, 1);                  /* refused once, not retried */
    CHECK_INT(s.n_hist, 0);
    CHECK(r.close_seconds < 1.0);
    CHECK_INT(count_of(r.warn, "warning: W&B"), 1);
    CHECK_CONTAINS(r.warn, "HTTP 401");
    CHECK(strstr(r.warn, "not-the-key") == NULL);
    srv_free(&s);
}

/* The queue is bounded: with the service down, 5000 rows are accepted without waiting,
 * at most 4096 are kept, and finish reports every row it could not deliver. */
static void test_bounded_queue(void) {
    set_env(dead_port());
    char *warn = NULL;
    size_t wl = 0;
    FILE *wf = open_memstream(&warn, &wl);
    const char *tags[1] = {"x"};
    track_wandb_opts_t o = {
        .run = {.run_id = "abcd1234", .project = "proj", .display_name = "d", .tags = tags,
                .n_tags = 1},
        .base_url = getenv("WANDB_BASE_URL"), .api_key = KEY, .timeout_s = 1,
        .warn_out = wf, .offline_hint = "wandb/offline-run-x",
    };
    err_t e = {0};
    track_wandb_t *w = track_wandb_start(&o, &e);
    CHECK(w != NULL);
    if (!w) return;
    double t0 = now_s();
    for (int i = 1; i <= 5000; i++) {
        char row[96];
        snprintf(row, sizeof row, "{\"_step\":%d,\"_runtime\":0,\"_timestamp\":0}", i);
        track_wandb_history(w, i, row);
    }
    CHECK(now_s() - t0 < 1.0);
    int64_t lost = track_wandb_finish(w, 0, 0.5);
    CHECK_INT(lost, 5000);
    CHECK(now_s() - t0 < 3.0);
    fclose(wf);
    CHECK_INT(count_of(warn, "warning: W&B"), 1);
    free(warn);
}

/* A quiet run still sends heartbeats (empty file_stream requests), then completes. */
static void test_heartbeat(void) {
    srv_t s = {0};
    CHECK_INT(srv_start(&s), 0);
    set_env(s.port);
    track_wandb_opts_t o = {
        .run = {.run_id = "hb123456", .project = "proj", .display_name = "d"},
        .base_url = getenv("WANDB_BASE_URL"), .api_key = KEY, .timeout_s = 1,
        .heartbeat_s = 0.2, .warn_out = stderr, .offline_hint = "x",
    };
    err_t e = {0};
    track_wandb_t *w = track_wandb_start(&o, &e);
    CHECK(w != NULL);
    if (!w) return;
    usleep(1100000);
    CHECK_INT(track_wandb_finish(w, 7, 5), 0);
    srv_stop(&s);
    CHECK(s.n_fs_seen >= 4);                     /* ~5 heartbeats and the final request */
    CHECK(s.n_fs_seen <= 8);
    CHECK_INT(s.n_hist, 0);
    CHECK_INT(s.complete, 1);
    CHECK_INT(s.exitcode, 7);
    CHECK_INT(s.offset_errors, 0);
    srv_free(&s);
}

int main(void) {
    TEST_RUN(test_api_key_sources);
    TEST_RUN(test_clean_run);
    TEST_RUN(test_server_errors_500);
    TEST_RUN(test_rate_limited_429);
    TEST_RUN(test_hang_past_timeout);
    TEST_RUN(test_failure_at_start);
    TEST_RUN(test_service_down);
    TEST_RUN(test_always_500);
    TEST_RUN(test_resume_same_run);
    TEST_RUN(test_no_key_goes_offline);
    TEST_RUN(test_wrong_key);
    TEST_RUN(test_bounded_queue);
    TEST_RUN(test_heartbeat);
    return test_main_end();
}
