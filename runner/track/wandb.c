/* wandb.c: the W&B online sender. A background thread speaks the service's HTTP protocol
 * as the SDK does:
 *
 *   POST {base}/graphql  (HTTP Basic auth, user "api", password = the API key)
 *     - query Viewer (the default entity) when no entity is known and the run resumes,
 *     - query RunResumeStatus on resume (history/log line counts, last _step),
 *     - mutation UpsertBucket (run id, project, entity, display name, group, tags, config
 *       as {"key": {"value": ...}}, host, commit); the entity comes back in the answer.
 *   POST {base}/files/{entity}/{project}/{run_id}/file_stream
 *     {"files": {"wandb-history.jsonl": {"offset": N, "content": [rows]},
 *                "output.log": {...}, "wandb-summary.json": {"offset": 0, ...}}}
 *     and finally {"complete": true, "exitcode": N}.
 *
 * The training thread only appends to bounded queues (oldest history row / console line
 * dropped and counted when full; the summary coalesced) and never waits on the network.
 * Failed requests (connection errors, timeouts, 429 honouring Retry-After, 5xx) are
 * retried with exponential backoff and jitter; a batch keeps its offsets across retries,
 * so the service sees consecutive offsets without gaps or duplicates. If the service
 * stays unreachable, one warning naming the URL (never the key) is printed and the run
 * goes on; finishing waits a bounded time, then gives up.
 *
 * Not here: the offline log (wandb_offline.c), the key lookup (wandb_auth.c), artifacts.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner/track/track_impl.h"
#include "util/json.h"

enum { QUEUE_CAP = 4096, BATCH_MAX = 1000, WARN_AFTER_ATTEMPTS = 4 };

typedef struct line_q {
    char **line;
    int64_t *step;
    size_t head, n;
} line_q_t;

struct track_wandb {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* run description (copied) */
    char base[512], key[256], run_id[16], entity[256], project[256], name[256], group[256];
    char host[256], commit[128], tags[TRACK_MAX_TAGS][64], hint[1400];
    int n_tags;
    char *config_json;
    bool resume;
    double timeout_s;
    double heartbeat_s;       /* an empty file_stream request after this much silence */
    FILE *warn;
    /* queues, under mu */
    line_q_t hist, out;
    char *summary;            /* latest summary object, NULL when unchanged */
    int64_t dropped;
    bool finishing, done;
    int exit_code;
    atomic_int abort_now;     /* set by finish at its deadline: abort the transfer */
    /* sender state, thread only */
    CURL *curl;
    bool upserted, warned;
    int64_t hist_offset, out_offset, skip_through_step;
    int64_t undelivered;
    unsigned seed;
    char err_reason[256];
};

/* ---- queues ---- */

/* Appends to q, dropping (and counting) the oldest entry when full. Takes ownership. */
static void q_push(track_wandb_t *w, line_q_t *q, int64_t step, char *line) {
    if (q->n == QUEUE_CAP) {
        free(q->line[q->head]);
        q->head = (q->head + 1) % QUEUE_CAP;
        q->n--;
        w->dropped++;
    }
    size_t i = (q->head + q->n) % QUEUE_CAP;
    q->line[i] = line;
    q->step[i] = step;
    q->n++;
}

/* Moves up to max entries from q into arrays (caller frees the strings). */
static size_t q_take(line_q_t *q, char **lines, int64_t *steps, size_t max) {
    size_t k = 0;
    while (q->n && k < max) {
        lines[k] = q->line[q->head];
        if (steps) steps[k] = q->step[q->head];
        k++;
        q->head = (q->head + 1) % QUEUE_CAP;
        q->n--;
    }
    return k;
}

static void notify(track_wandb_t *w) { pthread_cond_signal(&w->cv); }

void track_wandb_history(track_wandb_t *w, int64_t step, const char *row) {
    char *copy = strdup(row);
    if (!copy) return;
    pthread_mutex_lock(&w->mu);
    q_push(w, &w->hist, step, copy);
    notify(w);
    pthread_mutex_unlock(&w->mu);
}

void track_wandb_output(track_wandb_t *w, const char *line) {
    char ts[40], *copy = NULL;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    if (asprintf(&copy, "%s.%06ld %s", ts, now.tv_nsec / 1000, line) < 0) return;
    pthread_mutex_lock(&w->mu);
    q_push(w, &w->out, 0, copy);
    notify(w);
    pthread_mutex_unlock(&w->mu);
}

void track_wandb_summary(track_wandb_t *w, const char *obj) {
    char *copy = strdup(obj);
    if (!copy) return;
    pthread_mutex_lock(&w->mu);
    free(w->summary);
    w->summary = copy;
    notify(w);
    pthread_mutex_unlock(&w->mu);
}

/* ---- HTTP ---- */

typedef struct http_resp {
    long status;
    double retry_after;       /* seconds from Retry-After, < 0 when absent */
    tbuf_t body;
} http_resp_t;

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
    http_resp_t *r = ud;
    if (r->body.n < TRACK_HTTP_MAX_BODY) tbuf_put(&r->body, p, size * n);
    return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
    http_resp_t *r = ud;
    double v;
    if (track_http_retry_after(p, size * n, &v) == 0) r->retry_after = v;
    return size * n;
}

/* Aborts a transfer once finish has given up (bounded close time). */
static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    (void)a; (void)b; (void)c; (void)d;
    track_wandb_t *w = ud;
    return atomic_load(&w->abort_now) ? 1 : 0;
}

/* POSTs a JSON body to url. Returns 0 when a response arrived (any status, in r->status),
 * -1 on a transport error (reason in w->err_reason). */
static int http_post(track_wandb_t *w, const char *url, const char *body, http_resp_t *r) {
    memset(r, 0, sizeof *r);
    r->retry_after = -1;
    CURL *c = w->curl;
    curl_easy_reset(c);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, "User-Agent: runner-track/1 (W&B file_stream)");
    h = curl_slist_append(h, "Expect:");          /* no 100-continue round trip */
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERNAME, "api");
    curl_easy_setopt(c, CURLOPT_PASSWORD, w->key);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    long ms = (long)(w->timeout_s * 1000);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, w);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(h);
    if (rc != CURLE_OK) {
        snprintf(w->err_reason, sizeof w->err_reason, "%s", curl_easy_strerror(rc));
        tbuf_free(&r->body);
        return -1;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    tbuf_put(&r->body, "", 1);                    /* NUL-terminate */
    return 0;
}

/* Prints the one "service unreachable" warning of the run. */
static void warn_once(track_wandb_t *w, const char *why) {
    if (w->warned) return;
    w->warned = true;
    char dir[1400];
    snprintf(dir, sizeof dir, "%s", w->hint);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;                        /* wandb sync takes the run's directory */
    fprintf(w->warn, "warning: W&B: cannot reach %s (%s); training goes on and every metric "
            "is kept in steps.csv, metrics.csv and the offline log %s (upload it later with "
            "`wandb sync %s`)\n", w->base, why, w->hint, dir);
    fflush(w->warn);
}

/* Sleeps up to s seconds, waking early when finish aborts. Returns -1 if aborted. */
static int nap(track_wandb_t *w, double s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = ts.tv_sec + ts.tv_nsec * 1e-9 + s;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->abort_now)) {
        if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) != 0) break;
    }
    pthread_mutex_unlock(&w->mu);
    return atomic_load(&w->abort_now) ? -1 : 0;
}

/* POSTs body to url until a 2xx answer, retrying connection errors, timeouts, 429 and
 * 5xx with exponential backoff and jitter. Returns 0 (r filled, caller frees r->body),
 * 1 for a non-retryable answer (4xx), -1 when aborted. */
static int post_retry(track_wandb_t *w, const char *url, const char *body, http_resp_t *r) {
    for (int attempt = 0;; attempt++) {
        double wait = fmin(0.5 * pow(2.0, attempt < 10 ? attempt : 10), 30.0);
        wait *= 0.5 + (double)rand_r(&w->seed) / ((double)RAND_MAX + 1.0);
        if (http_post(w, url, body, r) == 0) {
            if (r->status >= 200 && r->status < 300) return 0;
            if (r->status != 429 && r->status < 500) {
                snprintf(w->err_reason, sizeof w->err_reason, "HTTP %ld from %s", r->status, url);
                tbuf_free(&r->body);
                return 1;
            }
            snprintf(w->err_reason, sizeof w->err_reason, "HTTP %ld", r->status);
            if (r->status == 429 && r->retry_after >= 0) wait = fmin(r->retry_after, 60.0);
            tbuf_free(&r->body);
        }
        if (atomic_load(&w->abort_now)) return -1;
        if (attempt + 1 >= WARN_AFTER_ATTEMPTS) warn_once(w, w->err_reason);
        if (nap(w, wait) != 0) return -1;
    }
}

/* Builds a GraphQL request body {"query": q, "variables": {...}} via a callback. */
static char *gql_body(const char *query, void (*vars)(jw_t *, const track_wandb_t *),
                      const track_wandb_t *w) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    jw_t j;
    jw_init(&j, f, false);
    jw_obj_begin(&j);
    jw_kstr(&j, "query", query);
    jw_key(&j, "variables");
    jw_obj_begin(&j);
    if (vars) vars(&j, w);
    jw_obj_end(&j);
    jw_obj_end(&j);
    fclose(f);
    return buf;
}

static const char *Q_VIEWER = "query Viewer { viewer { id entity } }";
static const char *Q_RESUME =
    "query RunResumeStatus($project: String, $entity: String, $name: String!) { "
    "model(name: $project, entityName: $entity) { id name entity { id name } "
    "bucket(name: $name, missingOk: true) { id name historyLineCount logLineCount "
    "eventsLineCount historyTail summaryMetrics config } } }";
static const char *Q_UPSERT =
    "mutation UpsertBucket($id: String, $name: String, $project: String, $entity: String, "
    "$groupName: String, $displayName: String, $commit: String, $config: JSONString, "
    "$host: String, $tags: [String!]) { upsertBucket(input: {id: $id, name: $name, "
    "modelName: $project, entityName: $entity, groupName: $groupName, displayName: "
    "$displayName, commit: $commit, config: $config, host: $host, tags: $tags}) { "
    "bucket { id name displayName project { id name entity { id name } } } inserted } }";

static void vars_resume(jw_t *j, const track_wandb_t *w) {
    jw_kstr(j, "project", w->project);
    jw_kstr(j, "entity", w->entity);
    jw_kstr(j, "name", w->run_id);
}

/* The config as the service stores it: {"key": {"value": ...}} for each top-level key. */
static char *wrap_config(const char *config_json) {
    if (!config_json) return NULL;
    json_t *root = json_parse(config_json, strlen(config_json), NULL);
    if (!root || root->type != JSON_OBJECT) { json_free(root); return NULL; }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) { json_free(root); return NULL; }
    fputc('{', f);
    for (size_t i = 0; i < root->count; i++) {
        if (i) fputc(',', f);
        json_write_string(f, root->keys[i]);
        fputs(":{\"value\":", f);
        track_json_dump(f, root->items[i]);
        fputc('}', f);
    }
    fputc('}', f);
    fclose(f);
    json_free(root);
    return buf;
}

static void vars_upsert(jw_t *j, const track_wandb_t *w) {
    jw_kstr(j, "name", w->run_id);
    jw_kstr(j, "project", w->project);
    if (*w->entity) jw_kstr(j, "entity", w->entity);
    jw_kstr(j, "displayName", w->name);
    if (*w->group) jw_kstr(j, "groupName", w->group);
    if (*w->host) jw_kstr(j, "host", w->host);
    if (*w->commit) jw_kstr(j, "commit", w->commit);
    jw_key(j, "tags");
    jw_arr_begin(j);
    for (int i = 0; i < w->n_tags; i++) jw_str(j, w->tags[i]);
    jw_arr_end(j);
    char *cfg = wrap_config(w->config_json);
    if (cfg) jw_kstr(j, "config", cfg);
    free(cfg);
}

/* Runs one GraphQL request with retries; returns the answer's body (caller frees) or NULL. */
static char *gql(track_wandb_t *w, const char *query, void (*vars)(jw_t *, const track_wandb_t *),
                 size_t *len) {
    char url[600];
    snprintf(url, sizeof url, "%s/graphql", w->base);
    char *body = gql_body(query, vars, w);
    if (!body) return NULL;
    http_resp_t r;
    int rc = post_retry(w, url, body, &r);
    free(body);
    if (rc != 0) return NULL;
    *len = r.body.n ? r.body.n - 1 : 0;
    return (char *)r.body.p;
}

/* Viewer (entity), resume status (offsets), UpsertBucket. Returns 0, 1 for a refusal
 * that will not change (warned), -1 when aborted. */
static int start_run(track_wandb_t *w) {
    char *a;
    size_t n;
    int rc = 0;
    if (w->resume && !*w->entity) {
        if (!(a = gql(w, Q_VIEWER, NULL, &n))) return atomic_load(&w->abort_now) ? -1 : 1;
        rc = track_wandb_parse_viewer(a, n, w->entity, sizeof w->entity);
        free(a);
    }
    if (!rc && w->resume) {
        if (!(a = gql(w, Q_RESUME, vars_resume, &n))) return atomic_load(&w->abort_now) ? -1 : 1;
        rc = track_wandb_parse_resume(a, n, &w->hist_offset, &w->out_offset, &w->skip_through_step);
        free(a);
    }
    bool refused = false;
    if (!rc) {
        if (!(a = gql(w, Q_UPSERT, vars_upsert, &n))) return atomic_load(&w->abort_now) ? -1 : 1;
        rc = track_wandb_parse_upsert(a, n, w->entity, sizeof w->entity, &refused);
        free(a);
    }
    if (rc) {
        snprintf(w->err_reason, sizeof w->err_reason, "unreadable answer from %.200s/graphql", w->base);
        return 1;
    }
    if (refused || !*w->entity) {
        snprintf(w->err_reason, sizeof w->err_reason, "UpsertBucket was refused%s",
                 refused ? "" : " (no entity in the answer)");
        return 1;
    }
    return 0;
}

/* Writes one file_stream file entry {"offset": off, "content": [lines]}. */
static void fs_file(jw_t *j, const char *name, int64_t off, char **lines, size_t n) {
    jw_key(j, name);
    jw_obj_begin(j);
    jw_kint(j, "offset", off);
    jw_key(j, "content");
    jw_arr_begin(j);
    for (size_t i = 0; i < n; i++) jw_str(j, lines[i]);
    jw_arr_end(j);
    jw_obj_end(j);
}

/* The sender thread: start the run, then drain the queues in batches until finish. */
static void *sender_main(void *arg) {
    track_wandb_t *w = arg;
    char url[1200];
    char **hl = malloc(sizeof(char *) * BATCH_MAX), **ol = malloc(sizeof(char *) * BATCH_MAX);
    int64_t *hs = malloc(sizeof(int64_t) * BATCH_MAX);
    bool ok = hl && ol && hs;
    int rc = ok ? start_run(w) : 1;
    if (rc == 1 && ok) warn_once(w, w->err_reason);
    ok = ok && rc == 0;
    snprintf(url, sizeof url, "%s/files/%s/%s/%s/file_stream", w->base, w->entity, w->project,
             w->run_id);
    bool final_sent = false;
    while (ok && !final_sent) {
        /* wait for data; after heartbeat_s of silence send an empty request, as the SDK
         * does, so that the service does not take a slow run for a crashed one */
        bool heartbeat = false;
        struct timespec hb;
        clock_gettime(CLOCK_REALTIME, &hb);
        double hb_at = hb.tv_sec + hb.tv_nsec * 1e-9 + w->heartbeat_s;
        hb.tv_sec = (time_t)hb_at;
        hb.tv_nsec = (long)((hb_at - (double)hb.tv_sec) * 1e9);
        pthread_mutex_lock(&w->mu);
        while (!w->finishing && !w->hist.n && !w->out.n && !w->summary && !heartbeat)
            if (pthread_cond_timedwait(&w->cv, &w->mu, &hb) != 0) heartbeat = true;
        size_t nh = q_take(&w->hist, hl, hs, BATCH_MAX);
        size_t no = q_take(&w->out, ol, NULL, BATCH_MAX);
        char *sum = w->summary;
        w->summary = NULL;
        int64_t dropped = w->dropped;
        bool final = w->finishing && !w->hist.n && !w->out.n && !w->summary;
        int exit_code = w->exit_code;
        pthread_mutex_unlock(&w->mu);

        size_t keep = 0;                           /* rows the service already has */
        for (size_t i = 0; i < nh; i++) {
            if (hs[i] <= w->skip_through_step) free(hl[i]);
            else hl[keep++] = hl[i];
        }
        nh = keep;
        char *body = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&body, &len);
        if (f) {
            jw_t j;
            jw_init(&j, f, false);
            jw_obj_begin(&j);
            jw_key(&j, "files");
            jw_obj_begin(&j);
            if (nh) fs_file(&j, "wandb-history.jsonl", w->hist_offset, hl, nh);
            if (no) fs_file(&j, "output.log", w->out_offset, ol, no);
            if (sum) fs_file(&j, "wandb-summary.json", 0, &sum, 1);
            jw_obj_end(&j);
            if (dropped) jw_kint(&j, "dropped", dropped);
            if (final) {
                jw_kbool(&j, "complete", true);
                jw_kint(&j, "exitcode", exit_code);
            }
            jw_obj_end(&j);
            fclose(f);
        }
        http_resp_t r = {0};
        bool post = body && (nh || no || sum || final || heartbeat);
        int sent = post ? post_retry(w, url, body, &r) : 0;
        free(body);
        if (post && sent == 0) tbuf_free(&r.body);
        if (!body && (nh || no)) sent = -2;       /* out of memory building the request */
        if (sent == 0) {
            w->hist_offset += (int64_t)nh;
            w->out_offset += (int64_t)no;
            final_sent = final;
        } else {
            w->undelivered += (int64_t)nh;
            if (sent == 1) warn_once(w, w->err_reason);
            if (sent == -1) ok = false;
        }
        for (size_t i = 0; i < nh; i++) free(hl[i]);
        for (size_t i = 0; i < no; i++) free(ol[i]);
        free(sum);
        if (sent == 1 && final) final_sent = true;
    }
    free(hl);
    free(ol);
    free(hs);
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Copies the options and starts the thread; see track_impl.h. */
track_wandb_t *track_wandb_start(const track_wandb_opts_t *o, err_t *e) {
    track_wandb_t *w = xcalloc(1, sizeof *w, e);
    if (!w) return NULL;
    const track_wrun_t *run = &o->run;
    snprintf(w->base, sizeof w->base, "%s", o->base_url);
    size_t bl = strlen(w->base);
    while (bl && w->base[bl - 1] == '/') w->base[--bl] = 0;
    snprintf(w->key, sizeof w->key, "%s", o->api_key);
    snprintf(w->run_id, sizeof w->run_id, "%s", run->run_id);
    snprintf(w->entity, sizeof w->entity, "%s", run->entity ? run->entity : "");
    snprintf(w->project, sizeof w->project, "%s", run->project ? run->project : "uncategorized");
    snprintf(w->name, sizeof w->name, "%s", run->display_name ? run->display_name : run->run_id);
    snprintf(w->group, sizeof w->group, "%s", run->group ? run->group : "");
    snprintf(w->host, sizeof w->host, "%s", run->host ? run->host : "");
    snprintf(w->commit, sizeof w->commit, "%s", run->commit ? run->commit : "");
    snprintf(w->hint, sizeof w->hint, "%s", o->offline_hint ? o->offline_hint : "");
    for (int i = 0; i < run->n_tags && i < TRACK_MAX_TAGS; i++)
        snprintf(w->tags[w->n_tags++], sizeof w->tags[0], "%s", run->tags[i]);
    w->config_json = run->config_json ? strdup(run->config_json) : NULL;
    w->resume = o->resume;
    w->timeout_s = o->timeout_s > 0 ? o->timeout_s : 10.0;
    w->heartbeat_s = o->heartbeat_s > 0 ? o->heartbeat_s : 30.0;
    w->warn = o->warn_out ? o->warn_out : stderr;
    w->skip_through_step = -1;
    w->seed = (unsigned)(track_now_wall() * 1e6) ^ (unsigned)(uintptr_t)w;
    w->hist.line = calloc(QUEUE_CAP, sizeof(char *));
    w->hist.step = calloc(QUEUE_CAP, sizeof(int64_t));
    w->out.line = calloc(QUEUE_CAP, sizeof(char *));
    w->out.step = calloc(QUEUE_CAP, sizeof(int64_t));
    curl_global_init(CURL_GLOBAL_DEFAULT);
    w->curl = curl_easy_init();
    if (!w->hist.line || !w->hist.step || !w->out.line || !w->out.step || !w->curl) {
        err_set(e, ERR_RUNTIME, "W&B sender: out of memory");
        goto fail;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, sender_main, w) != 0) {
        err_set(e, ERR_RUNTIME, "W&B sender: cannot start a thread");
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        goto fail;
    }
    return w;
fail:
    if (w->curl) curl_easy_cleanup(w->curl);
    free(w->hist.line); free(w->hist.step); free(w->out.line); free(w->out.step);
    free(w->config_json);
    memset(w->key, 0, sizeof w->key);
    free(w);
    return NULL;
}

/* Asks the thread to send what is queued and the final request, waits at most timeout_s,
 * then aborts it; frees everything. Returns the rows not delivered. */
int64_t track_wandb_finish(track_wandb_t *w, int exit_code, double timeout_s) {
    if (!w) return 0;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    double t = dl.tv_sec + dl.tv_nsec * 1e-9 + (timeout_s > 0 ? timeout_s : 10.0);
    dl.tv_sec = (time_t)t;
    dl.tv_nsec = (long)((t - (double)dl.tv_sec) * 1e9);
    pthread_mutex_lock(&w->mu);
    w->finishing = true;
    w->exit_code = exit_code;
    pthread_cond_broadcast(&w->cv);
    while (!w->done)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) != 0) break;
    bool done = w->done;
    int64_t left = (int64_t)w->hist.n;
    pthread_mutex_unlock(&w->mu);
    if (!done) {
        atomic_store(&w->abort_now, 1);
        pthread_mutex_lock(&w->mu);
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    pthread_join(w->thread, NULL);
    if (!done || w->undelivered || left)
        warn_once(w, *w->err_reason ? w->err_reason : "timed out finishing the upload");
    int64_t lost = w->undelivered + left + w->dropped;
    for (size_t i = 0; i < w->hist.n; i++) free(w->hist.line[(w->hist.head + i) % QUEUE_CAP]);
    for (size_t i = 0; i < w->out.n; i++) free(w->out.line[(w->out.head + i) % QUEUE_CAP]);
    free(w->hist.line); free(w->hist.step); free(w->out.line); free(w->out.step);
    free(w->summary);
    free(w->config_json);
    curl_easy_cleanup(w->curl);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    memset(w->key, 0, sizeof w->key);
    free(w);
    return lost;
}
