/* test_report_members.c: a report of run directories written the way the runner writes
 * them now (fixture.h fx_timed_run: timing.csv with every step): images/s is the
 * steady-state rate from every step, not a printed steps.csv row, so it cannot contradict
 * s/epoch (the dp_amp at "2.38x" but 3.06 s/epoch, while dp_bf16 was fastest);
 * runs of one configuration over seeds become one member with mean and spread; the
 * verdict reaches every rendering. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/report/report.h"
#include "tests/report/fixture.h"
#include "tests/test.h"

static char root[1024];

static const char *const config_dp = "parallel:\n  mode: dp                 # dp\n";
static const char *const config_amp = "parallel:\n  mode: dp\namp:\n  enabled: true\n  dtype: fp16\n";
static const char *const config_bf16 = "parallel:\n  mode: dp\namp:\n  enabled: true\n  dtype: bf16\n";

static char *slurp(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return test_read_file(path, NULL);
}

/* Three runs of 40 steps of 64 images (2560 per epoch), each with one steps.csv row.
 * The rows say dp 200, dp_amp 476 (2.38x) and dp_bf16 300 images/s, and the epoch times
 * 25, 3.06 and 1.80 s: read the old way, dp_amp is fastest by images/s and dp_bf16 by
 * s/epoch. Every step's time says dp 128 (0.5 s a step), dp_amp 160 (0.4 s), dp_bf16 320
 * (0.2 s). Before timing.csv, the report took images/s from the rows (476 for dp_amp) and
 * s/epoch from the epoch times. */
static void test_no_contradiction(void) {
    char dp[1200], amp[1200], bf16[1200], out[1200];
    snprintf(dp, sizeof dp, "%s/dp", root);
    snprintf(amp, sizeof amp, "%s/dp_amp", root);
    snprintf(bf16, sizeof bf16, "%s/dp_bf16", root);
    snprintf(out, sizeof out, "%s/out", root);
    fx_timed_run(dp, "dp", 0, config_dp, 64, 30, 0.5, 200, 25, 0.30);
    fx_timed_run(amp, "dp_amp", 0, config_amp, 64, 30, 0.4, 476, 3.06, 0.31);
    fx_timed_run(bf16, "dp_bf16", 0, config_bf16, 64, 30, 0.2, 300, 1.80, 0.32);
    report_input_t in[3] = {{.dir = dp}, {.dir = amp}, {.dir = bf16}};
    report_t r;
    err_t e;
    err_clear(&e);
    CHECK_INT(report_build(in, 3, "cmp", &r, &e), 0);
    CHECK_INT(r.n_groups, 3);
    if (r.n != 3 || r.n_groups != 3) { report_free(&r); return; }
    const double ips[3] = {128, 160, 320};
    for (int i = 0; i < 3; i++) {
        const report_row_t *w = &r.rows[i];
        CHECK_NEAR(w->images_per_second, ips[i], 1e-9, 0);
        CHECK_NEAR(w->seconds_per_epoch, 2560 / ips[i], 1e-9, 0);
        CHECK_NEAR(w->images_per_second * w->seconds_per_epoch, 2560, 1e-9, 0);
        CHECK_INT(w->steady_steps, 30);
        CHECK_INT(w->warmup_steps, 10);
        CHECK_NEAR(w->steady_seconds, 30 * 64 / ips[i], 1e-9, 0);
        CHECK_STR(w->ips_from, "timing.csv");
        CHECK_STR(w->seed, "0");
        CHECK_STR(w->note, "");
    }
    CHECK_NEAR(r.rows[1].speedup, 1.25, 1e-12, 0);
    CHECK_NEAR(r.groups[2].seconds_per_epoch, 8, 1e-9, 0);
    /* every step of a run takes the same time: its noise is zero, so the order is certain */
    CHECK_INT(r.verdict.speed_kind, SPEED_CLEAR);
    CHECK_STR(r.verdict.speed, "Fastest: dp_bf16, 2.00x the throughput of dp_amp, the next fastest (95% interval "
                               "2.00x to 2.00x; 320 vs 160 images/s).");
    CHECK_INT(r.verdict.accuracy_kind, ACC_UNKNOWN);
    CHECK_STR(r.verdict.accuracy, "Accuracy noise unknown: one seed per member, so the final val top-1 spread of "
                                  "2.00 points (30.00% for dp to 32.00% for dp_bf16) cannot be told from seed noise. "
                                  "Set repeats: 3 or more in the matrix file.");
    CHECK_INT(report_write(&r, out, &e), 0);
    report_free(&r);
    char *csv = slurp(out, "comparison.csv"), *md = slurp(out, "comparison.md"), *html = slurp(out, "report.html");
    char line[4096];
    snprintf(line, sizeof line, "\ndp_amp,dp,2,fp32,64,cpu,160,16,1.25,,1000,0.31,0.31,1,completed,0,%s,,dp_amp,0,30,10,"
             "12,0,timing.csv,1,160,,160,160,16,1.25,1.25,1.25,0.31,,0.31,0.31,0.31,,0.31,0.31,0,\n", amp);
    CHECK_CONTAINS(csv, line);
    CHECK_CONTAINS(csv, ",0.32,,0.32,0.32,0.32,,0.32,0.32,1,\n");   /* dp_bf16: member_fastest 1 */
    CHECK_CONTAINS(md, "# cmp\n\n**Fastest: dp_bf16, 2.00x the throughput of dp_amp, the next fastest");
    CHECK_CONTAINS(md, "| dp_bf16 | 1 | 320.0 |  | 30 | 8.00 | 2.50x (2.50\xe2\x80\x93" "2.50) | 32.00% |  | 32.00% |");
    CHECK_CONTAINS(md, "| dp_amp | 0 | dp | 2 | fp32 | 64 | cpu | 160.0 | 30 | 16.00 | 1.25x |");
    /* the verdict is the first thing on the page, in the green box, its lead in bold */
    const char *verdict = strstr(html, "<div class=\"verdict\">");
    CHECK(verdict && verdict < strstr(html, "<table"));
    CHECK_CONTAINS(html, "<p class=\"good\"><b>Fastest:</b> dp_bf16, 2.00x the throughput of dp_amp");
    CHECK_CONTAINS(html, "<p class=\"warn\"><b>Accuracy noise unknown:</b> one seed per member");
    CHECK_CONTAINS(html, "<tr class=\"best\"><td class=\"name\">");
    free(csv);
    free(md);
    free(html);
}

/* `runner report a0 a1 b0`: a0 and a1 are one configuration with seeds 0 and 1 (their
 * resolved.yaml differ in seed and in a comment), b0 another: two members. */
static void test_seed_groups(void) {
    char a0[1200], a1[1200], b0[1200], out[1200];
    snprintf(a0, sizeof a0, "%s/a0", root);
    snprintf(a1, sizeof a1, "%s/a1", root);
    snprintf(b0, sizeof b0, "%s/b0", root);
    snprintf(out, sizeof out, "%s/out_groups", root);
    fx_timed_run(a0, "a", 0, config_dp, 64, 30, 0.5, 1, 25, 0.40);   /* 128 images/s */
    fx_timed_run(a1, "a", 1, config_dp, 64, 30, 0.4, 1, 25, 0.44);   /* 160 */
    fx_timed_run(b0, "b", 0, config_bf16, 64, 30, 0.25, 1, 25, 0.40); /* 256 */
    const char *dirs[] = {a0, b0, a1};
    err_t e;
    err_clear(&e);
    CHECK_INT(report_runs(dirs, 3, out, NULL, &e), 0);
    if (e.code) fprintf(stderr, "%s\n", e.msg);
    char *md = slurp(out, "comparison.md"), *csv = slurp(out, "comparison.csv");
    /* a: mean 144, std sqrt(2) * 16 = 22.6, range 128-160, s/epoch 2560 / 144 */
    CHECK_CONTAINS(md, "| a | 2 | 144.0 \xc2\xb1 22.6 | 128.0\xe2\x80\x93" "160.0 | 30 | 17.78 | 1.00x | 42.00% \xc2\xb1 2.83 |");
    CHECK_CONTAINS(md, "| b | 1 | 256.0 |  | 30 | 10.00 |");
    CHECK_CONTAINS(md, "| a | 0 | dp |");
    CHECK_CONTAINS(md, "| a (a1) | 1 | dp |");
    /* b's one run has no spread; a's two seeds give 1 degree of freedom: t95 = 12.7, so
     * 256 against 144 +- 16 is within noise */
    CHECK_CONTAINS(md, "**No clear fastest: b (256 images/s) is ahead, but a is within noise of it (b is 1.78x a, "
                       "95% interval ");
    CHECK_CONTAINS(md, "**Accuracy noise unknown: the other members have one seed each, so the final val top-1 "
                       "spread of 2.00 points (40.00% for b to 42.00% for a)");
    char line[2048];
    snprintf(line, sizeof line, "\na (a1),dp,2,fp32,64,cpu,160,16,1.111111111,,1000,0.44,0.44,1,completed,0,%s,,a,1,30,"
             "10,12,0,timing.csv,2,144,22.627417,128,160,17.77777778,1,,,0.42,", a1);
    CHECK_CONTAINS(csv, line);
    free(md);
    free(csv);
    /* the throughput chart has one bar per member and a's range as a whisker */
    char *svg = slurp(out, "plots/throughput.svg");
    int bars = 0;
    for (const char *p = svg; p && (p = strstr(p, "<rect x=")); p++) bars++;
    CHECK_INT(bars, 2);
    CHECK_CONTAINS(svg, ">144.0</text>");
    CHECK_CONTAINS(svg, "stroke=\"#222222\"");
    free(svg);
}

/* `runner report` of runs/a and runs/b, where each experiment ran twice with seed 0 (the same
 * command again with checkpoint.resume=never): a repeated seed is no second seed. Before,
 * each member's accuracy was "over 2 seeds" with a spread of 0 and the verdict compared
 * 40% and 50% as if the seed noise were known. */
static void test_repeated_seed(void) {
    char a0[1200], a0r[1200], b0[1200], b0r[1200], out[1200];
    snprintf(a0, sizeof a0, "%s/ra0", root);
    snprintf(a0r, sizeof a0r, "%s/ra0r", root);
    snprintf(b0, sizeof b0, "%s/rb0", root);
    snprintf(b0r, sizeof b0r, "%s/rb0r", root);
    snprintf(out, sizeof out, "%s/out_repeated", root);
    fx_timed_run(a0, "a", 0, config_dp, 64, 30, 0.5, 1, 25, 0.40);
    fx_timed_run(a0r, "a", 0, config_dp, 64, 30, 0.4, 1, 25, 0.40);
    fx_timed_run(b0, "b", 0, config_bf16, 64, 30, 0.25, 1, 25, 0.50);
    fx_timed_run(b0r, "b", 0, config_bf16, 64, 30, 0.25, 1, 25, 0.50);
    const char *dirs[] = {a0, a0r, b0, b0r};
    err_t e;
    err_clear(&e);
    CHECK_INT(report_runs(dirs, 4, out, NULL, &e), 0);
    if (e.code) fprintf(stderr, "%s\n", e.msg);
    char *md = slurp(out, "comparison.md");
    /* throughput: both runs count (a: 128 and 160 images/s); accuracy: one value per seed */
    CHECK_CONTAINS(md, "| a | 2 | 144.0 \xc2\xb1 22.6 | 128.0\xe2\x80\x93" "160.0 | 30 | 17.78 | 1.00x | 40.00% |  |");
    CHECK_CONTAINS(md, "**Accuracy noise unknown: one seed per member, so the final val top-1 spread of 10.00 "
                       "points (40.00% for a to 50.00% for b) cannot be told from seed noise.");
    free(md);
}

int main(void) {
    if (test_tmpdir(root, sizeof root)) return 1;
    TEST_RUN(test_no_contradiction);
    TEST_RUN(test_seed_groups);
    TEST_RUN(test_repeated_seed);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_main_end();
}
