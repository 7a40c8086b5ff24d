/* test_report_cli.c: `runner report` and `runner check` through the runner binary: the
 * exit codes (0 / 1 / 2), the printed table and the files, on hand-made run directories
 * (fixture.h). Label e2e: it needs the runner executable. */
#include <stdlib.h>
#include <string.h>

#include "tests/report/fixture.h"
#include "tests/test.h"

static char root[1024], run_a[1100], run_b[1100];
static char out[65536];

/* Runs the runner with args; returns its exit status, output in `out`. */
static int runner(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s", test_runner_exe(), args);
    return test_run_cmd(cmd, out, sizeof out);
}

static void test_report_verb(void) {
    char args[4096], path[2048];
    snprintf(args, sizeof args, "report '%s' '%s' --output '%s/rep'", run_a, run_b, root);
    CHECK_INT(runner(args), 0);
    CHECK_CONTAINS(out, "| single |  | single | 1 | fp32 | 128 | cpu | 200.0 |  | 11.00 | 1.00x | 0.0% |");
    CHECK_CONTAINS(out, "| ddp |  | ddp | 2 | fp32 | 128 | cpu | 410.0 |  | 5.50 | 2.05x | 20.0% |");
    snprintf(path, sizeof path, "%s/rep/report.html", root);
    char *html = test_read_file(path, NULL);
    CHECK_CONTAINS(html, "<svg");
    free(html);
    snprintf(path, sizeof path, "%s/rep/comparison.csv", root);
    char *csv = test_read_file(path, NULL);
    CHECK_CONTAINS(csv, "\nddp,ddp,2,fp32,128,cpu,410,5.5,2.05,20,3000000,0.58,0.58,1.25,completed,0,");
    free(csv);

    snprintf(args, sizeof args, "report '%s/nope' --output '%s/rep2'", root, root);
    CHECK_INT(runner(args), 2);
    CHECK_CONTAINS(out, "/nope: not a directory");

    char bad[1200];
    snprintf(bad, sizeof bad, "%s/bad", root);
    fx_run_single(bad);
    fx_write(bad, "steps.csv", STEPS_HEADER "30,1,0.1,1.0,0.5,abc,0.5,0.5,0,0.01,\n");
    snprintf(args, sizeof args, "report '%s' --output '%s/rep3'", bad, root);
    CHECK_INT(runner(args), 2);
    CHECK_CONTAINS(out, "steps.csv: line 2, column 6 (images_per_second): 'abc' is not a number");
}

static void test_check_verb(void) {
    char args[4096], base[1200];
    snprintf(base, sizeof base, "%s/baseline.json", root);
    test_write_file(base, "{\"metrics\": {\"val_top1\": {\"min\": 0.1}, \"train_loss\": {\"max\": 10}, "
                    "\"images_per_second\": {\"min\": 500}}}");
    snprintf(args, sizeof args, "check '%s' --baseline '%s'", run_a, base);
    CHECK_INT(runner(args), 0);   /* summary: val_top1 0.11, train_loss 9.5, images/s 999 */
    CHECK_CONTAINS(out, "images_per_second        999            >= 500                       ok");
    CHECK_CONTAINS(out, "check passed");

    test_write_file(base, "{\"metrics\": {\"images_per_second\": {\"min\": 1000}}}");
    CHECK_INT(runner(args), 1);
    CHECK_CONTAINS(out, "images_per_second        999            >= 1000                      REGRESSED");

    test_write_file(base, "{\"metrics\": {\"images_per_second\": {\"min\": 1000}}");
    CHECK_INT(runner(args), 2);
    CHECK_CONTAINS(out, "baseline.json: line 1, column 49");

    /* summary-vs-summary: a run against itself passes */
    snprintf(args, sizeof args, "check '%s' --baseline '%s/summary.json'", run_a, run_a);
    CHECK_INT(runner(args), 0);
}

int main(void) {
    if (test_tmpdir(root, sizeof root)) return 1;
    snprintf(run_a, sizeof run_a, "%s/single", root);
    snprintf(run_b, sizeof run_b, "%s/ddp", root);
    fx_run_single(run_a);
    fx_run_ddp(run_b);
    TEST_RUN(test_report_verb);
    TEST_RUN(test_check_verb);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_main_end();
}
