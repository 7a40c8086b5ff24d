/* tensorboard.c: a TensorBoard event file writer (tensorboard/events.out.tfevents.<unix
 * time>.<host>): TFRecord framing (uint64 length, masked CRC-32C of the length, data,
 * masked CRC-32C of the data) around hand-encoded Event protos: first
 * {wall_time, file_version: "brain.Event:2"}, then {wall_time, step, summary: {value:
 * [{tag, simple_value}]}} for each group of scalars. Each event is flushed.
 *
 * Not here: images, histograms, graphs, hparams.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/track/track_impl.h"

/* Event fields (tensorflow/core/util/event.proto) */
enum { EV_WALL_TIME = 1, EV_STEP = 2, EV_FILE_VERSION = 3, EV_SUMMARY = 5 };
/* Summary.value = 1; Summary.Value: tag = 1, simple_value = 2 */
enum { SUM_VALUE = 1, VAL_TAG = 1, VAL_SIMPLE = 2 };

struct track_tb {
    FILE *f;
    char path[1200];
};

/* Writes one TFRecord holding data; returns 0 or -1 with e filled. */
static int tb_record(track_tb_t *tb, const tbuf_t *data, err_t *e) {
    uint8_t head[12];
    uint64_t n = data->n;
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)(n >> (8 * i));
    uint32_t lc = track_crc32c_masked(head, 8);
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(lc >> (8 * i));
    uint32_t dc = track_crc32c_masked(data->p, data->n);
    uint8_t tail[4] = {dc & 0xff, (dc >> 8) & 0xff, (dc >> 16) & 0xff, dc >> 24};
    if (data->oom) return err_set(e, ERR_RUNTIME, "%s: out of memory encoding an event", tb->path);
    if (fwrite(head, 1, 12, tb->f) != 12 || fwrite(data->p, 1, data->n, tb->f) != data->n ||
        fwrite(tail, 1, 4, tb->f) != 4 || fflush(tb->f) != 0)
        return err_errno(e, ERR_RUNTIME, "%s: cannot write", tb->path);
    return 0;
}

/* Creates the event file in dir and writes the file_version event. */
track_tb_t *track_tb_open(const char *dir, const char *host, double wall_time, err_t *e) {
    track_tb_t *tb = xcalloc(1, sizeof *tb, e);
    if (!tb) return NULL;
    snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%ld.%s", dir, (long)wall_time, host);
    tb->f = fopen(tb->path, "wb");
    if (!tb->f) {
        err_errno(e, ERR_RUNTIME, "%s: cannot create", tb->path);
        free(tb);
        return NULL;
    }
    tbuf_t ev = {0};
    pb_double(&ev, EV_WALL_TIME, wall_time);
    pb_string(&ev, EV_FILE_VERSION, "brain.Event:2");
    int rc = tb_record(tb, &ev, e);
    tbuf_free(&ev);
    if (rc != 0) {
        track_tb_close(tb);
        return NULL;
    }
    return tb;
}

/* Writes one event with the finite scalars of kv at step. */
int track_tb_scalars(track_tb_t *tb, int64_t step, double wall_time, const track_kv_t *kv,
                     int n, err_t *e) {
    tbuf_t sum = {0}, val = {0}, ev = {0};
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(kv[i].value)) continue;
        val.n = 0;
        pb_string(&val, VAL_TAG, kv[i].key);
        pb_float(&val, VAL_SIMPLE, (float)kv[i].value);
        pb_message(&sum, SUM_VALUE, &val);
        count++;
    }
    int rc = 0;
    if (count) {
        pb_double(&ev, EV_WALL_TIME, wall_time);
        pb_int(&ev, EV_STEP, step);
        pb_message(&ev, EV_SUMMARY, &sum);
        rc = tb_record(tb, &ev, e);
    }
    tbuf_free(&sum);
    tbuf_free(&val);
    tbuf_free(&ev);
    return rc;
}

const char *track_tb_path(const track_tb_t *tb) { return tb ? tb->path : ""; }

void track_tb_close(track_tb_t *tb) {
    if (!tb) return;
    if (tb->f) fclose(tb->f);
    free(tb);
}
