/* test_cli_graphs.c: whole-step graphs (train.cuda_graphs, runner/train_graph.c) change
 * nothing but speed, checked on the CPU through the CLI: the runner is started with
 * RUNNER_CPU_GRAPHS=1, which gives the cpu backend graph ops with CUDA's semantics
 * (model/cpu/cpu_graph.c: calls recorded with their pointers and scalars, replayed later;
 * host transfers inside a recording fail it), so the trainer's recording logic runs here as
 * it runs on a GPU. Each case compares a run with graphs (`auto`, which the hook turns on)
 * against the same run with `false`, bit for bit: last.ckpt's params, buffers, optimizer
 * state and EMA, steps.csv's loss, top-1, loss scale and gradient norm of every step,
 * metrics.csv's validation columns (EMA's too); and the graphs run did record and replay
 * (summary.json graph_recordings / graph_launches, as counted from the keys).
 *  1. single, fp32, SGD: a warm-up and a milestone (the learning rate changes every step of
 *     the warm-up), EMA with timm's warm-up (its decay changes every step), gradient
 *     clipping, 2 micro-batches per step (the CPU loader gives each its own segment), mixup
 *     and cutmix with label smoothing, the epoch's short last batch (its own step shape),
 *     evaluation every epoch, a read-back window of 3 steps.
 *  2. single, emulated fp16 with the dynamic loss scaler (an init scale that overflows, so
 *     steps are skipped and the scale backs off and grows inside replays), AdamW.
 *  3. DDP over shm, world 2: the buckets' all-reduces, SyncBN's statistics and gradient
 *     sums and the BN buffer broadcast inside the recordings (host tasks in queue order),
 *     fp16 gradient compression, EMA.
 *  4. resume: a graphs run stopped mid-epoch by train.max_steps and resumed (`runner
 *     resume`, recording again in the new process) ends where an uninterrupted run without
 *     graphs ends.
 *  5. RUNNER_CPU_GRAPHS=stale: recordings reported stale now and then are recorded again
 *     (single: same bits); in DDP a stale recording fails the run with the reason (a rank
 *     cannot record alone).
 *  6. RUNNER_CPU_GRAPHS=fail / fail-rank1: a failed recording (one rank's, in DDP) turns
 *     graphs off for every rank with one console line, and the run ends as without graphs.
 *  7. the key: auto / true / false / yes parse, a bad value is exit 2 naming the choices;
 *     `runner plan` says on or off and why; the default is auto, which without the hook
 *     is off on the cpu (the cpu backend runs as before), with it on, and off for dp.
 */
#include "tests/cli/cli_util.h"

static char out[1 << 16];
static char tmp[512];

static const char *base_yaml =
    "name: %s\n"
    "seed: 11\n"
    "device: cpu\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 100, val_size: 40, image: [3, 12, 12], classes: 5}\n"
    "  workers: 1\n"
    "  augment: {random_crop: {size: 12, padding: 2}, horizontal_flip: true, rotation: 0}\n"
    "model: {arch: resnet20}\n"
    "schedule: {name: multistep, milestones: [2], gamma: 0.2, warmup_epochs: 1}\n"
    "train: {epochs: 3, batch_size: 32, eval_every: 1}\n"
    "parallel: {mode: single}\n"
    "logging: {print_every: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 1, resume: never}\n"
    "%s";

/* Writes tmp/NAME.yaml (base + extra keys); path gets its path. */
static void write_exp(char *path, size_t len, const char *name, const char *extra) {
    char text[4096];
    snprintf(text, sizeof text, base_yaml, name, extra);
    snprintf(path, len, "%s/%s.yaml", tmp, name);
    if (test_write_file(path, text)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static double summary_number(const char *dir, const char *key) { return cli_json_number(dir, "summary.json", key); }

/* The bit-for-bit comparison of two finished runs. */
static void same_runs(const char *on, const char *off, bool ema, bool fp16) {
    const char *sections[] = {"params", "buffers", "ema.params", "ema.buffers"};
    cli_check_same_sections(on, off, sections, ema ? 4 : 2);
    /* the optimizer's state arrays, whichever the optimizer has */
    char pa[4400];
    snprintf(pa, sizeof pa, "%s/checkpoints/last.ckpt", off);
    const char *states[] = {"optim.momentum_buffer", "optim.exp_avg", "optim.exp_avg_sq"};
    for (int i = 0; i < 3; i++) {
        size_t n = 0;
        void *s = ckpt_section_copy(pa, states[i], &n);
        if (s) cli_check_same_sections(on, off, &states[i], 1);
        free(s);
    }
    static const int step_cols[] = {0, 1, 2, 3, 4, 10, 11};   /* step..top1, loss_scale, grad_norm */
    cli_check_same_csv(on, off, "steps.csv", step_cols, 7);
    static const int metric_cols[] = {0, 1, 2, 3, 4, 5, 6, 7, 11, 12, 13};
    cli_check_same_csv(on, off, "metrics.csv", metric_cols, ema ? 11 : 8);
    /* the step control and the BN num_batches_tracked counters (host values the replays
     * advance by the recorded calls' delta) */
    cli_same_meta_counters(on, off);
    char counters[4096];
    cli_bn_counters(on, counters, sizeof counters);
    CHECK(strstr(counters, "[0") == NULL);   /* counted */
    if (fp16) CHECK(summary_number(off, "steps") > 0);
    CHECK(summary_number(off, "graph_recordings") == 0);
    CHECK(summary_number(off, "graph_launches") == 0);
}

/* Runs EXP with graphs auto and false (the hook on for both) and compares them; returns the
 * graphs run's directory in on (and the reference's in off). */
static void on_equals_off(const char *exp, const char *root, const char *sets, char *on, char *off, bool ema,
                          bool fp16) {
    char a[2048], r[1024];
    setenv("RUNNER_CPU_GRAPHS", "1", 1);
    snprintf(r, sizeof r, "%s/%s-on", tmp, root);
    snprintf(a, sizeof a, "--set train.cuda_graphs=auto %s", sets);
    const char *d = cli_run(exp, r, a, 0, out, sizeof out);
    CHECK(d != NULL);
    snprintf(on, 4096, "%s", d ? d : "");
    CHECK(strstr(out, "recording a") == NULL);   /* no recording failed */
    snprintf(r, sizeof r, "%s/%s-off", tmp, root);
    snprintf(a, sizeof a, "--set train.cuda_graphs=false %s", sets);
    d = cli_run(exp, r, a, 1, out, sizeof out);
    CHECK(d != NULL);
    snprintf(off, 4096, "%s", d ? d : "");
    unsetenv("RUNNER_CPU_GRAPHS");
    if (on[0] && off[0]) same_runs(on, off, ema, fp16);
}

/* 100 samples, global batch 32: per epoch 3 steps of 32 and one of 4. With 2 micro-batches
 * of 16 (CPU loader: a segment each) the epoch is micro-batches 16,16 | 16,16 | 16,16 | 4,
 * so the training keys are (segment 0 of 2), (segment 1 of 2, last 16), (1 of 1, last 4):
 * each recorded on its second run. Evaluation: 40 samples in batches of 32 and 8. */
static void single_fp32_recipe(void) {
    char exp[700], on[4096], off[4096];
    write_exp(exp, sizeof exp, "single",
              "optimizer: {name: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4, "
              "clip_grad_norm: 0.5}\n");
    setenv("RUNNER_STEP_WINDOW", "3", 1);
    on_equals_off(exp, "single",
                  "--set train.grad_accum=2 --set train.ema.decay=0.9 --set train.ema.warmup=true "
                  "--set data.mixup.alpha=0.4 --set data.mixup.cutmix_alpha=1.0 --set train.label_smoothing=0.1",
                  on, off, true, false);
    unsetenv("RUNNER_STEP_WINDOW");
    if (!on[0]) return;
    CHECK(summary_number(on, "steps") == 12);
    /* recordings: the 3 training keys and the 2 evaluation batch sizes (16 and 8; the EMA
     * pass uses the same ones). Launches: training, the full steps' 2 segments from the
     * second step on (2 x (2 + 3 + 3)) and the short step in epochs 2 and 3 (2) = 18;
     * evaluation (16, 16, 8 per pass, the weights' then the EMA's), epoch 1: 16 recorded at
     * its second batch, 8 at the EMA pass (1 + 3 = 4), epochs 2 and 3: 6 each = 16 */
    CHECK_INT((int)summary_number(on, "graph_recordings"), 5);
    CHECK_INT((int)summary_number(on, "graph_launches"), 18 + 16);
    /* and the plan said so */
    char p[4400];
    snprintf(p, sizeof p, "%s/plan.json", on);
    char *plan = test_read_file(p, NULL);
    CHECK_CONTAINS(plan, "\"cuda_graphs\": true");
    CHECK_CONTAINS(plan, "train.cuda_graphs auto: each step");
    free(plan);
}

static void single_fp16_loss_scaler(void) {
    char exp[700], on[4096], off[4096];
    write_exp(exp, sizeof exp, "half",
              "optimizer: {name: adamw, lr: 0.003, weight_decay: 0.05}\n"
              "amp: {enabled: true, dtype: fp16, init_scale: 8388608.0, growth_interval: 2}\n");
    on_equals_off(exp, "half", "", on, off, false, true);
    if (!on[0]) return;
    /* the scale overflowed, backed off step by step and then grew: the loss_scale column
     * (compared above) moved both ways, inside replays */
    double scale[16];
    char path[4400];
    snprintf(path, sizeof path, "%s/steps.csv", on);
    int col = 10, rows = 0;
    char *s = test_read_file(path, NULL), *save = NULL;
    for (char *line = s ? strtok_r(s, "\n", &save) : NULL; line && rows < 16; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] < '0' || line[0] > '9') continue;
        const char *c = line;
        for (int k = 0; k < col && c; k++) c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL;
        scale[rows++] = c ? strtod(c, NULL) : 0;
    }
    free(s);
    CHECK_INT(rows, 12);
    bool down = false, up = false;
    for (int i = 1; i < rows; i++) {
        down |= scale[i] < scale[i - 1];
        up |= scale[i] > scale[i - 1];
    }
    CHECK(down && up);
    CHECK(summary_number(on, "graph_launches") > 0);
}

static void ddp_shm_world2(void) {
    char exp[700], on[4096], off[4096];
    write_exp(exp, sizeof exp, "ddp",
              "optimizer: {name: sgd, lr: 0.1, momentum: 0.9, weight_decay: 5.0e-4}\n");
    on_equals_off(exp, "ddp",
                  "--set train.ema.decay=0.8 --set parallel.mode=ddp --set parallel.world_size=2 "
                  "--set parallel.backend=shm --set parallel.sync_bn=true --set parallel.grad_compression=fp16 "
                  "--set parallel.bucket_mb=0.05 --set train.grad_accum=2",
                  on, off, true, false);
    if (!on[0]) return;
    /* rank 0: 2 micro-batches of 8 per step: per epoch 3 steps of 8 + 8 and one of 2 (3
     * training keys), its evaluation shard of 20 in batches of 8, 8 and 4 (2 more); launches
     * counted as in single_fp32_recipe: training 18, evaluation 16 */
    CHECK_INT((int)summary_number(on, "graph_recordings"), 5);
    CHECK_INT((int)summary_number(on, "graph_launches"), 34);
    char p[4400];
    snprintf(p, sizeof p, "%s/plan.json", on);
    char *plan = test_read_file(p, NULL);
    CHECK_CONTAINS(plan, "all-reduces included");
    free(plan);
}

static void resume_mid_epoch(void) {
    char exp[700], ref[4096], r[1024], args[4600];
    write_exp(exp, sizeof exp, "res",
              "optimizer: {name: sgd, lr: 0.1, momentum: 0.9, weight_decay: 5.0e-4}\n"
              "amp: {enabled: true, dtype: fp16, init_scale: 65536.0, growth_interval: 3}\n");
    setenv("RUNNER_CPU_GRAPHS", "1", 1);
    snprintf(r, sizeof r, "%s/res-ref", tmp);
    const char *d = cli_run(exp, r, "--set train.cuda_graphs=false --set train.ema.decay=0.9", 2, out, sizeof out);
    CHECK(d != NULL);
    snprintf(ref, sizeof ref, "%s", d ? d : "");
    snprintf(r, sizeof r, "%s/res-cut", tmp);
    d = cli_run(exp, r, "--set train.cuda_graphs=true --set train.ema.decay=0.9 --set train.max_steps=6", 3, out,
                sizeof out);
    CHECK(d != NULL);
    if (d && ref[0]) {
        char cut[4096];
        snprintf(cut, sizeof cut, "%s", d);
        CHECK(summary_number(cut, "graph_launches") > 0);
        snprintf(args, sizeof args, "resume %s --set train.max_steps=null", cut);
        int rc = run_runner(args, out, sizeof out);
        CHECK_INT(rc, 0);
        CHECK_CONTAINS(out, "continuing at step 6");
        const char *sections[] = {"params", "buffers", "optim.momentum_buffer", "ema.params", "ema.buffers"};
        cli_check_same_sections(cut, ref, sections, 5);
        static const int step_cols[] = {0, 1, 2, 3, 4, 10};
        cli_check_same_csv(cut, ref, "steps.csv", step_cols, 6);
        CHECK(summary_number(cut, "graph_launches") > 0);   /* the resumed process recorded too */
    }
    unsetenv("RUNNER_CPU_GRAPHS");
}

static void stale_recordings(void) {
    char exp[700], on[4096], r[1024];
    write_exp(exp, sizeof exp, "stale", "optimizer: {name: sgd, lr: 0.1, momentum: 0.9}\n");
    setenv("RUNNER_CPU_GRAPHS", "1", 1);
    snprintf(r, sizeof r, "%s/stale-off", tmp);
    const char *d = cli_run(exp, r, "--set train.cuda_graphs=false", 4, out, sizeof out);
    CHECK(d != NULL);
    char off[4096];
    snprintf(off, sizeof off, "%s", d ? d : "");
    setenv("RUNNER_CPU_GRAPHS", "stale", 1);
    snprintf(r, sizeof r, "%s/stale-on", tmp);
    d = cli_run(exp, r, "--set train.cuda_graphs=true", 5, out, sizeof out);
    CHECK(d != NULL);
    snprintf(on, sizeof on, "%s", d ? d : "");
    if (on[0] && off[0]) {
        const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
        cli_check_same_sections(on, off, sections, 3);
        /* every 5th launch was stale and recorded again: more recordings than keys (4) */
        CHECK(summary_number(on, "graph_recordings") > 4);
    }
    /* DDP: a rank cannot record again alone */
    snprintf(r, sizeof r, "%s/stale-ddp", tmp);
    char args[2048];
    snprintf(args, sizeof args, "%s --set output.root=%s --set train.cuda_graphs=true --set parallel.mode=ddp "
             "--set parallel.world_size=2 --set parallel.backend=shm --set parallel.timeout_s=20", exp, r);
    int rc = run_runner(args, out, sizeof out);
    CHECK(rc != 0 && rc != 2);
    CHECK_CONTAINS(out, "a rank cannot record a DDP step again alone");
    unsetenv("RUNNER_CPU_GRAPHS");
}

/* A recording that fails turns graphs off with one console line and the run goes on
 * normally, to the same bits; in DDP one rank's failure (fail-rank1) makes every rank go
 * on without graphs, after agreeing on it. */
static void failed_recordings_fall_back(void) {
    char exp[700], r[1024], ref[4096];
    write_exp(exp, sizeof exp, "fallback", "optimizer: {name: sgd, lr: 0.1, momentum: 0.9}\n");
    const char *modes[2] = {"fail", "fail-rank1"};
    const char *sets[2] = {"", "--set parallel.mode=ddp --set parallel.world_size=2 --set parallel.backend=shm"};
    for (int k = 0; k < 2; k++) {
        char a[1024];
        setenv("RUNNER_CPU_GRAPHS", "1", 1);
        snprintf(r, sizeof r, "%s/fallback%d-off", tmp, k);
        snprintf(a, sizeof a, "--set train.cuda_graphs=false %s", sets[k]);
        const char *d = cli_run(exp, r, a, 6, out, sizeof out);
        CHECK(d != NULL);
        snprintf(ref, sizeof ref, "%s", d ? d : "");
        setenv("RUNNER_CPU_GRAPHS", modes[k], 1);
        snprintf(r, sizeof r, "%s/fallback%d-on", tmp, k);
        snprintf(a, sizeof a, "--set train.cuda_graphs=true %s", sets[k]);
        d = cli_run(exp, r, a, 7, out, sizeof out);
        CHECK(d != NULL);
        unsetenv("RUNNER_CPU_GRAPHS");
        if (!d || !ref[0]) continue;
        CHECK_CONTAINS(out, k == 0 ? "train.cuda_graphs: recording a step failed, running without graphs: cpu "
                                     "graphs: recording refused"
                                   : "train.cuda_graphs: recording a step failed on another rank");
        CHECK(summary_number(d, "graph_launches") == 0);
        const char *sections[] = {"params", "buffers", "optim.momentum_buffer"};
        cli_check_same_sections(d, ref, sections, 3);
        static const int step_cols[] = {0, 1, 2, 3, 4};
        cli_check_same_csv(d, ref, "steps.csv", step_cols, 5);
    }
}

static void the_key(void) {
    char exp[700], args[1024];
    write_exp(exp, sizeof exp, "key", "");
    unsetenv("RUNNER_CPU_GRAPHS");
    const char *vals[] = {"auto", "true", "false", "yes", "off"};
    const char *want[] = {"graphs       off: train.cuda_graphs auto: not here: the cpu backend",
                          "graphs       off: train.cuda_graphs true: not here: the cpu backend",
                          "graphs       off: train.cuda_graphs false",
                          "graphs       off: train.cuda_graphs true: not here",
                          "graphs       off: train.cuda_graphs false"};
    for (int i = 0; i < 5; i++) {
        snprintf(args, sizeof args, "plan %s --set train.cuda_graphs=%s", exp, vals[i]);
        CHECK_INT(run_runner(args, out, sizeof out), 0);
        CHECK_CONTAINS(out, want[i]);
    }
    /* the default is auto, which changes nothing on the cpu backend */
    snprintf(args, sizeof args, "plan %s", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "graphs       off: train.cuda_graphs auto: not here: the cpu backend runs ops as they are "
                   "issued");
    /* the hook makes the cpu a graph device: auto (given or the default) on, dp still off */
    setenv("RUNNER_CPU_GRAPHS", "1", 1);
    snprintf(args, sizeof args, "plan %s --set train.cuda_graphs=auto", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "graphs       on: train.cuda_graphs auto: each step (forward to optimizer)");
    snprintf(args, sizeof args, "plan %s", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "graphs       on: train.cuda_graphs auto: each step (forward to optimizer)");
    snprintf(args, sizeof args, "plan %s --set parallel.mode=dp --set parallel.world_size=2", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "graphs       off: train.cuda_graphs auto: not here: dp drives");
    snprintf(args, sizeof args, "plan %s --set train.cuda_graphs=true --set parallel.mode=dp "
             "--set parallel.world_size=2", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "graphs       off: train.cuda_graphs true: not here: dp drives");
    unsetenv("RUNNER_CPU_GRAPHS");
    snprintf(args, sizeof args, "plan %s --set train.cuda_graphs=sometimes", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "train.cuda_graphs");
    CHECK_CONTAINS(out, "auto");
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(the_key);
    TEST_RUN(single_fp32_recipe);
    TEST_RUN(single_fp16_loss_scaler);
    TEST_RUN(ddp_shm_world2);
    TEST_RUN(resume_mid_epoch);
    TEST_RUN(stale_recordings);
    TEST_RUN(failed_recordings_fall_back);
    int rc = test_main_end();
    if (rc == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        test_run_cmd(cmd, NULL, 0);
    }
    return rc;
}
