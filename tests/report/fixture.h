/* fixture.h: hand-made run directories with known numbers for the report tests.
 *
 * Header-only (static functions) because each test is one source file. The three runs
 * and the numbers a report must compute from them are documented next to each writer.
 */
#ifndef RUNNER_TESTS_REPORT_FIXTURE_H
#define RUNNER_TESTS_REPORT_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/test.h"

#define METRICS_HEADER \
    "epoch,step,lr,train_loss,train_top1,val_loss,val_top1,val_top5,epoch_seconds,images_per_second," \
    "peak_memory_bytes\n"
#define STEPS_HEADER \
    "step,epoch,lr,loss,top1,images_per_second,step_seconds,compute_seconds,comm_exposed_seconds," \
    "data_wait_seconds,loss_scale\n"

/* comparison.csv's header (report.h): the run's columns, then its member's. */
#define REPORT_CSV_HEADER \
    "name,mode,world_size,precision,batch_size,device,images_per_second,seconds_per_epoch,speedup," \
    "comm_exposed_pct,peak_memory_bytes,final_val_top1,best_val_top1,final_train_loss,status,exit_code," \
    "run_dir,note,member,seed,steady_steps,warmup_steps,steady_seconds,images_per_second_se," \
    "images_per_second_from,member_runs,member_images_per_second_mean,member_images_per_second_std," \
    "member_images_per_second_min,member_images_per_second_max,member_seconds_per_epoch,member_speedup," \
    "member_speedup_low,member_speedup_high,member_final_val_top1_mean,member_final_val_top1_std," \
    "member_final_val_top1_min,member_final_val_top1_max,member_best_val_top1_mean,member_best_val_top1_std," \
    "member_best_val_top1_min,member_best_val_top1_max,member_fastest,member_accuracy_differs\n"
/* The note of a run directory without timing.csv whose images/s comes from steps.csv. */
#define OLD_RUN_NOTE "\"no timing.csv (a run from an older runner): images/s is the median of its steps.csv " \
    "rows and s/epoch its median epoch time, not rates from every step\""
#define OLD_SUMMARY_NOTE "\"no timing.csv (a run from an older runner): images/s is its summary.json number " \
    "and s/epoch its median epoch time, not rates from every step\""

/* Writes dir/name with text; makes dir first. Returns 0 on success. */
static inline int fx_write(const char *dir, const char *name, const char *text) {
    char path[4200];
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return test_write_file(path, text);
}

static inline void fx_summary(const char *dir, const char *name, const char *status, const char *mode, int world,
                       const char *precision, double ips, double comm_fraction, double peak) {
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"name\": \"%s\", \"status\": \"%s\", \"epochs\": 3, \"steps\": 300, \"train_loss\": 9.5,\n"
             " \"train_top1\": 0.6, \"val_loss\": 1.2, \"val_top1\": 0.11, \"val_top5\": 0.9,\n"
             " \"best_val_top1\": 0.12, \"best_epoch\": 2, \"images_per_second\": %.17g,\n"
             " \"seconds_per_epoch\": 99, \"peak_memory_bytes\": %.17g, \"comm_exposed_fraction\": %.17g,\n"
             " \"mode\": \"%s\", \"world_size\": %d, \"precision\": \"%s\", \"batch_size\": 128,\n"
             " \"device\": \"cpu\", \"arch\": \"resnet20\", \"dataset\": \"synthetic\", \"wall_seconds\": 30,\n"
             " \"exit_code\": 0}\n",
             name, status, ips, peak, comm_fraction, mode, world, precision);
    fx_write(dir, "summary.json", buf);
}

/* Run "single": 3 epochs, epoch_seconds 12, 10, 11 (median 11, wall 12, 22, 33);
 * val_top1 0.40, 0.56, 0.52 (final 0.52, best 0.56); final train loss 1.2; peak memory
 * max 2000000. steps.csv: 10 rows, the first (100 images/s) is warm-up; the other nine
 * have median 200. step_seconds 0.5, no exposed comm: 0%. */
static inline void fx_run_single(const char *dir) {
    fx_summary(dir, "single", "completed", "single", 1, "fp32", 999, 0.5, 5e9);
    fx_write(dir, "metrics.csv", METRICS_HEADER
             "1,100,0.1,2.0,0.3,1.9,0.40,0.8,12.0,1000,1000000\n"
             "2,200,0.1,1.5,0.5,1.4,0.56,0.85,10.0,1100,2000000\n"
             "3,300,0.1,1.2,0.6,1.3,0.52,0.9,11.0,1100,1500000\n");
    static const int ips[10] = {100, 200, 210, 190, 205, 195, 220, 180, 200, 215};
    char buf[4096];
    size_t l = snprintf(buf, sizeof buf, "%s", STEPS_HEADER);
    for (int i = 0; i < 10; i++)
        l += snprintf(buf + l, sizeof buf - l, "%d,%d,0.1,1.0,0.5,%d,0.5,0.5,0,0.01,\n", (i + 1) * 30,
                      i / 4 + 1, ips[i]);
    fx_write(dir, "steps.csv", buf);
    fx_write(dir, "env.json", "{\"host\": \"node-a\", \"os\": \"Linux 6.1\", \"cpu\": \"Test CPU 9000\",\n"
             " \"cpu_cores\": 2, \"gpus\": [], \"driver\": null, \"cuda\": null, \"runner_commit\": \"abc1234\"}\n");
}

/* Run "ddp": 3 epochs, epoch_seconds 6, 5, 5.5 (median 5.5); val_top1 0.45, empty, 0.58
 * (final 0.58, best 0.58); peak memory column empty (summary: 3000000). steps.csv: 20
 * rows, the first two (50, 60) warm-up, then 400 and 420 nine times each: median 410,
 * speed-up 410 / 200 = 2.05. step_seconds 0.25, comm_exposed 0.05: 20%. */
static inline void fx_run_ddp(const char *dir) {
    fx_summary(dir, "ddp", "completed", "ddp", 2, "fp32", 999, 0.5, 3000000);
    fx_write(dir, "metrics.csv", METRICS_HEADER
             "1,50,0.1,2.2,0.3,1.9,0.45,0.8,6,1000,\n"
             "2,100,0.1,1.6,0.5,,,,5,1100,\n"
             "3,150,0.1,1.25,0.6,1.3,0.58,0.9,5.5,1100,\n");
    char buf[8192];
    size_t l = snprintf(buf, sizeof buf, "%s", STEPS_HEADER);
    for (int i = 0; i < 20; i++) {
        int v = i == 0 ? 50 : i == 1 ? 60 : (i % 2 ? 420 : 400);
        l += snprintf(buf + l, sizeof buf - l, "%d,%d,0.1,1.0,0.5,%d,0.25,0.2,0.05,0.0,\n", (i + 1) * 10,
                      i / 7 + 1, v);
    }
    fx_write(dir, "steps.csv", buf);
    fx_write(dir, "env.json", "{\"host\": \"node-b\", \"gpus\": [{\"name\": \"Fake GPU\", \"memory\": 1024}],"
             " \"nccl\": \"2.28.3\", \"runner_commit\": \"abc1234\"}\n");
}

/* Run "dp_amp": no steps.csv and no env.json: images/s 300 and comm 12.5% from
 * summary.json (speed-up 1.5). 2 epochs, epoch_seconds 8 and 9 (median 8.5). */
static inline void fx_run_dp_amp(const char *dir) {
    fx_summary(dir, "dp_amp", "completed", "dp", 2, "fp16", 300, 0.125, 4000000);
    fx_write(dir, "metrics.csv", METRICS_HEADER
             "1,100,0.1,2.1,0.3,1.9,0.42,0.8,8,300,4000000\n"
             "2,200,0.1,1.4,0.5,1.4,0.50,0.85,9,300,4000000\n");
}

/* A run directory as the runner writes it now, with one epoch of 10 + steady steps of
 * batch images: resolved.yaml (config, then "seed: <seed>", and a comment naming the
 * directory, which the grouping ignores), summary.json, metrics.csv (epoch_seconds, val
 * top-1 top1), steps.csv with a single row (the run had fewer steps than print_every) whose
 * images_per_second is row_ips, and timing.csv with every step: 10 warm-up steps of 1 s
 * each, then steady steps of sec seconds. Its steady rate is batch / sec exactly, and its
 * epoch trains (10 + steady) * batch images. */
static inline void fx_timed_run(const char *dir, const char *name, int seed, const char *config, int batch,
                                int steady, double sec, double row_ips, double epoch_seconds, double top1) {
    char buf[16384];
    int steps = 10 + steady;
    snprintf(buf, sizeof buf, "# resolved.yaml\n# loaded from: %s/experiment.yaml\nname: \"%s\"\nseed: %d"
             "                                 # keys every random draw\n%s", dir, name, seed, config);
    fx_write(dir, "resolved.yaml", buf);
    snprintf(buf, sizeof buf,
             "{\"name\": \"%s\", \"status\": \"completed\", \"exit_code\": 0, \"epochs\": 1, \"steps\": %d,\n"
             " \"train_loss\": 1.0, \"val_top1\": %.17g, \"best_val_top1\": %.17g, \"images_per_second\": %.17g,\n"
             " \"seconds_per_epoch\": %.17g, \"steady_steps\": %d, \"warmup_steps\": 10, \"images_per_epoch\": %d,\n"
             " \"mode\": \"dp\", \"world_size\": 2, \"precision\": \"fp32\", \"batch_size\": %d, \"device\": \"cpu\"}\n",
             name, steps, top1, top1, batch / sec, epoch_seconds, steady, steps * batch, batch);
    fx_write(dir, "summary.json", buf);
    snprintf(buf, sizeof buf, METRICS_HEADER "1,%d,0.1,1.0,0.5,1.0,%.17g,0.9,%.17g,%.17g,1000\n", steps, top1,
             epoch_seconds, steps * batch / epoch_seconds);
    fx_write(dir, "metrics.csv", buf);
    snprintf(buf, sizeof buf, STEPS_HEADER "%d,1,0.1,1.0,0.5,%.17g,%.17g,%.17g,,0,\n", steps, row_ips,
             batch / row_ips, batch / row_ips);
    fx_write(dir, "steps.csv", buf);
    size_t l = (size_t)snprintf(buf, sizeof buf, "step,steps,epoch,since_start,images,seconds\n");
    for (int i = 0; i < steps && l < sizeof buf - 64; i++)
        l += (size_t)snprintf(buf + l, sizeof buf - l, "%d,1,1,%d,%d,%.10g\n", i + 1, i, batch, i < 10 ? 1.0 : sec);
    fx_write(dir, "timing.csv", buf);
}

#endif
