/* test_check.c: the regression gate (runner/report/check.h): verdicts and exit codes for
 * passing, regressing and malformed baselines, and the default summary-vs-summary
 * tolerances exactly at their edges. */
#include <stdlib.h>
#include <string.h>

#include "runner/report/check.h"
#include "tests/report/fixture.h"
#include "tests/test.h"

static char root[1024], run[1100], base_path[1100];

/* Writes run/summary.json with these numbers. */
static void set_run(double val_top1, double train_loss, double ips, const char *status) {
    char buf[1024];
    snprintf(buf, sizeof buf, "{\"name\": \"ci_smoke\", \"status\": \"%s\", \"val_top1\": %.17g, "
             "\"train_loss\": %.17g, \"images_per_second\": %.17g, \"epochs\": 3}\n",
             status, val_top1, train_loss, ips);
    fx_write(run, "summary.json", buf);
}

/* Runs the gate against baseline text; returns the exit code, output in out. */
static int gate(const char *baseline, char *out, size_t cap, err_t *e) {
    test_write_file(base_path, baseline);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    err_clear(e);
    int code = check_run(run, base_path, f, e);
    fclose(f);
    snprintf(out, cap, "%s", text ? text : "");
    free(text);
    return code;
}

static const char *const explicit_ok =
    "{\"note\": \"ci\", \"metrics\": {\"val_top1\": {\"min\": 0.85}, \"images_per_second\": {\"min\": 1500},"
    " \"train_loss\": {\"max\": 0.3}}}";

static void test_explicit_pass(void) {
    char out[4096];
    err_t e;
    set_run(0.9, 0.25, 1600, "completed");
    CHECK_INT(gate(explicit_ok, out, sizeof out, &e), CHECK_PASS);
    CHECK_CONTAINS(out, "metric                   value          bound                        verdict\n");
    CHECK_CONTAINS(out, "status                   completed      completed                    ok\n");
    CHECK_CONTAINS(out, "val_top1                 0.9            >= 0.85                      ok\n");
    CHECK_CONTAINS(out, "images_per_second        1600           >= 1500                      ok\n");
    CHECK_CONTAINS(out, "train_loss               0.25           <= 0.3                       ok\n");
    CHECK_CONTAINS(out, "check passed against");
    CHECK_CONTAINS(out, ": 3 ok\n");
}

static void test_explicit_regressions(void) {
    char out[4096];
    err_t e;
    set_run(0.84, 0.25, 1600, "completed");
    CHECK_INT(gate(explicit_ok, out, sizeof out, &e), CHECK_FAIL);
    CHECK_CONTAINS(out, "val_top1                 0.84           >= 0.85                      REGRESSED\n");
    CHECK_CONTAINS(out, "2 ok, 1 regressed, 0 missing");

    set_run(0.9, 0.31, 1600, "completed");
    CHECK_INT(gate(explicit_ok, out, sizeof out, &e), CHECK_FAIL);
    CHECK_CONTAINS(out, "train_loss               0.31           <= 0.3                       REGRESSED\n");

    set_run(0.9, 0.25, 1499, "completed");
    CHECK_INT(gate(explicit_ok, out, sizeof out, &e), CHECK_FAIL);
    CHECK_CONTAINS(out, "images_per_second        1499           >= 1500                      REGRESSED\n");

    /* min and max together */
    set_run(0.9, 0.25, 1600, "completed");
    CHECK_INT(gate("{\"metrics\": {\"epochs\": {\"min\": 4, \"max\": 5}}}", out, sizeof out, &e), CHECK_FAIL);
    CHECK_CONTAINS(out, "epochs                   3              >= 4 and <= 5                REGRESSED\n");
    CHECK_INT(gate("{\"metrics\": {\"epochs\": {\"min\": 3, \"max\": 3}}}", out, sizeof out, &e), CHECK_PASS);

    /* a metric the run does not report fails the gate as "missing" */
    CHECK_INT(gate("{\"metrics\": {\"val_top5\": {\"min\": 0.5}}}", out, sizeof out, &e), CHECK_FAIL);
    CHECK_CONTAINS(out, "val_top5                 -              >= 0.5                       missing\n");
    CHECK_CONTAINS(out, "0 ok, 0 regressed, 1 missing");

    /* an interrupted run fails even when its numbers are fine */
    set_run(0.9, 0.25, 1600, "interrupted");
    CHECK_INT(gate(explicit_ok, out, sizeof out, &e), CHECK_FAIL);
    CHECK_CONTAINS(out, "status                   interrupted    completed                    REGRESSED\n");
    CHECK_CONTAINS(out, "3 ok, 1 regressed, 0 missing");
}

/* The bad-input cases: exit code 2 and one message naming the file and the place. */
static void test_malformed(void) {
    char out[4096];
    err_t e;
    set_run(0.9, 0.25, 1600, "completed");
    struct { const char *text, *msg; } cases[] = {
        {"{\"metrics\": {\"val_top1\": {\"min\": 0.9}}", "line 1, column 39: expected ',' or '}'"},
        {"{\"metrics\":\n  {\"val_top1\": {\"min\": 0.9,}}}", "line 2, column 28: expected a string key"},
        {"[1, 2]", "the baseline is an array"},
        {"{\"metrics\": []}", "\"metrics\" must be a non-empty object"},
        {"{\"metrics\": {}}", "it is empty"},
        {"{\"metrics\": {\"val_top1\": 0.9}}", "metrics.val_top1 is a number; write an object like"},
        {"{\"metrics\": {\"val_top1\": {\"min\": \"0.9\"}}}", "metrics.val_top1.min is a string; it must be a number"},
        {"{\"metrics\": {\"val_top1\": {\"lower\": 0.9}}}", "metrics.val_top1.lower: unknown key; use \"min\" and/or \"max\""},
        {"{\"metrics\": {\"val_top1\": {}}}", "metrics.val_top1 has no bound"},
        {"{\"metrics\": {\"val_top1\": {\"min\": 0.9, \"max\": 0.8}}}", "min 0.9 is above max 0.8"},
        {"{\"metrics\": {\"val_top1\": {\"min\": 0.9}}, \"tolerance\": 1}", "unknown top-level key 'tolerance'"},
        {"{\"val\": 0.9}", "not a baseline: expected {\"metrics\""},
        {"{\"val_top1\": 0.9, \"train_loss\": null, \"images_per_second\": 5}",
         "the baseline summary has null for \"train_loss\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int code = gate(cases[i].text, out, sizeof out, &e);
        if (code != CHECK_BAD_INPUT) fprintf(stderr, "case %zu: %s\n", i, cases[i].text);
        CHECK_INT(code, CHECK_BAD_INPUT);
        CHECK_INT(e.code, ERR_INPUT);
        CHECK_CONTAINS(e.msg, base_path);
        CHECK_CONTAINS(e.msg, cases[i].msg);
        CHECK_STR(out, "");   /* no half table */
    }
    /* missing baseline file */
    err_clear(&e);
    CHECK_INT(check_run(run, "/nonexistent/baseline.json", NULL, &e), CHECK_BAD_INPUT);
    CHECK_CONTAINS(e.msg, "/nonexistent/baseline.json: cannot open");
    /* missing run directory, missing and malformed summary.json */
    test_write_file(base_path, explicit_ok);
    err_clear(&e);
    CHECK_INT(check_run("/nonexistent/run", base_path, NULL, &e), CHECK_BAD_INPUT);
    CHECK_CONTAINS(e.msg, "/nonexistent/run: not a directory");
    char empty[1200];
    snprintf(empty, sizeof empty, "%s/empty", root);
    fx_write(empty, "metrics.csv", METRICS_HEADER);
    err_clear(&e);
    CHECK_INT(check_run(empty, base_path, NULL, &e), CHECK_BAD_INPUT);
    CHECK_CONTAINS(e.msg, "/empty/summary.json: missing");
    fx_write(empty, "summary.json", "{\"val_top1\": 0.9 \"x\": 1}");
    err_clear(&e);
    CHECK_INT(check_run(empty, base_path, NULL, &e), CHECK_BAD_INPUT);
    CHECK_CONTAINS(e.msg, "summary.json: line 1, column 18");
}

/* A baseline that is another run's summary: default tolerances, checked at the edges. */
static void test_summary_baseline_edges(void) {
    char out[4096];
    err_t e;
    const char *base = "{\"name\": \"ref\", \"status\": \"completed\", \"val_top1\": 0.9, \"train_loss\": 0.25,"
                       " \"images_per_second\": 1600, \"best_val_top1\": 0.91}";
    check_baseline_t b;
    test_write_file(base_path, base);
    err_clear(&e);
    CHECK_INT(check_load_baseline(base_path, &b, &e), 0);
    CHECK(b.from_summary);
    CHECK_INT(b.n, 3);
    CHECK_NEAR(b.bounds[0].min, 0.895, 1e-12, 0);
    CHECK_NEAR(b.bounds[1].max, 0.255, 1e-12, 0);
    CHECK_NEAR(b.bounds[2].min, 1440, 1e-9, 0);

    set_run(0.895, 0.25, 1600, "completed");   /* exactly 0.5 points lower */
    CHECK_INT(gate(base, out, sizeof out, &e), CHECK_PASS);
    set_run(0.8949, 0.25, 1600, "completed");  /* 0.51 points lower */
    CHECK_INT(gate(base, out, sizeof out, &e), CHECK_FAIL);
    CHECK_CONTAINS(out, "val_top1                 0.8949         >= 0.895                     REGRESSED\n");
    set_run(0.9, 0.255, 1600, "completed");    /* exactly 2% higher */
    CHECK_INT(gate(base, out, sizeof out, &e), CHECK_PASS);
    set_run(0.9, 0.25505, 1600, "completed");  /* 2.02% higher */
    CHECK_INT(gate(base, out, sizeof out, &e), CHECK_FAIL);
    CHECK_CONTAINS(out, "train_loss               0.25505        <= 0.255                     REGRESSED\n");
    set_run(0.9, 0.25, 1440, "completed");     /* exactly 10% slower */
    CHECK_INT(gate(base, out, sizeof out, &e), CHECK_PASS);
    set_run(0.9, 0.25, 1439.8, "completed");   /* 10.01% slower */
    CHECK_INT(gate(base, out, sizeof out, &e), CHECK_FAIL);
    CHECK_CONTAINS(out, "images_per_second        1439.8         >= 1440                      REGRESSED\n");
    set_run(0.95, 0.1, 3000, "completed");     /* better everywhere */
    CHECK_INT(gate(base, out, sizeof out, &e), CHECK_PASS);
}

/* The repository's CI baseline parses and uses the explicit form with the three keys. */
static void test_ci_smoke_baseline(void) {
    char path[2048];
    snprintf(path, sizeof path, "%s/experiments/baselines/ci_smoke.json", test_source_dir());
    check_baseline_t b;
    err_t e;
    err_clear(&e);
    CHECK_INT(check_load_baseline(path, &b, &e), 0);
    if (e.msg[0]) fprintf(stderr, "%s\n", e.msg);
    CHECK(!b.from_summary);
    CHECK_INT(b.n, 3);
    int seen = 0;
    for (int i = 0; i < b.n; i++) {
        if (!strcmp(b.bounds[i].metric, "val_top1") && !isnan(b.bounds[i].min)) seen |= 1;
        if (!strcmp(b.bounds[i].metric, "train_loss") && !isnan(b.bounds[i].max)) seen |= 2;
        if (!strcmp(b.bounds[i].metric, "images_per_second") && !isnan(b.bounds[i].min)) seen |= 4;
    }
    CHECK_INT(seen, 7);
}

int main(void) {
    if (test_tmpdir(root, sizeof root)) return 1;
    snprintf(run, sizeof run, "%s/run", root);
    snprintf(base_path, sizeof base_path, "%s/baseline.json", root);
    TEST_RUN(test_explicit_pass);
    TEST_RUN(test_explicit_regressions);
    TEST_RUN(test_malformed);
    TEST_RUN(test_summary_baseline_edges);
    TEST_RUN(test_ci_smoke_baseline);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_main_end();
}
