/* wandb_offline.c: the W&B offline transaction log, wandb/offline-run-YYYYMMDD_HHMMSS-<id>/
 * run-<id>.wandb, in the SDK's "datastore" format so that `wandb sync <dir>` uploads it:
 *
 *   file header: ":W&B", magic 0xBEE1 (uint16 LE), version 0 (7 bytes, part of block 0)
 *   32 KiB blocks of chunks: CRC-32 (zlib/IEEE, uint32 LE, over the type byte then the
 *   payload), length (uint16 LE), type (1 FULL, 2 FIRST, 3 MIDDLE, 4 LAST), payload;
 *   a block tail shorter than a chunk header (7 bytes) is zero padding.
 *
 * Each chunk sequence carries one protobuf wandb_internal.Record, hand-encoded: num (1),
 * history (2), summary (3), output (4), config (5), run (17), exit (18), final (20),
 * header (21). Every record is flushed as written, so a crash loses at most one record.
 *
 * Not here: artifacts, files, system stats, telemetry.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "runner/track/track_impl.h"
#include "util/json.h"

enum { BLOCK = 32768, CHUNK_HDR = 7 };
enum { CH_FULL = 1, CH_FIRST = 2, CH_MIDDLE = 3, CH_LAST = 4 };
/* Record fields */
enum { R_NUM = 1, R_HISTORY = 2, R_SUMMARY = 3, R_OUTPUT = 4, R_CONFIG = 5, R_RUN = 17,
       R_EXIT = 18, R_FINAL = 20, R_HEADER = 21 };
/* RunRecord fields */
enum { RUN_ID = 1, RUN_ENTITY = 2, RUN_PROJECT = 3, RUN_CONFIG = 4, RUN_GROUP = 6,
       RUN_DISPLAY_NAME = 8, RUN_TAGS = 10, RUN_HOST = 13, RUN_STARTING_STEP = 14,
       RUN_START_TIME = 17, RUN_RESUMED = 18, RUN_GIT = 21 };

struct track_wlog {
    FILE *f;
    size_t pos;               /* bytes written so far (the file offset) */
    int64_t num;              /* last record number */
    char path[1400];
};

/* Appends one chunk (header + payload) to out. */
static void put_chunk(tbuf_t *out, int type, const uint8_t *data, size_t n) {
    uint8_t t = (uint8_t)type;
    uint32_t crc = (uint32_t)crc32(0L, &t, 1);
    crc = (uint32_t)crc32(crc, data, (uInt)n);
    uint8_t h[CHUNK_HDR] = {crc & 0xff, (crc >> 8) & 0xff, (crc >> 16) & 0xff, crc >> 24,
                            n & 0xff, (n >> 8) & 0xff, t};
    tbuf_put(out, h, CHUNK_HDR);
    tbuf_put(out, data, n);
}

/* Frames data as FULL or FIRST, MIDDLE..., LAST chunks starting at file offset *pos, padding
 * a block tail that cannot hold a chunk header; advances *pos. */
void track_wlog_frame(tbuf_t *out, size_t *pos, const uint8_t *data, size_t n) {
    size_t start = out->n;
    size_t left = BLOCK - *pos % BLOCK;
    if (left < CHUNK_HDR) {
        static const uint8_t zeros[CHUNK_HDR] = {0};
        tbuf_put(out, zeros, left);
        left = BLOCK;
    }
    if (n + CHUNK_HDR <= left) {
        put_chunk(out, CH_FULL, data, n);
    } else {
        size_t room = left - CHUNK_HDR, used = room;
        put_chunk(out, CH_FIRST, data, room);
        while (n - used > BLOCK - CHUNK_HDR) {
            put_chunk(out, CH_MIDDLE, data + used, BLOCK - CHUNK_HDR);
            used += BLOCK - CHUNK_HDR;
        }
        put_chunk(out, CH_LAST, data + used, n - used);
    }
    *pos += out->n - start;
}

/* Numbers, frames, writes and flushes one Record whose body (fields other than num) is
 * in body. */
static int write_record(track_wlog_t *w, const tbuf_t *body, err_t *e) {
    tbuf_t rec = {0}, framed = {0};
    pb_int(&rec, R_NUM, ++w->num);
    tbuf_put(&rec, body->p, body->n);
    track_wlog_frame(&framed, &w->pos, rec.p, rec.n);
    int rc = 0;
    if (rec.oom || framed.oom || body->oom)
        rc = err_set(e, ERR_RUNTIME, "%s: out of memory encoding a record", w->path);
    else if (fwrite(framed.p, 1, framed.n, w->f) != framed.n || fflush(w->f) != 0)
        rc = err_errno(e, ERR_RUNTIME, "%s: cannot write", w->path);
    tbuf_free(&rec);
    tbuf_free(&framed);
    return rc;
}

/* Encodes a ConfigRecord with one item per top-level key of config_json. */
static void encode_config(tbuf_t *cfg, const char *config_json) {
    if (!config_json) return;
    json_t *root = json_parse(config_json, strlen(config_json), NULL);
    if (!root) return;
    if (root->type == JSON_OBJECT) {
        for (size_t i = 0; i < root->count; i++) {
            char *txt = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&txt, &len);
            if (!f) break;
            track_json_dump(f, root->items[i]);
            fclose(f);
            tbuf_t item = {0};
            pb_string(&item, 1, root->keys[i]);
            pb_string(&item, 16, txt);
            pb_message(cfg, 1, &item);
            tbuf_free(&item);
            free(txt);
        }
    }
    json_free(root);
}

/* Creates the offline run directory and file; writes header, run and config records. */
track_wlog_t *track_wlog_open(const char *wandb_dir, const track_wrun_t *run, err_t *e) {
    track_wlog_t *w = xcalloc(1, sizeof *w, e);
    if (!w) return NULL;
    /* a log is never overwritten: a second process of the same run within the same
     * second (a quick resume) takes the next free second in its directory name */
    time_t now = (time_t)run->start_time;
    for (int tries = 0; tries < 100; tries++, now++) {
        struct tm tm;
        gmtime_r(&now, &tm);
        char ts[32];
        strftime(ts, sizeof ts, "%Y%m%d_%H%M%S", &tm);
        char dir[1300];
        snprintf(dir, sizeof dir, "%s/offline-run-%s-%s", wandb_dir, ts, run->run_id);
        mkdir(dir, 0755);
        snprintf(w->path, sizeof w->path, "%s/run-%s.wandb", dir, run->run_id);
        w->f = fopen(w->path, "wbx");
        if (w->f || errno != EEXIST) break;
    }
    if (!w->f) {
        err_errno(e, ERR_RUNTIME, "%s: cannot create the W&B offline log", w->path);
        free(w);
        return NULL;
    }
    static const uint8_t header[CHUNK_HDR] = {':', 'W', '&', 'B', 0xE1, 0xBE, 0};
    if (fwrite(header, 1, CHUNK_HDR, w->f) != CHUNK_HDR) {
        err_errno(e, ERR_RUNTIME, "%s: cannot write", w->path);
        track_wlog_close(w);
        return NULL;
    }
    w->pos = CHUNK_HDR;

    tbuf_t body = {0}, msg = {0}, sub = {0}, cfg = {0};
    pb_bytes(&body, R_HEADER, "", 0);
    int rc = write_record(w, &body, e);

    encode_config(&cfg, run->config_json);
    body.n = 0;
    pb_string(&msg, RUN_ID, run->run_id);
    pb_string(&msg, RUN_ENTITY, run->entity);
    pb_string(&msg, RUN_PROJECT, run->project);
    if (cfg.n) pb_message(&msg, RUN_CONFIG, &cfg);
    pb_string(&msg, RUN_GROUP, run->group);
    pb_string(&msg, RUN_DISPLAY_NAME, run->display_name);
    for (int i = 0; i < run->n_tags; i++) pb_string(&msg, RUN_TAGS, run->tags[i]);
    pb_string(&msg, RUN_HOST, run->host);
    pb_int(&msg, RUN_STARTING_STEP, run->starting_step);
    pb_int(&sub, 1, (int64_t)run->start_time);                       /* Timestamp.seconds */
    pb_int(&sub, 2, (int64_t)((run->start_time - (double)(int64_t)run->start_time) * 1e9));
    pb_message(&msg, RUN_START_TIME, &sub);
    pb_int(&msg, RUN_RESUMED, run->resumed ? 1 : 0);
    if (run->commit) {
        sub.n = 0;
        pb_string(&sub, 2, run->commit);                            /* GitRepoRecord.commit */
        pb_message(&msg, RUN_GIT, &sub);
    }
    pb_message(&body, R_RUN, &msg);
    if (rc == 0) rc = write_record(w, &body, e);
    if (rc == 0 && cfg.n) {
        body.n = 0;
        pb_message(&body, R_CONFIG, &cfg);
        rc = write_record(w, &body, e);
    }
    tbuf_free(&body);
    tbuf_free(&msg);
    tbuf_free(&sub);
    tbuf_free(&cfg);
    if (rc != 0) {
        track_wlog_close(w);
        return NULL;
    }
    return w;
}

/* Appends a {key, value_json} item (HistoryItem / SummaryItem share the layout). */
static void put_item(tbuf_t *msg, int field, const char *key, const char *value_json) {
    tbuf_t item = {0};
    pb_string(&item, 1, key);
    pb_string(&item, 16, value_json);
    pb_message(msg, field, &item);
    tbuf_free(&item);
}

/* Writes a HistoryRecord: _step, _runtime, _timestamp and the finite values of kv. */
int track_wlog_history(track_wlog_t *w, int64_t step, double runtime, double timestamp,
                       const track_kv_t *kv, int n, err_t *e) {
    tbuf_t msg = {0}, body = {0}, st = {0};
    char v[64];
    snprintf(v, sizeof v, "%lld", (long long)step);
    put_item(&msg, 1, "_step", v);
    snprintf(v, sizeof v, "%.6f", runtime);
    put_item(&msg, 1, "_runtime", v);
    snprintf(v, sizeof v, "%.6f", timestamp);
    put_item(&msg, 1, "_timestamp", v);
    for (int i = 0; i < n; i++) {
        if (kv[i].value != kv[i].value) continue;                       /* NaN */
        snprintf(v, sizeof v, "%.17g", kv[i].value);
        put_item(&msg, 1, kv[i].key, v);
    }
    pb_int(&st, 1, step);
    pb_message(&msg, 2, &st);
    pb_message(&body, R_HISTORY, &msg);
    int rc = write_record(w, &body, e);
    tbuf_free(&msg);
    tbuf_free(&body);
    tbuf_free(&st);
    return rc;
}

/* Writes one SummaryRecord updating n keys. */
int track_wlog_summary_items(track_wlog_t *w, const char *const *keys,
                             const char *const *values, int n, err_t *e) {
    tbuf_t msg = {0}, body = {0};
    for (int i = 0; i < n; i++) put_item(&msg, 1, keys[i], values[i]);
    pb_message(&body, R_SUMMARY, &msg);
    int rc = write_record(w, &body, e);
    tbuf_free(&msg);
    tbuf_free(&body);
    return rc;
}

int track_wlog_summary(track_wlog_t *w, const char *key, const char *value_json, err_t *e) {
    return track_wlog_summary_items(w, &key, &value_json, 1, e);
}

/* Writes an OutputRecord (stdout) with the line and a trailing newline. */
int track_wlog_output(track_wlog_t *w, const char *line, double timestamp, err_t *e) {
    tbuf_t msg = {0}, body = {0}, ts = {0};
    pb_int(&msg, 1, 1);                                                 /* STDOUT */
    pb_int(&ts, 1, (int64_t)timestamp);
    pb_int(&ts, 2, (int64_t)((timestamp - (double)(int64_t)timestamp) * 1e9));
    pb_message(&msg, 2, &ts);
    size_t n = strlen(line);
    char *l = malloc(n + 2);
    if (l) {
        memcpy(l, line, n);
        l[n] = '\n';
        l[n + 1] = 0;
        pb_string(&msg, 3, l);
        free(l);
    }
    pb_message(&body, R_OUTPUT, &msg);
    int rc = write_record(w, &body, e);
    tbuf_free(&msg);
    tbuf_free(&body);
    tbuf_free(&ts);
    return rc;
}

/* Writes the RunExitRecord and the FinalRecord. */
int track_wlog_exit(track_wlog_t *w, int exit_code, double runtime, err_t *e) {
    tbuf_t msg = {0}, body = {0};
    pb_int(&msg, 1, exit_code);
    pb_int(&msg, 2, (int64_t)runtime);
    pb_message(&body, R_EXIT, &msg);
    int rc = write_record(w, &body, e);
    body.n = 0;
    pb_bytes(&body, R_FINAL, "", 0);
    if (rc == 0) rc = write_record(w, &body, e);
    tbuf_free(&msg);
    tbuf_free(&body);
    return rc;
}

const char *track_wlog_path(const track_wlog_t *w) { return w ? w->path : ""; }

void track_wlog_close(track_wlog_t *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    free(w);
}
