/* test_report.c: the numbers, files and errors of runner/report/report.h and plot.h,
 * from hand-made run directories (fixture.h) with known values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "runner/report/plot.h"
#include "runner/report/report.h"
#include "runner/report/runread.h"
#include "tests/report/fixture.h"
#include "tests/test.h"

static char root[1024], dir_single[1100], dir_ddp[1100], dir_dp_amp[1100];

static void make_runs(void) {
    if (test_tmpdir(root, sizeof root)) { fprintf(stderr, "no tmpdir\n"); exit(1); }
    snprintf(dir_single, sizeof dir_single, "%s/single", root);
    snprintf(dir_ddp, sizeof dir_ddp, "%s/ddp", root);
    snprintf(dir_dp_amp, sizeof dir_dp_amp, "%s/dp_amp", root);
    fx_run_single(dir_single);
    fx_run_ddp(dir_ddp);
    fx_run_dp_amp(dir_dp_amp);
}

static int build3(report_t *r, err_t *e) {
    report_input_t in[3] = {{.dir = dir_single}, {.dir = dir_ddp}, {.dir = dir_dp_amp}};
    return report_build(in, 3, "cmp", r, e);
}

static void test_median(void) {
    double a[] = {3, 1, 2}, b[] = {4, NAN, 1, 3, 2}, c[] = {NAN};
    CHECK_NEAR(stats_median(a, 3), 2.0, 0, 0);
    CHECK_NEAR(stats_median(b, 5), 2.5, 0, 0);
    CHECK(isnan(stats_median(c, 1)));
    CHECK(isnan(stats_median(a, 0)));
}

static void test_rows(void) {
    report_t r;
    err_t e;
    err_clear(&e);
    CHECK_INT(build3(&r, &e), 0);
    CHECK_INT(r.n, 3);
    if (r.n != 3) { report_free(&r); return; }
    const report_row_t *s = &r.rows[0], *d = &r.rows[1], *a = &r.rows[2];
    CHECK_STR(s->name, "single");
    CHECK_STR(s->mode, "single");
    CHECK_INT(s->world_size, 1);
    CHECK_STR(s->precision, "fp32");
    CHECK_INT(s->batch_size, 128);
    CHECK_STR(s->device, "cpu");
    CHECK_NEAR(s->images_per_second, 200.0, 0, 0);
    CHECK_NEAR(s->seconds_per_epoch, 11.0, 0, 0);
    CHECK_NEAR(s->speedup, 1.0, 0, 0);
    CHECK_NEAR(s->comm_exposed_pct, 0.0, 0, 0);
    CHECK_NEAR(s->peak_memory_bytes, 2000000.0, 0, 0);
    CHECK_NEAR(s->final_val_top1, 0.52, 0, 0);
    CHECK_NEAR(s->best_val_top1, 0.56, 0, 0);
    CHECK_NEAR(s->final_train_loss, 1.2, 0, 0);
    CHECK_STR(s->status, "completed");
    CHECK_INT(s->n_epochs, 3);
    CHECK_NEAR(s->wall_seconds[2], 33.0, 0, 0);
    CHECK_NEAR(s->wall_seconds[1], 22.0, 0, 0);

    CHECK_NEAR(d->images_per_second, 410.0, 0, 0);
    CHECK_NEAR(d->speedup, 2.05, 1e-12, 0);
    CHECK_NEAR(d->comm_exposed_pct, 20.0, 1e-9, 0);
    CHECK_NEAR(d->seconds_per_epoch, 5.5, 0, 0);
    CHECK_NEAR(d->final_val_top1, 0.58, 0, 0);
    CHECK_NEAR(d->best_val_top1, 0.58, 0, 0);
    CHECK(isnan(d->val_top1[1]));
    CHECK_NEAR(d->peak_memory_bytes, 3000000.0, 0, 0);   /* column empty: summary.json */
    CHECK_INT(d->world_size, 2);

    CHECK_NEAR(a->images_per_second, 300.0, 0, 0);       /* no steps.csv: summary.json */
    CHECK_NEAR(a->speedup, 1.5, 1e-12, 0);
    CHECK_NEAR(a->comm_exposed_pct, 12.5, 1e-12, 0);
    CHECK_NEAR(a->seconds_per_epoch, 8.5, 0, 0);
    CHECK_STR(a->precision, "fp16");
    CHECK(a->env == NULL);
    report_free(&r);
}

static char *slurp(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return test_read_file(path, NULL);
}

static void test_files(void) {
    report_t r;
    err_t e;
    err_clear(&e);
    char out[1200];
    snprintf(out, sizeof out, "%s/out/nested", root);
    CHECK_INT(build3(&r, &e), 0);
    CHECK_INT(report_write(&r, out, &e), 0);
    report_free(&r);
    char *csv = slurp(out, "comparison.csv"), *md = slurp(out, "comparison.md"), *html = slurp(out, "report.html");
    CHECK(csv && md && html);
    if (!csv || !md || !html) { free(csv); free(md); free(html); return; }
    char line[4096];
    CHECK(!strncmp(csv, REPORT_CSV_HEADER, strlen(REPORT_CSV_HEADER)));
    /* run directories from an older runner: no timing.csv, so the rates are the old ones,
     * marked, each run its own member (no resolved.yaml), not ranked */
    snprintf(line, sizeof line, "\nsingle,single,1,fp32,128,cpu,200,11,1,0,2000000,0.52,0.56,1.2,completed,0,%s,"
             OLD_RUN_NOTE ",single,,,,,,steps.csv,1,200,,200,200,11,1,,,0.52,,0.52,0.52,0.56,,0.56,0.56,,0\n",
             dir_single);
    CHECK_CONTAINS(csv, line);
    snprintf(line, sizeof line, "\nddp,ddp,2,fp32,128,cpu,410,5.5,2.05,20,3000000,0.58,0.58,1.25,completed,0,%s,"
             OLD_RUN_NOTE ",ddp,,,,,,steps.csv,1,410,,410,410,5.5,2.05,,,0.58,,0.58,0.58,0.58,,0.58,0.58,,\n",
             dir_ddp);
    CHECK_CONTAINS(csv, line);
    snprintf(line, sizeof line, "\ndp_amp,dp,2,fp16,128,cpu,300,8.5,1.5,12.5,4000000,0.5,0.5,1.4,completed,0,%s,"
             OLD_SUMMARY_NOTE ",dp_amp,,,,,,summary.json,1,300,,300,300,8.5,1.5,,,", dir_dp_amp);
    CHECK_CONTAINS(csv, line);
    int lines = 0;
    for (const char *p = csv; *p; p++) lines += *p == '\n';
    CHECK_INT(lines, 4);

    CHECK_CONTAINS(md, "| run | seed | mode | world | precision | batch | device | images/s | steady steps | "
                       "s/epoch | speed-up |");
    CHECK_CONTAINS(md, "| single |  | single | 1 | fp32 | 128 | cpu | 200.0 |  | 11.00 | 1.00x | 0.0% | 1.9 MiB | "
                       "52.00% | 56.00% | 1.2000 | completed |");
    CHECK_CONTAINS(md, "| ddp |  | ddp | 2 | fp32 | 128 | cpu | 410.0 |  | 5.50 | 2.05x | 20.0% | 2.9 MiB | "
                       "58.00% | 58.00% | 1.2500 | completed |");
    CHECK_CONTAINS(md, "| dp_amp |  | dp | 2 | fp16 | 128 | cpu | 300.0 |  | 8.50 | 1.50x | 12.5% | 3.8 MiB |");
    CHECK_CONTAINS(md, "\n**Throughput not ranked: single, ddp and dp_amp have no timing.csv (run directories "
                       "from an older runner), so their rate was not measured from every step.**\n");
    CHECK_CONTAINS(md, "| member | runs | images/s | images/s range | steady steps (min) | s/epoch | speed-up (95%) |");
    CHECK_CONTAINS(md, "| ddp | 1 | 410.0 |  |  | 5.50 | 2.05x | 58.00% |  | 58.00% |");   /* no steady steps: an old run */

    CHECK_CONTAINS(md, "\n![Train loss vs epoch](plots/train_loss_vs_epoch.svg)\n");
    CHECK_CONTAINS(md, "\n![Throughput (images/s, steady state)](plots/throughput.svg)\n");
    static const char *const plot_files[] = {"train_loss_vs_epoch.svg", "val_top1_vs_epoch.svg",
        "train_loss_vs_wall_time.svg", "val_top1_vs_wall_time.svg", "throughput.svg"};
    for (int p = 0; p < 5; p++) {
        char name[128];
        snprintf(name, sizeof name, "plots/%s", plot_files[p]);
        char *svg = slurp(out, name);
        CHECK(svg && !strncmp(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39));
        CHECK_CONTAINS(svg, "</svg>\n");
        CHECK_CONTAINS(svg, "dp_amp");
        free(svg);
        snprintf(name, sizeof name, "plots/%.*s.png", (int)(strlen(plot_files[p]) - 4), plot_files[p]);
        size_t png_len = 0;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", out, name);
        char *png = test_read_file(path, &png_len);
        CHECK(png && png_len > 100 && !memcmp(png, "\x89PNG", 4));
        free(png);
    }
    int svgs = 0;
    for (const char *p = html; (p = strstr(p, "<svg")); p++) svgs++;
    CHECK_INT(svgs, 5);
    CHECK_CONTAINS(html, "Train loss vs epoch");
    CHECK_CONTAINS(html, "Val top-1 vs wall time");
    CHECK_CONTAINS(html, "Throughput");
    CHECK_CONTAINS(html, "<polyline");
    CHECK_CONTAINS(html, ">single<");
    CHECK_CONTAINS(html, ">dp_amp<");
    CHECK_CONTAINS(html, "node-b");           /* env.json host */
    CHECK_CONTAINS(html, "name: Fake GPU");   /* env.json gpus, an array of objects */
    CHECK_CONTAINS(html, "not recorded");     /* dp_amp has no env.json */
    CHECK_CONTAINS(html, "<details>");
    /* Self-contained: nothing fetched. The only URL is the SVG namespace. */
    for (const char *p = html; (p = strstr(p, "http")); p++)
        CHECK(!strncmp(p, "http://www.w3.org/2000/svg\"", 27));
    CHECK(!strstr(html, "<script"));
    CHECK(!strstr(html, "<link"));
    CHECK(!strstr(html, "src="));
    CHECK(!strstr(html, "url("));
    CHECK(!strstr(html, "@import"));
    free(csv);
    free(md);
    free(html);
}

static void test_errors(void) {
    char bad[1200], path[1300];
    err_t e;
    report_t r;
    snprintf(bad, sizeof bad, "%s/bad", root);
    fx_run_single(bad);
    report_input_t in = {.dir = bad};

    /* a cell that is not a number: file, line, column and column name */
    snprintf(path, sizeof path, "%s/metrics.csv", bad);
    test_write_file(path, METRICS_HEADER "1,100,0.1,2.0,0.3,1.9,0.40,0.8,12.0,1000,1\n2,200,0.1,x1.5,0.5,1.4,"
                    "0.56,0.85,10.0,1100,2\n");
    err_clear(&e);
    CHECK_INT(report_build(&in, 1, "t", &r, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "metrics.csv: line 3, column 4 (train_loss): 'x1.5' is not a number");
    report_free(&r);

    /* a wrong number of fields */
    test_write_file(path, METRICS_HEADER "1,100,0.1,2.0,0.3\n");
    err_clear(&e);
    CHECK_INT(report_build(&in, 1, "t", &r, &e), -1);
    CHECK_CONTAINS(e.msg, "metrics.csv: line 2: 5 fields where the header has 11");
    report_free(&r);

    /* a header without a needed column */
    test_write_file(path, "epoch,train_loss,val_top1\n1,2,0.5\n");
    err_clear(&e);
    CHECK_INT(report_build(&in, 1, "t", &r, &e), -1);
    CHECK_CONTAINS(e.msg, "metrics.csv: line 1: the header has no 'epoch_seconds' column");
    report_free(&r);

    /* a half-written last line (killed run) is dropped, not an error */
    test_write_file(path, METRICS_HEADER "1,100,0.1,2.0,0.3,1.9,0.40,0.8,12.0,1000,1\n2,200,0.1,1.5");
    err_clear(&e);
    CHECK_INT(report_build(&in, 1, "t", &r, &e), 0);
    if (r.n == 1) CHECK_INT(r.rows[0].n_epochs, 1);
    report_free(&r);

    /* missing metrics.csv */
    remove(path);
    err_clear(&e);
    CHECK_INT(report_build(&in, 1, "t", &r, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "/bad/metrics.csv: missing");
    report_free(&r);

    /* malformed summary.json: line and column */
    fx_run_single(bad);
    snprintf(path, sizeof path, "%s/summary.json", bad);
    test_write_file(path, "{\"name\": \"x\",\n \"val_top1\": 0.5,,\n}");
    err_clear(&e);
    CHECK_INT(report_build(&in, 1, "t", &r, &e), -1);
    CHECK_CONTAINS(e.msg, "summary.json");
    CHECK_CONTAINS(e.msg, "line 2, column 18");
    report_free(&r);

    /* a run that took no step: its summary's placeholder numbers are not shown */
    remove(path);
    fx_write(bad, "summary.json", "{\"name\": \"b\", \"status\": \"failed\", \"steps\": 0, \"train_loss\": 0.0,"
             " \"comm_exposed_fraction\": 0.0, \"images_per_second\": null, \"peak_memory_bytes\": 6089772}");
    snprintf(path, sizeof path, "%s/metrics.csv", bad);
    remove(path);
    snprintf(path, sizeof path, "%s/steps.csv", bad);
    remove(path);
    in.lenient = true;
    err_clear(&e);
    CHECK_INT(report_build(&in, 1, "t", &r, &e), 0);
    if (r.n == 1) {
        CHECK_STR(r.rows[0].status, "failed");
        CHECK(isnan(r.rows[0].final_train_loss));
        CHECK(isnan(r.rows[0].comm_exposed_pct));
        CHECK_NEAR(r.rows[0].peak_memory_bytes, 6089772, 0, 0);
        CHECK_CONTAINS(r.rows[0].note, "/bad/metrics.csv: missing");
    }
    report_free(&r);

    /* not a directory */
    report_input_t none = {.dir = "/nonexistent/run"};
    err_clear(&e);
    CHECK_INT(report_build(&none, 1, "t", &r, &e), -1);
    CHECK_CONTAINS(e.msg, "/nonexistent/run: not a directory");
    report_free(&r);

    /* lenient (compare's failed members): the row is there, marked, with the problem */
    none.lenient = true;
    none.status = "failed";
    none.exit_code = 2;
    none.message = "dataset missing";
    none.mode = "ddp";
    none.world_size = 4;
    err_clear(&e);
    CHECK_INT(report_build(&none, 1, "t", &r, &e), 0);
    if (r.n == 1) {
        CHECK_STR(r.rows[0].status, "failed");
        CHECK_INT(r.rows[0].exit_code, 2);
        CHECK_STR(r.rows[0].mode, "ddp");
        CHECK_INT(r.rows[0].world_size, 4);
        CHECK_CONTAINS(r.rows[0].note, "dataset missing; /nonexistent/run: no run directory");
        CHECK(isnan(r.rows[0].images_per_second));
    }
    report_free(&r);
}

static void test_report_runs(void) {
    /* two runs of one experiment share a name: the second gets its directory appended */
    char out[1200], copy[1200], cmd[4096];
    snprintf(copy, sizeof copy, "%s/20261121-101500-ab12", root);
    fx_run_single(copy);
    snprintf(out, sizeof out, "%s/rep", root);
    const char *dirs[] = {dir_single, copy};
    err_t e;
    err_clear(&e);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_INT(report_runs(dirs, 2, out, f, &e), 0);
    fclose(f);
    CHECK_CONTAINS(text, "| single (20261121-101500-ab12) |");
    CHECK_CONTAINS(text, "rep/report.html");
    free(text);
    snprintf(cmd, sizeof cmd, "%s/report.html", out);
    char *html = test_read_file(cmd, NULL);
    CHECK_CONTAINS(html, "single (20261121-101500-ab12)");
    free(html);
    err_clear(&e);
    CHECK_INT(report_runs(dirs, 0, out, NULL, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
}

static void test_plot(void) {
    double x[] = {1, 2, 3, 4}, y[] = {1.0, 2.0, NAN, 4.0}, none[] = {NAN, NAN, NAN, NAN};
    plot_series_t s[2] = {{"a<b", x, y, 4, 0}, {"empty", x, none, 4, 1}};
    plot_opts_t o = {.title = "T & U", .xlabel = "epoch", .ylabel = "loss"};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_INT(plot_line_svg(f, &o, s, 2), 0);
    fclose(f);
    int lines = 0, dots = 0;
    for (const char *p = text; (p = strstr(p, "<polyline")); p++) lines++;
    for (const char *p = text; (p = strstr(p, "<circle")); p++) dots++;
    CHECK_INT(lines, 1);   /* the NaN point is skipped, the line joins its neighbours */
    CHECK_INT(dots, 3);
    CHECK_CONTAINS(text, "a&lt;b");
    CHECK_CONTAINS(text, "T &amp; U");
    CHECK_CONTAINS(text, "empty (no data)");
    /* y axis from 1 to 4 with step 0.5 */
    CHECK_CONTAINS(text, ">1.5</text>");
    CHECK_CONTAINS(text, ">4.0</text>");
    free(text);
    const char *labels[] = {"a", "b"};
    double v[] = {100, NAN};
    text = NULL;
    f = open_memstream(&text, &len);
    CHECK_INT(plot_bar_svg(f, &o, labels, v, 2), 0);
    fclose(f);
    CHECK_CONTAINS(text, ">100.0</text>");
    CHECK_CONTAINS(text, ">n/a</text>");
    int rects = 0;
    for (const char *p = text; (p = strstr(p, "<rect x=")); p++) rects++;
    CHECK_INT(rects, 1);
    free(text);
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Decodes the PNG the bar chart writes (checking signature, chunk CRCs, IHDR and the
 * zlib stream) and checks pixels: the first bar has the first palette colour, the row
 * without a value has no bar, the corner is white. */
static void test_plot_png(void) {
    const char *labels[] = {"a", "b"};
    double v[] = {100, NAN};
    plot_opts_t o = {.title = "T"};
    char *png = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&png, &len);
    CHECK_INT(plot_bar_png(f, &o, labels, v, 2), 0);
    fclose(f);
    CHECK(len > 60 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8));
    if (len <= 60) { free(png); return; }
    const unsigned char *p = (const unsigned char *)png + 8, *end = (const unsigned char *)png + len;
    uint32_t w = 0, h = 0;
    unsigned char *idat = NULL;
    size_t idat_len = 0;
    int chunks = 0, bad_crc = 0;
    while (p + 12 <= end) {
        uint32_t n = be32(p);
        if (p + 12 + n > end) break;
        uLong crc = crc32(crc32(0L, Z_NULL, 0), p + 4, n + 4);
        bad_crc += crc != be32(p + 8 + n);
        if (!memcmp(p + 4, "IHDR", 4)) {
            w = be32(p + 8);
            h = be32(p + 12);
            CHECK_INT(p[16], 8);   /* bit depth */
            CHECK_INT(p[17], 2);   /* RGB */
        }
        if (!memcmp(p + 4, "IDAT", 4)) {
            idat = realloc(idat, idat_len + n);
            memcpy(idat + idat_len, p + 8, n);
            idat_len += n;
        }
        chunks++;
        if (!memcmp(p + 4, "IEND", 4)) break;
        p += 12 + n;
    }
    CHECK_INT(chunks, 3);
    CHECK_INT(bad_crc, 0);
    CHECK_INT(w, 560);
    CHECK_INT(h, 34 + 2 * 28 + 34);
    uLongf raw_len = (uLongf)h * (3 * w + 1);
    unsigned char *raw = malloc(raw_len ? raw_len : 1);
    CHECK(idat && uncompress(raw, &raw_len, idat, idat_len) == Z_OK);
    CHECK_INT(raw_len, (uLongf)h * (3 * w + 1));
    if (raw_len == (uLongf)h * (3 * w + 1)) {
        const unsigned char *bar = raw + 44 * (3 * w + 1) + 1 + 52 * 3;     /* row 44, x 52 */
        const unsigned char *empty = raw + 72 * (3 * w + 1) + 1 + 52 * 3;   /* second row */
        const unsigned char *corner = raw + 1;
        CHECK_INT(bar[0], 0x1f);
        CHECK_INT(bar[1], 0x77);
        CHECK_INT(bar[2], 0xb4);
        CHECK_INT(empty[0] + empty[1] + empty[2], 3 * 255);
        CHECK_INT(corner[0] + corner[1] + corner[2], 3 * 255);
    }
    free(raw);
    free(idat);
    free(png);
}

int main(void) {
    make_runs();
    TEST_RUN(test_median);
    TEST_RUN(test_rows);
    TEST_RUN(test_files);
    TEST_RUN(test_errors);
    TEST_RUN(test_report_runs);
    TEST_RUN(test_plot);
    TEST_RUN(test_plot_png);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_main_end();
}
