/* test_track_local.c: the metrics bus without a network: CSV files (headers, rows, empty
 * cells, resume trimming, a bad header), progress output (terminal and plain), the
 * TensorBoard event file and the W&B offline log, both read back with the independent
 * readers of readers.h (CRCs verified, protobuf fields decoded, values asserted).
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runner/track/track.h"
#include "runner/track/track_impl.h"
#include "tests/test.h"
#include "tests/track/readers.h"

#define STEPS_HDR "step,epoch,lr,loss,top1,images_per_second,step_seconds,compute_seconds," \
                  "comm_exposed_seconds,data_wait_seconds,loss_scale,grad_norm"
#define METRICS_HDR "epoch,step,lr,train_loss,train_top1,val_loss,val_top1,val_top5," \
                    "epoch_seconds,images_per_second,peak_memory_bytes,val_loss_ema,val_top1_ema," \
                    "val_top5_ema"

static void clear_wandb_env(void) {
    const char *names[] = {"WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_ID",
                           "WANDB_NAME", "WANDB_TAGS", "WANDB_RUN_GROUP", "WANDB_BASE_URL",
                           "WANDB_DIR", "WANDB_API_KEY", NULL};
    for (int i = 0; names[i]; i++) unsetenv(names[i]);
}

static track_step_t step_row(int64_t s, int epoch) {
    track_step_t r = {.step = s, .epoch = epoch, .lr = 0.1, .loss = 2.0 / (double)s,
                      .top1 = 0.01 * (double)s, .images_per_second = 1000 + (double)s,
                      .step_seconds = 0.5, .compute_seconds = 0.4,
                      .comm_exposed_seconds = 0.05, .data_wait_seconds = 0.01,
                      .loss_scale = NAN, .grad_norm = 0.5 + (double)s};
    return r;
}

static track_epoch_t epoch_row(int epoch, int64_t step, bool eval) {
    track_epoch_t r = {.epoch = epoch, .step = step, .lr = 0.1, .train_loss = 1.5 / epoch,
                       .train_top1 = 0.3 * epoch, .val_loss = eval ? 1.25 : NAN,
                       .val_top1 = eval ? 0.5 : NAN, .val_top5 = eval ? 0.875 : NAN,
                       .epoch_seconds = 12.5, .images_per_second = 1234.5,
                       .peak_memory_bytes = eval ? 1048576 : -1, .val_loss_ema = eval ? 1.5 : NAN,
                       .val_top1_ema = eval ? 0.625 : NAN, .val_top5_ema = eval ? 0.9375 : NAN};
    return r;
}

/* Counts lines of a text. */
static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

/* Returns the i-th line (0-based) copied into buf. */
static const char *line_at(const char *s, int i, char *buf, size_t cap) {
    for (int k = 0; k < i && s; k++) { s = strchr(s, '\n'); if (s) s++; }
    buf[0] = 0;
    if (!s) return buf;
    size_t n = strcspn(s, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    return buf;
}

static void test_crc32c_vectors(void) {
    CHECK_INT(track_crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_INT(rd_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
    uint8_t zeros[32] = {0};
    CHECK_INT(track_crc32c(0, zeros, 32), 0x8A9136AAu);
    CHECK_INT(track_crc32c_masked("abc", 3), rd_masked((const uint8_t *)"abc", 3));
    CHECK_INT(rd_crc32((const uint8_t *)"123456789", 9), 0xCBF43926u);
}

static void test_csv_and_progress(void) {
    clear_wandb_env();
    char dir[512], path[700], buf[512];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    char *out = NULL;
    size_t out_len = 0;
    FILE *prog = open_memstream(&out, &out_len);
    track_opts_t o;
    track_opts_init(&o);
    o.run_dir = dir;
    o.print_every = 3;
    o.progress = TRACK_PROGRESS_PLAIN;
    o.progress_out = prog;
    o.total_steps = 10;
    o.total_epochs = 2;
    err_t e = {0};
    track_t *t = track_open(&o, &e);
    CHECK(t != NULL);
    if (!t) return;
    for (int s = 1; s <= 10; s++) {
        track_step_t r = step_row(s, s <= 5 ? 1 : 2);
        CHECK_INT(track_step(t, &r, &e), 0);
        if (s == 5) { track_epoch_t er = epoch_row(1, 5, false); CHECK_INT(track_epoch(t, &er, &e), 0); }
        if (s == 10) { track_epoch_t er = epoch_row(2, 10, true); CHECK_INT(track_epoch(t, &er, &e), 0); }
    }
    track_console(t, "console line");
    CHECK_STR(track_wandb_run_id(t), "");
    CHECK_INT(track_close(t, 0, &e), 0);
    fclose(prog);

    snprintf(path, sizeof path, "%s/steps.csv", dir);
    char *csv = test_read_file(path, NULL);
    CHECK_STR(line_at(csv, 0, buf, sizeof buf), STEPS_HDR);
    /* steps 3, 6, 9 and the last step 10 */
    CHECK_INT(count_lines(csv), 1 + 4);
    CHECK_STR(line_at(csv, 1, buf, sizeof buf), "3,1,0.1,0.6666666667,0.03,1003,0.5,0.4,0.05,0.01,,3.5");
    CHECK_STR(line_at(csv, 4, buf, sizeof buf), "10,2,0.1,0.2,0.1,1010,0.5,0.4,0.05,0.01,,10.5");
    free(csv);
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    csv = test_read_file(path, NULL);
    CHECK_STR(line_at(csv, 0, buf, sizeof buf), METRICS_HDR);
    CHECK_INT(count_lines(csv), 3);
    CHECK_STR(line_at(csv, 1, buf, sizeof buf), "1,5,0.1,1.5,0.3,,,,12.5,1234.5,,,,");
    CHECK_STR(line_at(csv, 2, buf, sizeof buf), "2,10,0.1,0.75,0.6,1.25,0.5,0.875,12.5,1234.5,1048576,1.5,0.625,0.9375");
    free(csv);
    /* plain progress: a line at steps 3, 6, 9, 10; epoch lines; the console line */
    CHECK_CONTAINS(out, "epoch 1/2  step 3/10  loss 0.6667  1003.0 img/s  ETA ");
    CHECK_CONTAINS(out, "epoch 2/2  step 10/10  loss 0.2000");
    CHECK_CONTAINS(out, "epoch 2 done  step 10  train_loss 0.7500  train_top1 0.6000  val_loss 1.2500");
    CHECK_CONTAINS(out, "\nconsole line\n");
    CHECK(strstr(out, "step 4/10") == NULL);
    CHECK(strchr(out, '\r') == NULL);
    free(out);
    /* no W&B, no TensorBoard directories when disabled */
    struct stat st;
    snprintf(path, sizeof path, "%s/wandb", dir);
    CHECK(stat(path, &st) != 0);
    snprintf(path, sizeof path, "%s/tensorboard", dir);
    CHECK(stat(path, &st) != 0);
}

static void test_progress_tty_and_eta(void) {
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    track_progress_sink_t p;
    track_progress_init(&p, f, TRACK_PROGRESS_TTY, 50, 100, 3);
    track_step_t r = step_row(1, 1);
    track_progress_step(&p, &r, 100.0);
    r = step_row(11, 1);
    track_progress_step(&p, &r, 110.0);          /* 1 s/step, 89 steps left */
    track_progress_line(&p, "hello");
    track_progress_finish(&p);
    fclose(f);
    CHECK_CONTAINS(out, "\repoch 1/3  step 1/100  loss 2.0000  1001.0 img/s  ETA ?");
    CHECK_CONTAINS(out, "\repoch 1/3  step 11/100  loss 0.1818  1011.0 img/s  ETA 1m29s");
    CHECK_CONTAINS(out, "\nhello\n");
    free(out);
    char eta[32];
    track_format_eta(3723, eta, sizeof eta);
    CHECK_STR(eta, "1h02m03s");
    track_format_eta(NAN, eta, sizeof eta);
    CHECK_STR(eta, "?");
}

/* Writes the CSVs by hand, resumes at step 6: rows after 6 and the torn last line go. */
static void test_csv_resume(void) {
    clear_wandb_env();
    char dir[512], path[700], buf[512];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    test_write_file(path, STEPS_HDR "\n2,1,0.1,1,,,,,,,,\n4,1,0.1,1,,,,,,,,\n6,1,0.1,1,,,,,,,,\n"
                    "8,2,0.1,1,,,,,,,,\n10,2,0.1,1,,,,,,,,\n12,2,0.1");
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    test_write_file(path, METRICS_HDR "\n1,5,0.1,1,1,,,,1,1,,,,\n2,10,0.1,1,1,,,,1,1,,,,\n");
    snprintf(path, sizeof path, "%s/timing.csv", dir);   /* windows of 4, 2, then 4 steps */
    test_write_file(path, "step,steps,epoch,since_start,images,seconds\n4,4,1,0,512,1.5\n6,2,1,4,256,0.25\n"
                    "10,4,2,0,512,1.25\n");
    track_opts_t o;
    track_opts_init(&o);
    o.run_dir = dir;
    o.print_every = 2;
    o.progress = TRACK_PROGRESS_OFF;
    o.is_resume = true;
    o.resume_step = 6;
    err_t e = {0};
    track_t *t = track_open(&o, &e);
    CHECK(t != NULL);
    if (!t) return;
    track_step_t r = step_row(8, 2);
    CHECK_INT(track_step(t, &r, &e), 0);
    track_window_t w = {.step = 8, .steps = 2, .epoch = 2, .since_start = 0, .images = 256, .seconds = 0.375};
    CHECK_INT(track_window(t, &w, &e), 0);
    CHECK_INT(track_close(t, 0, &e), 0);
    /* timing.csv: the window ending at step 10 (after the checkpoint) went, the new one follows */
    snprintf(path, sizeof path, "%s/timing.csv", dir);
    char *csv = test_read_file(path, NULL);
    CHECK_STR(csv, "step,steps,epoch,since_start,images,seconds\n4,4,1,0,512,1.5\n6,2,1,4,256,0.25\n"
                   "8,2,2,0,256,0.375\n");
    free(csv);
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    csv = test_read_file(path, NULL);
    CHECK_INT(count_lines(csv), 5);
    CHECK_STR(line_at(csv, 3, buf, sizeof buf), "6,1,0.1,1,,,,,,,,");
    CHECK_STR(line_at(csv, 4, buf, sizeof buf), "8,2,0.1,0.25,0.08,1008,0.5,0.4,0.05,0.01,,8.5");
    free(csv);
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    csv = test_read_file(path, NULL);
    CHECK_INT(count_lines(csv), 2);                 /* epoch 1 (step 5) kept, epoch 2 gone */
    CHECK_STR(line_at(csv, 1, buf, sizeof buf), "1,5,0.1,1,1,,,,1,1,,,,");
    free(csv);

    /* a foreign header refuses to resume, naming the file */
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    test_write_file(path, "a,b,c\n1,2,3\n");
    err_clear(&e);
    t = track_open(&o, &e);
    CHECK(t == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, path);
    CHECK_CONTAINS(e.msg, "line 1");
    track_close(t, 0, &e);
}

static void test_other_rank_and_bad_mode(void) {
    clear_wandb_env();
    char dir[512], path[700];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    track_opts_t o;
    track_opts_init(&o);
    o.run_dir = dir;
    o.rank = 1;
    o.tensorboard = true;
    err_t e = {0};
    track_t *t = track_open(&o, &e);
    CHECK(t != NULL);
    track_step_t r = step_row(50, 1);
    CHECK_INT(track_step(t, &r, &e), 0);
    CHECK_INT(track_close(t, 0, &e), 0);
    struct stat st;
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    CHECK(stat(path, &st) != 0);

    o.rank = 0;
    setenv("WANDB_MODE", "sometimes", 1);
    t = track_open(&o, &e);
    CHECK(t == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "WANDB_MODE");
    CHECK_CONTAINS(e.msg, "online, offline or disabled");
    unsetenv("WANDB_MODE");
}

/* Finds the single file whose name starts with prefix in dir; path into out. */
static int find_file(const char *dir, const char *prefix, char *out, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    int found = -1;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, prefix, strlen(prefix))) {
            if ((size_t)snprintf(out, cap, "%s/%s", dir, de->d_name) < cap) found = 0;
        }
    closedir(d);
    return found;
}

static void test_tensorboard_file(void) {
    clear_wandb_env();
    char dir[512], tbdir[700], path[1000], why[128];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    track_opts_t o;
    track_opts_init(&o);
    o.run_dir = dir;
    o.print_every = 5;
    o.csv = false;
    o.tensorboard = true;
    o.host = "node7";
    o.progress = TRACK_PROGRESS_OFF;
    err_t e = {0};
    track_t *t = track_open(&o, &e);
    CHECK(t != NULL);
    if (!t) return;
    for (int s = 1; s <= 10; s++) { track_step_t r = step_row(s, 1); track_step(t, &r, &e); }
    track_epoch_t er = epoch_row(1, 10, true);
    track_epoch(t, &er, &e);
    CHECK_INT(track_close(t, 0, &e), 0);
    snprintf(tbdir, sizeof tbdir, "%s/tensorboard", dir);
    CHECK_INT(find_file(tbdir, "events.out.tfevents.", path, sizeof path), 0);
    CHECK_CONTAINS(path, ".node7");
    size_t n = 0;
    uint8_t *data = (uint8_t *)test_read_file(path, &n);
    CHECK(data != NULL);
    if (!data) return;
    rd_rec_t recs[16];
    int count = rd_tfrecords(data, n, recs, 16, why);
    CHECK_INT(count, 4);                            /* version, step 5, step 10, epoch */
    if (count != 4) { fprintf(stderr, "tfrecord: %s\n", why); free(data); return; }
    char s[64];
    pb_str(recs[0].data, recs[0].len, 3, s, sizeof s);
    CHECK_STR(s, "brain.Event:2");
    pbf_t f;
    CHECK(pb_find(recs[0].data, recs[0].len, 1, &f) && f.wire == 1);
    CHECK(pb_f64(f.v) > 1.7e9);
    /* event 1: step 5 with train/loss = 0.4 */
    CHECK(pb_find(recs[1].data, recs[1].len, 2, &f));
    CHECK_INT(f.v, 5);
    CHECK(pb_find(recs[1].data, recs[1].len, 5, &f));
    const uint8_t *sum = f.data;
    size_t sum_len = f.len, pos = 0;
    int values = 0, found_loss = 0;
    pbf_t v;
    while (pb_next(sum, sum_len, &pos, &v) == 1) {
        CHECK_INT(v.field, 1);
        values++;
        char tag[64];
        pb_str(v.data, v.len, 1, tag, sizeof tag);
        pbf_t sv;
        CHECK(pb_find(v.data, v.len, 2, &sv) && sv.wire == 5);
        if (!strcmp(tag, "train/loss")) { found_loss = 1; CHECK_NEAR(pb_f32(sv.v), 0.4f, 0, 0); }
        if (!strcmp(tag, "perf/images_per_second")) CHECK_NEAR(pb_f32(sv.v), 1005.0, 0, 0);
    }
    CHECK_INT(values, 10);                         /* loss_scale NaN is left out */
    CHECK_INT(found_loss, 1);
    /* event 3: the epoch row at step 10 with val/top5 = 0.875 */
    CHECK(pb_find(recs[3].data, recs[3].len, 2, &f));
    CHECK_INT(f.v, 10);
    CHECK(pb_find(recs[3].data, recs[3].len, 5, &f));
    sum = f.data; sum_len = f.len; pos = 0;
    int found_top5 = 0;
    while (pb_next(sum, sum_len, &pos, &v) == 1) {
        char tag[64];
        pb_str(v.data, v.len, 1, tag, sizeof tag);
        pbf_t sv;
        pb_find(v.data, v.len, 2, &sv);
        if (!strcmp(tag, "val/top5")) { found_top5 = 1; CHECK_NEAR(pb_f32(sv.v), 0.875, 0, 0); }
    }
    CHECK_INT(found_top5, 1);
    /* a flipped byte is caught by the data CRC */
    data[recs[1].data - data + 3] ^= 1;
    CHECK_INT(rd_tfrecords(data, n, recs, 16, why), -1);
    CHECK_STR(why, "data crc");
    free(data);
}

/* Frames payloads that cross block boundaries and start next to a block end. */
static void test_wandb_framing(void) {
    tbuf_t out = {0};
    uint8_t header[7] = {':', 'W', '&', 'B', 0xE1, 0xBE, 0};
    tbuf_put(&out, header, 7);
    size_t pos = 7;
    size_t sizes[] = {10, 32768 - 7 - 17 - 7 - 3, 100000, 0, 5};  /* 2nd leaves 3 bytes */
    uint8_t *payload = malloc(100000);
    for (int i = 0; i < 100000; i++) payload[i] = (uint8_t)(i * 7 + 3);
    for (int k = 0; k < 5; k++) {
        tbuf_t tmp = {0};
        track_wlog_frame(&tmp, &pos, payload, sizes[k]);
        tbuf_put(&out, tmp.p, tmp.n);
        tbuf_free(&tmp);
        CHECK_INT(pos, out.n);
    }
    CHECK_INT(out.p[32768 - 3], 0);                /* the 3-byte tail is zero padding */
    rd_rec_t *recs = NULL;
    char why[128] = "";
    int n = rd_wandb(out.p, out.n, &recs, why);
    CHECK_INT(n, 5);
    if (n != 5) fprintf(stderr, "datastore: %s\n", why);
    for (int k = 0; k < n && k < 5; k++) {
        CHECK_INT(recs[k].len, sizes[k]);
        CHECK(memcmp(recs[k].data, payload, sizes[k]) == 0);
        free(recs[k].data);
    }
    free(recs);
    out.p[20] ^= 0x40;                             /* corrupt the first payload */
    n = rd_wandb(out.p, out.n, &recs, why);
    CHECK_INT(n, -1);
    CHECK_CONTAINS(why, "crc mismatch");
    free(recs);
    free(payload);
    tbuf_free(&out);
}

/* An offline run: the .wandb file decodes into header, run, config, history, summary,
 * output, exit and final records with the values given. */
static void test_wandb_offline_log(void) {
    clear_wandb_env();
    setenv("WANDB_MODE", "dryrun", 1);
    setenv("WANDB_TAGS", "a, b ,c", 1);
    char dir[512], path[1400], sub[1300], why[128];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    track_opts_t o;
    track_opts_init(&o);
    o.run_dir = dir;
    o.run_name = "20261121-101500-ab12cd";
    o.print_every = 2;
    o.progress = TRACK_PROGRESS_OFF;
    o.wandb_project = "proj";
    o.wandb_group = "grp";
    o.host = "hostA";
    o.commit = "abc123";
    o.config_json = "{\"seed\": 3, \"optimizer\": {\"lr\": 0.1, \"name\": \"sgd\"}}";
    err_t e = {0};
    track_t *t = track_open(&o, &e);
    CHECK(t != NULL);
    if (!t) { fprintf(stderr, "%s\n", e.msg); return; }
    char run_id[16];
    snprintf(run_id, sizeof run_id, "%s", track_wandb_run_id(t));
    CHECK_INT(strlen(run_id), 8);
    CHECK_INT(strspn(run_id, "abcdefghijklmnopqrstuvwxyz0123456789"), 8);
    for (int s = 1; s <= 4; s++) { track_step_t r = step_row(s, 1); track_step(t, &r, &e); }
    track_epoch_t er = epoch_row(1, 4, true);
    track_epoch(t, &er, &e);                       /* merges into the step-4 row */
    track_summary(t, "best_val_top1", 0.5);
    track_console(t, "hello wandb");
    CHECK_INT(track_close(t, 3, &e), 0);
    unsetenv("WANDB_MODE");
    unsetenv("WANDB_TAGS");

    snprintf(path, sizeof path, "%s/wandb/run_id", dir);
    char *rid = test_read_file(path, NULL);
    CHECK(rid && !strncmp(rid, run_id, 8));
    free(rid);
    snprintf(sub, sizeof sub, "%s/wandb", dir);
    CHECK_INT(find_file(sub, "offline-run-", path, sizeof path), 0);
    memcpy(sub, path, sizeof sub - 1);
    sub[sizeof sub - 1] = 0;
    char name[64];
    snprintf(name, sizeof name, "run-%s.wandb", run_id);
    snprintf(path, sizeof path, "%s/%s", sub, name);
    CHECK(strstr(sub, run_id) != NULL);
    size_t n = 0;
    uint8_t *data = (uint8_t *)test_read_file(path, &n);
    CHECK(data != NULL);
    if (!data) return;
    rd_rec_t *recs = NULL;
    int count = rd_wandb(data, n, &recs, why);
    /* header, run, config, history(2), summary, output, history(4: held back until a
     * later step or close, to merge rows of the same step), final summary, exit, final */
    CHECK_INT(count, 10);
    if (count < 10) { fprintf(stderr, "datastore: %s\n", why); free(data); return; }
    int kinds[10];
    for (int i = 0; i < 10; i++) {
        pbf_t f;
        CHECK(pb_find(recs[i].data, recs[i].len, 1, &f));
        CHECK_INT(f.v, i + 1);                     /* Record.num counts from 1 */
        size_t pos = 0;
        kinds[i] = 0;
        while (pb_next(recs[i].data, recs[i].len, &pos, &f) == 1)
            if (f.field != 1) kinds[i] = f.field;
    }
    int want[10] = {21, 17, 5, 2, 3, 4, 2, 3, 18, 20};
    for (int i = 0; i < 10; i++) CHECK_INT(kinds[i], want[i]);
    char s[256];
    pbf_t f;
    pb_find(recs[1].data, recs[1].len, 17, &f);
    const uint8_t *run = f.data;
    size_t rl = f.len;
    CHECK_STR(pb_str(run, rl, 1, s, sizeof s), run_id);
    CHECK_STR(pb_str(run, rl, 3, s, sizeof s), "proj");
    CHECK_STR(pb_str(run, rl, 6, s, sizeof s), "grp");
    CHECK_STR(pb_str(run, rl, 8, s, sizeof s), "20261121-101500-ab12cd");
    CHECK_STR(pb_str(run, rl, 13, s, sizeof s), "hostA");
    int tags = 0;
    size_t pos = 0;
    while (pb_next(run, rl, &pos, &f) == 1)
        if (f.field == 10) {
            const char *w3[] = {"a", "b", "c"};
            CHECK(tags < 3 && f.len == 1 && f.data[0] == w3[tags][0]);
            tags++;
        }
    CHECK_INT(tags, 3);
    /* config record: items seed = 3 and optimizer = {...} */
    pb_find(recs[2].data, recs[2].len, 5, &f);
    const uint8_t *cfg = f.data;
    size_t cl = f.len;
    pos = 0;
    int items = 0;
    while (pb_next(cfg, cl, &pos, &f) == 1) {
        char k[64], val[256];
        pb_str(f.data, f.len, 1, k, sizeof k);
        pb_str(f.data, f.len, 16, val, sizeof val);
        if (!strcmp(k, "seed")) CHECK_STR(val, "3");
        if (!strcmp(k, "optimizer")) CHECK_STR(val, "{\"lr\":0.10000000000000001,\"name\":\"sgd\"}");
        items++;
    }
    CHECK_INT(items, 2);
    /* second history record: step 4 merged with the epoch row */
    pb_find(recs[6].data, recs[6].len, 2, &f);
    const uint8_t *h = f.data;
    size_t hl = f.len;
    pbf_t stp;
    CHECK(pb_find(h, hl, 2, &stp));
    pbf_t num;
    CHECK(pb_find(stp.data, stp.len, 1, &num) && num.v == 4);
    pos = 0;
    int seen = 0;
    while (pb_next(h, hl, &pos, &f) == 1) {
        if (f.field != 1) continue;
        char k[64], val[64];
        pb_str(f.data, f.len, 1, k, sizeof k);
        pb_str(f.data, f.len, 16, val, sizeof val);
        if (!strcmp(k, "_step")) { CHECK_STR(val, "4"); seen |= 1; }
        if (!strcmp(k, "train/loss")) { CHECK_STR(val, "0.5"); seen |= 2; }
        if (!strcmp(k, "val/top1")) { CHECK_STR(val, "0.5"); seen |= 4; }
        if (!strcmp(k, "_runtime")) seen |= 8;
        if (!strcmp(k, "_timestamp")) seen |= 16;
        if (!strcmp(k, "amp/loss_scale")) seen |= 32;      /* NaN: must be absent */
    }
    CHECK_INT(seen, 31);
    /* output record line, exit code */
    pb_find(recs[5].data, recs[5].len, 4, &f);
    CHECK_STR(pb_str(f.data, f.len, 3, s, sizeof s), "hello wandb\n");
    /* the final summary: last value of every history key plus the explicit ones */
    pb_find(recs[7].data, recs[7].len, 3, &f);
    const uint8_t *sm = f.data;
    size_t sml = f.len;
    pos = 0;
    int sum_items = 0, sum_seen = 0;
    while (pb_next(sm, sml, &pos, &f) == 1) {
        char k[64], val[64];
        pb_str(f.data, f.len, 1, k, sizeof k);
        pb_str(f.data, f.len, 16, val, sizeof val);
        if (!strcmp(k, "train/loss")) { CHECK_STR(val, "0.5"); sum_seen |= 1; }
        if (!strcmp(k, "best_val_top1")) { CHECK_STR(val, "0.5"); sum_seen |= 2; }
        if (!strcmp(k, "val/top5")) { CHECK_STR(val, "0.875"); sum_seen |= 4; }
        sum_items++;
    }
    CHECK_INT(sum_seen, 7);
    CHECK_INT(sum_items, 23);          /* 11 step keys - loss_scale + 13 epoch keys - epoch + best */
    pb_find(recs[8].data, recs[8].len, 18, &f);
    pbf_t ec;
    CHECK(pb_find(f.data, f.len, 1, &ec) && ec.v == 3);
    for (int i = 0; i < count; i++) free(recs[i].data);
    free(recs);
    free(data);
}

/* The SDK's environment variables win over the options. */
static void test_wandb_env_overrides(void) {
    clear_wandb_env();
    char dir[512], wdir[600], path[1400], sub[1300], why[128];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    snprintf(wdir, sizeof wdir, "%s/elsewhere", dir);
    mkdir(wdir, 0755);
    setenv("WANDB_MODE", "offline", 1);
    setenv("WANDB_DIR", wdir, 1);
    setenv("WANDB_RUN_ID", "envrun42", 1);
    setenv("WANDB_NAME", "env-name", 1);
    setenv("WANDB_PROJECT", "env-proj", 1);
    setenv("WANDB_ENTITY", "env-ent", 1);
    setenv("WANDB_RUN_GROUP", "env-grp", 1);
    track_opts_t o;
    track_opts_init(&o);
    o.run_dir = dir;
    o.progress = TRACK_PROGRESS_OFF;
    o.wandb_mode = "disabled";                    /* WANDB_MODE wins */
    o.wandb_project = "file-proj";
    o.wandb_group = "file-grp";
    err_t e = {0};
    track_t *t = track_open(&o, &e);
    CHECK(t != NULL);
    if (!t) return;
    CHECK_STR(track_wandb_run_id(t), "envrun42");
    CHECK_INT(track_close(t, 0, &e), 0);
    clear_wandb_env();
    snprintf(sub, sizeof sub, "%s/wandb", wdir);
    CHECK_INT(find_file(sub, "offline-run-", path, sizeof path), 0);
    CHECK_CONTAINS(path, "-envrun42");
    memcpy(sub, path, sizeof sub - 1);
    sub[sizeof sub - 1] = 0;
    snprintf(path, sizeof path, "%s/run-envrun42.wandb", sub);
    size_t n = 0;
    uint8_t *data = (uint8_t *)test_read_file(path, &n);
    CHECK(data != NULL);
    if (!data) return;
    rd_rec_t *recs = NULL;
    int count = rd_wandb(data, n, &recs, why);
    CHECK(count >= 2);
    if (count >= 2) {
        pbf_t f;
        CHECK(pb_find(recs[1].data, recs[1].len, 17, &f));
        char s[64];
        CHECK_STR(pb_str(f.data, f.len, 2, s, sizeof s), "env-ent");
        CHECK_STR(pb_str(f.data, f.len, 3, s, sizeof s), "env-proj");
        CHECK_STR(pb_str(f.data, f.len, 6, s, sizeof s), "env-grp");
        CHECK_STR(pb_str(f.data, f.len, 8, s, sizeof s), "env-name");
    }
    for (int i = 0; i < count; i++) free(recs[i].data);
    free(recs);
    free(data);
    snprintf(path, sizeof path, "%s/wandb/run_id", dir);  /* the id is remembered in the run dir */
    char *rid = test_read_file(path, NULL);
    CHECK_STR(rid, "envrun42\n");
    free(rid);
    /* WANDB_MODE=disabled wins over an online option: nothing W&B is written */
    char dir2[512];
    CHECK_INT(test_tmpdir(dir2, sizeof dir2), 0);
    setenv("WANDB_MODE", "disabled", 1);
    o.run_dir = dir2;
    o.wandb_mode = "online";
    t = track_open(&o, &e);
    CHECK(t != NULL);
    CHECK_STR(track_wandb_run_id(t), "");
    CHECK_INT(track_close(t, 0, &e), 0);
    struct stat st;
    snprintf(path, sizeof path, "%s/wandb", dir2);
    CHECK(stat(path, &st) != 0);
    clear_wandb_env();
}

/* Resuming an offline run: same run id from <run dir>/wandb/run_id, a new offline log
 * whose run record says resumed and the starting step, history only after that step. */
static void test_wandb_offline_resume(void) {
    clear_wandb_env();
    char dir[512], path[2048], sub[600], why[128];
    CHECK_INT(test_tmpdir(dir, sizeof dir), 0);
    track_opts_t o;
    track_opts_init(&o);
    o.run_dir = dir;
    o.progress = TRACK_PROGRESS_OFF;
    o.wandb_mode = "offline";
    o.print_every = 1;
    err_t e = {0};
    track_t *t = track_open(&o, &e);
    CHECK(t != NULL);
    if (!t) return;
    char first[16];
    snprintf(first, sizeof first, "%s", track_wandb_run_id(t));
    CHECK_INT(track_close(t, 0, &e), 0);
    snprintf(sub, sizeof sub, "%s/wandb", dir);
    CHECK_INT(find_file(sub, "offline-run-", path, sizeof path), 0);
    char first_dir[2048];
    snprintf(first_dir, sizeof first_dir, "%s", path);
    /* resumed within the same second: still its own offline directory */
    o.is_resume = true;
    o.resume_step = 7;
    t = track_open(&o, &e);
    CHECK(t != NULL);
    if (!t) return;
    CHECK_STR(track_wandb_run_id(t), first);
    for (int s = 7; s <= 9; s++) { track_step_t r = step_row(s, 1); track_step(t, &r, &e); }
    CHECK_INT(track_close(t, 0, &e), 0);
    DIR *d = opendir(sub);
    struct dirent *de;
    int dirs = 0;
    char second[2048] = "";
    while (d && (de = readdir(d)))
        if (!strncmp(de->d_name, "offline-run-", 12)) {
            dirs++;
            snprintf(path, sizeof path, "%s/%s", sub, de->d_name);
            if (strcmp(path, first_dir)) snprintf(second, sizeof second, "%s", path);
        }
    if (d) closedir(d);
    CHECK_INT(dirs, 2);
    if ((size_t)snprintf(path, sizeof path, "%s/run-%s.wandb", second, first) >= sizeof path) path[0] = 0;
    size_t n = 0;
    uint8_t *data = (uint8_t *)test_read_file(path, &n);
    CHECK(data != NULL);
    if (!data) return;
    rd_rec_t *recs = NULL;
    int count = rd_wandb(data, n, &recs, why);
    CHECK(count >= 4);
    int hist = 0;
    for (int i = 0; i < count; i++) {
        pbf_t f, g;
        if (pb_find(recs[i].data, recs[i].len, 17, &f)) {
            CHECK(pb_find(f.data, f.len, 18, &g) && g.v == 1);      /* resumed */
            CHECK(pb_find(f.data, f.len, 14, &g) && g.v == 7);      /* starting_step */
        }
        if (pb_find(recs[i].data, recs[i].len, 2, &f)) {
            CHECK(pb_find(f.data, f.len, 2, &g));
            pbf_t num;
            CHECK(pb_find(g.data, g.len, 1, &num) && num.v == (uint64_t)(8 + hist));
            hist++;
        }
        free(recs[i].data);
    }
    CHECK_INT(hist, 2);                           /* steps 8 and 9; step 7 was checkpointed */
    free(recs);
    free(data);
}

int main(void) {
    TEST_RUN(test_crc32c_vectors);
    TEST_RUN(test_csv_and_progress);
    TEST_RUN(test_progress_tty_and_eta);
    TEST_RUN(test_csv_resume);
    TEST_RUN(test_other_rank_and_bad_mode);
    TEST_RUN(test_tensorboard_file);
    TEST_RUN(test_wandb_framing);
    TEST_RUN(test_wandb_offline_log);
    TEST_RUN(test_wandb_env_overrides);
    TEST_RUN(test_wandb_offline_resume);
    return test_main_end();
}
