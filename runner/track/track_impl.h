/* track_impl.h: the sinks behind the metrics bus (private to runner/track/).
 *
 * Each sink is a small object with open/write/close functions; track.c owns them and
 * decides what goes where. A metric row travels as a list of (key, value) pairs.
 * Nothing here is part of the public API; tests may include it to drive the encoders
 * (CRCs, protobuf) directly.
 */
#ifndef RUNNER_TRACK_IMPL_H
#define RUNNER_TRACK_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runner/track/track.h"
#include "util/clock.h"
#include "util/err.h"

enum { TRACK_MAX_KV = 32 };

/* One scalar of a history row; NaN values are skipped by every sink. */
typedef struct track_kv {
    const char *key;
    double value;
} track_kv_t;

/* ---- checksums ---- */
uint32_t track_crc32c(uint32_t crc, const void *data, size_t n);   /* Castagnoli */
uint32_t track_crc32c_masked(const void *data, size_t n);          /* TFRecord mask */

/* ---- small growable byte buffer (protobuf encoding, request bodies) ---- */
typedef struct tbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;                 /* an allocation failed; contents are truncated */
} tbuf_t;

void tbuf_put(tbuf_t *b, const void *data, size_t n);
void tbuf_free(tbuf_t *b);
/* protobuf wire format */
void pb_varint(tbuf_t *b, uint64_t v);
void pb_tag(tbuf_t *b, int field, int wire);
void pb_bytes(tbuf_t *b, int field, const void *data, size_t n);
void pb_string(tbuf_t *b, int field, const char *s);     /* skipped when s is NULL/"" */
void pb_int(tbuf_t *b, int field, int64_t v);            /* varint, skipped when 0 */
void pb_float(tbuf_t *b, int field, float v);            /* fixed32 */
void pb_double(tbuf_t *b, int field, double v);          /* fixed64 */
void pb_message(tbuf_t *b, int field, const tbuf_t *m);

/* ---- CSV (csv.c) ---- */
typedef struct track_csv {
    int fd;                   /* valid while open */
    bool open;
    int64_t len;              /* bytes of complete rows in the file */
    char path[1100];
} track_csv_t;

/* Opens path for appending rows under header. Fresh runs (resume == false) create or
 * replace the file. On resume an existing file must start with header; rows whose step
 * column (step_col) is > resume_step are removed, then rows are appended. */
int track_csv_open(track_csv_t *c, const char *path, const char *header, int step_col,
                   bool resume, int64_t resume_step, err_t *e);
/* Writes one row of n cells; NaN cells are empty. int_mask bit i: cell i is an integer.
 * The row goes to the file with one write(2), so a killed run leaves whole rows; when the
 * write fails part-way (a full disk) the file is cut back to the rows before it, so it
 * never holds a torn row, and the error names the file. */
int track_csv_row(track_csv_t *c, const double *cells, int n, uint32_t int_mask, err_t *e);
/* fsync: the rows so far survive a crash of the machine (track.c calls it with each
 * metrics row, just before the epoch's checkpoint). */
int track_csv_sync(track_csv_t *c, err_t *e);
void track_csv_close(track_csv_t *c);
/* The resume scan of an existing file f: checks the header and sets *keep to the bytes to
 * keep (header + rows with step <= resume_step, complete lines only). 0 / -1 (ERR_INPUT). */
int track_csv_scan(const char *path, FILE *f, const char *header, int step_col,
                   int64_t resume_step, long *keep, err_t *e);

/* ---- progress (progress.c) ---- */
typedef struct track_progress_sink {
    FILE *out;
    bool tty;                 /* redraw one line with \r */
    bool off;
    bool line_open;           /* a redrawn line is on screen without a newline */
    int print_every;
    int64_t total_steps;
    int total_epochs;
    int64_t first_step;       /* first step seen by this process (ETA baseline) */
    double first_time;        /* monotonic seconds at first_step */
    double last_draw;         /* monotonic seconds of the last redraw */
    bool tee;                 /* TRACK_PROGRESS_TEE framing (tty is true too) */
    bool eval_open;           /* the open line is an evaluation line (cleared, not kept) */
    int64_t eval_batch;       /* last evaluation batch shown */
    double eval_t0;           /* monotonic seconds when this evaluation started */
} track_progress_sink_t;

void track_progress_init(track_progress_sink_t *p, FILE *out, track_progress_t mode,
                         int print_every, int64_t total_steps, int total_epochs);
void track_progress_step(track_progress_sink_t *p, const track_step_t *r, double now);
void track_progress_epoch(track_progress_sink_t *p, const track_epoch_t *r);
void track_progress_line(track_progress_sink_t *p, const char *line);
void track_progress_finish(track_progress_sink_t *p);
void track_progress_eval(track_progress_sink_t *p, int epoch, int64_t batch, int64_t batches, int64_t images,
                         double now);
/* Formats seconds as "1h02m03s" / "4m05s" / "6s" into buf. */
void track_format_eta(double seconds, char *buf, size_t len);

/* ---- TensorBoard (tensorboard.c) ---- */
typedef struct track_tb track_tb_t;
track_tb_t *track_tb_open(const char *dir, const char *host, double wall_time, err_t *e);
int track_tb_scalars(track_tb_t *tb, int64_t step, double wall_time, const track_kv_t *kv,
                     int n, err_t *e);
void track_tb_close(track_tb_t *tb);
const char *track_tb_path(const track_tb_t *tb);

/* ---- W&B transaction log (wandb_offline.c) ---- */
typedef struct track_wlog track_wlog_t;

typedef struct track_wrun {
    const char *run_id, *entity, *project, *display_name, *group, *host, *commit;
    const char *const *tags;
    int n_tags;
    const char *config_json;  /* resolved experiment (JSON object) or NULL */
    bool resumed;
    int64_t starting_step;
    double start_time;        /* unix seconds */
} track_wrun_t;

/* Creates <dir>/offline-run-YYYYMMDD_HHMMSS-<id>/run-<id>.wandb and writes the header,
 * the run record and the config record. */
track_wlog_t *track_wlog_open(const char *wandb_dir, const track_wrun_t *run, err_t *e);
/* history row: kv plus _step, _runtime, _timestamp */
int track_wlog_history(track_wlog_t *w, int64_t step, double runtime, double timestamp,
                       const track_kv_t *kv, int n, err_t *e);
int track_wlog_summary(track_wlog_t *w, const char *key, const char *value_json, err_t *e);
int track_wlog_summary_items(track_wlog_t *w, const char *const *keys,
                             const char *const *values, int n, err_t *e);
int track_wlog_output(track_wlog_t *w, const char *line, double timestamp, err_t *e);
int track_wlog_exit(track_wlog_t *w, int exit_code, double runtime, err_t *e);
void track_wlog_close(track_wlog_t *w);
const char *track_wlog_path(const track_wlog_t *w);
/* Frames one payload as datastore chunks (exposed for tests). */
void track_wlog_frame(tbuf_t *out, size_t *block_pos, const uint8_t *data, size_t n);

/* ---- W&B online (wandb.c) ---- */
typedef struct track_wandb track_wandb_t;

typedef struct track_wandb_opts {
    track_wrun_t run;
    const char *base_url;     /* https://api.wandb.ai */
    const char *api_key;      /* kept in memory only */
    bool resume;              /* ask the service where the run stopped */
    double timeout_s;         /* per request */
    double heartbeat_s;       /* empty file_stream request after this much silence; 0 = 30 s */
    FILE *warn_out;
    const char *offline_hint; /* path of the offline log, for the warning */
} track_wandb_opts_t;

/* Starts the sender thread. Never fails for network reasons; NULL only out of memory. */
track_wandb_t *track_wandb_start(const track_wandb_opts_t *o, err_t *e);
/* Queue a history row (a complete JSON object text with _step etc.); never blocks. */
void track_wandb_history(track_wandb_t *w, int64_t step, const char *json_row);
/* Replace the summary (a complete JSON object text); coalesced. */
void track_wandb_summary(track_wandb_t *w, const char *json_obj);
void track_wandb_output(track_wandb_t *w, const char *line);
/* Sends what is queued, then complete/exitcode; waits at most timeout_s; frees w.
 * Returns the number of history rows that were dropped or not delivered. */
int64_t track_wandb_finish(track_wandb_t *w, int exit_code, double timeout_s);

/* Reading the service's answers (wandb_parse.c). Each returns 0, or -1 when the body is
 * not JSON (or longer than TRACK_HTTP_MAX_BODY); fields absent or out of range leave the
 * outputs as they were. */
#define TRACK_HTTP_MAX_BODY (1u << 20)
int track_wandb_parse_viewer(const char *body, size_t len, char *entity, size_t cap);
int track_wandb_parse_resume(const char *body, size_t len, int64_t *hist_offset,
                             int64_t *out_offset, int64_t *skip_through_step);
int track_wandb_parse_upsert(const char *body, size_t len, char *entity, size_t cap,
                             bool *refused);
/* "Retry-After: N" (case-insensitive name) into seconds; -1 for any other line. */
int track_http_retry_after(const char *line, size_t len, double *seconds);
/* The password of host's entry (or "default") in a netrc text (wandb_auth.c). */
int track_netrc_find(FILE *f, const char *host, char *key, size_t len);

/* Looks up the API key for base_url: WANDB_API_KEY, else $NETRC or $HOME/.netrc
 * (machine = host of base_url, password field). Returns 0 and fills key, or -1. */
int track_wandb_api_key(const char *base_url, char *key, size_t len);
/* Writes the host part of url ("https://api.wandb.ai:443/x" -> "api.wandb.ai"). */
void track_url_host(const char *url, char *host, size_t len);

/* Writes a parsed JSON value as compact text (encode.c). */
struct json;
void track_json_dump(FILE *f, const struct json *j);

/* the wall clock, seconds since the epoch (monotonic time: now_s, util/clock.h) */
double track_now_wall(void);

#endif
