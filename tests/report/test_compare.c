/* test_compare.c: compare orchestration (runner/report/compare.h) with a fake run function:
 * all members succeed; one fails (the others still run, the report marks it); an
 * interrupted comparison resumes skipping completed members; a killed one (state left
 * "running") resumes; the newest unfinished comparison is chosen; bad state files. */
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/report/compare.h"
#include "runner/report/report.h"
#include "tests/report/fixture.h"
#include "tests/test.h"

static char root[1024];

/* What the fake run function does and what it saw. */
typedef struct fake {
    int calls;
    char called[16][64];        /* member names in call order */
    const char *fail_name;      /* this member exits 2 */
    const char *silent_name;    /* this member exits 3 with no message, after logging one */
    const char *mute_name;      /* this member exits 4 with no message and no log */
    const char *interrupt_name; /* this member exits 130 ... */
    int interrupt_left;         /* ... this many times */
    int saw_partial;            /* runs that found their earlier partial state */
} fake_t;

/* A fake run: writes a finished run directory whose images/s is 100 * (seed + 1). */
static int fake_run(void *ctx, const experiment_t *x, const char *dir, err_t *e) {
    fake_t *f = ctx;
    const char *name = strrchr(dir, '/') + 1;
    if (f->calls < 16) snprintf(f->called[f->calls], sizeof f->called[0], "%s", name);
    f->calls++;
    mkdir(dir, 0777);
    if (f->fail_name && !strcmp(name, f->fail_name)) {
        err_set(e, ERR_INPUT, "boom: %s has no data", name);
        return 2;
    }
    if (f->silent_name && !strcmp(name, f->silent_name)) {
        char logs[2100];
        snprintf(logs, sizeof logs, "%s/logs", dir);
        fx_write(logs, "rank0.log", "step 1\nrunner: data/x.bin: missing; set data.download: true\n\n");
        return 3;
    }
    if (f->mute_name && !strcmp(name, f->mute_name)) return 4;
    if (f->interrupt_name && !strcmp(name, f->interrupt_name) && f->interrupt_left > 0) {
        f->interrupt_left--;
        fx_write(dir, "partial", "epoch 1 done\n");
        err_set(e, ERR_INTERRUPT, "interrupted by SIGINT; checkpoint saved");
        return 130;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/partial", dir);
    struct stat st;
    if (stat(path, &st) == 0) f->saw_partial++;
    double ips = 100.0 * (double)(x->seed + 1);
    fx_summary(dir, name, "completed", x->parallel.mode == PAR_SINGLE ? "single" : x->parallel.mode == PAR_DP ? "dp" : "ddp",
               x->parallel.world_size, x->amp.enabled ? "bf16" : "fp32", ips, 0.0, 1e6);
    fx_write(dir, "metrics.csv", METRICS_HEADER "1,10,0.1,2.0,0.3,1.9,0.40,0.8,4,100,1000000\n"
             "2,20,0.1,1.5,0.5,1.4,0.50,0.85,4,100,1000000\n");
    return 0;
}

/* A 3-member matrix: single, dp, ddp (ddp with bf16 AMP); seeds 0, 1, 2. */
static experiment_matrix_t *make_matrix(const char *name) {
    experiment_matrix_t *m = calloc(1, sizeof *m);
    if (!m) exit(1);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->n = 3;
    const char *names[] = {"single", "dp", "ddp"};
    for (int i = 0; i < 3; i++) {
        experiment_t *x = &m->runs[i];
        snprintf(m->entry_names[i], sizeof m->entry_names[i], "%s", names[i]);
        snprintf(x->name, sizeof x->name, "%s", name);
        snprintf(x->output.root, sizeof x->output.root, "%s", root);
        snprintf(x->source_path, sizeof x->source_path, "/exp/%s.yaml", name);
        x->seed = (uint64_t)i;
        x->parallel.mode = i == 0 ? PAR_SINGLE : i == 1 ? PAR_DP : PAR_DDP;
        x->parallel.world_size = i == 0 ? 1 : 2;
        x->train.batch_size = 128;
        x->amp.enabled = i == 2;
        x->amp.dtype = PREC_BF16;
    }
    return m;
}

static char *slurp(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return test_read_file(path, NULL);
}

static void test_all_succeed(void) {
    experiment_matrix_t *m = make_matrix("cmp_ok");
    fake_t f = {0};
    err_t e;
    err_clear(&e);
    char parent[2048], prefix[1200];
    CHECK_INT(compare_main(m, fake_run, &f, NULL, parent, sizeof parent, &e), 0);
    snprintf(prefix, sizeof prefix, "%s/cmp_ok/", root);
    CHECK(!strncmp(parent, prefix, strlen(prefix)));
    regex_t re;
    regcomp(&re, "/[0-9]{8}-[0-9]{6}-[a-z0-9]{6}$", REG_EXTENDED | REG_NOSUB);
    CHECK_INT(regexec(&re, parent, 0, NULL, 0), 0);
    regfree(&re);
    CHECK_INT(f.calls, 3);
    CHECK_STR(f.called[0], "single");
    CHECK_STR(f.called[1], "dp");
    CHECK_STR(f.called[2], "ddp");
    compare_state_t *s = calloc(1, sizeof *s);
    CHECK_INT(compare_state_load(parent, s, &e), 0);
    CHECK_STR(s->status, "completed");
    CHECK_STR(s->matrix, "cmp_ok");
    CHECK_STR(s->source, "/exp/cmp_ok.yaml");
    CHECK_INT(s->n, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_INT(s->members[i].status, MEMBER_COMPLETED);
        CHECK_INT(s->members[i].exit_code, 0);
        CHECK_INT(s->members[i].attempts, 1);
    }
    char *json = slurp(parent, "compare.json");
    CHECK_CONTAINS(json, "\"run_dir\": \"dp\"");
    CHECK_CONTAINS(json, "\"message\": null");
    free(json);
    char *csv = slurp(parent, "comparison.csv"), line[4096];
    snprintf(line, sizeof line, "\nsingle,single,1,fp32,128,cpu,100,4,1,0,1000000,0.5,0.5,1.5,completed,0,%s/single,"
             OLD_SUMMARY_NOTE ",single,0,,,,,summary.json,1,100,", parent);
    CHECK_CONTAINS(csv, line);
    CHECK_CONTAINS(csv, "\ndp,dp,2,fp32,128,cpu,200,4,2,0,");
    CHECK_CONTAINS(csv, "\nddp,ddp,2,bf16,128,cpu,300,4,3,0,");
    free(csv);
    char *html = slurp(parent, "report.html");
    CHECK_CONTAINS(html, "<h1>cmp_ok</h1>");
    CHECK_CONTAINS(html, "3 members, 3 runs, 3 completed");
    free(html);
    /* the comparison is finished: the same command starts a new one */
    char again[2048];
    err_clear(&e);
    CHECK_INT(compare_main(m, fake_run, &f, NULL, again, sizeof again, &e), 0);
    CHECK(strcmp(again, parent) != 0);
    CHECK_INT(f.calls, 6);
    free(s);
    free(m);
}

static void test_one_fails(void) {
    experiment_matrix_t *m = make_matrix("cmp_fail");
    fake_t f = {.fail_name = "dp"};
    err_t e;
    err_clear(&e);
    char parent[2048];
    char *log = NULL;
    size_t len = 0;
    FILE *lf = open_memstream(&log, &len);
    CHECK_INT(compare_main(m, fake_run, &f, lf, parent, sizeof parent, &e), -1);
    fclose(lf);
    CHECK_INT(e.code, ERR_RUNTIME);
    CHECK_CONTAINS(e.msg, "compare: 1 of 3 runs failed: dp (exit 2)");
    CHECK_CONTAINS(e.msg, "/report.html");
    CHECK_INT(f.calls, 3);            /* ddp still ran after dp failed */
    CHECK_CONTAINS(log, "compare: dp failed (exit 2): boom: dp has no data");
    free(log);
    compare_state_t *s = calloc(1, sizeof *s);
    CHECK_INT(compare_state_load(parent, s, &e), 0);
    CHECK_STR(s->status, "failed");
    CHECK_INT(s->members[0].status, MEMBER_COMPLETED);
    CHECK_INT(s->members[1].status, MEMBER_FAILED);
    CHECK_INT(s->members[1].exit_code, 2);
    CHECK_STR(s->members[1].message, "boom: dp has no data");
    CHECK_INT(s->members[2].status, MEMBER_COMPLETED);
    char *csv = slurp(parent, "comparison.csv");
    CHECK_CONTAINS(csv, "\ndp,dp,2,fp32,128,auto,,,,,,,,,failed,2,");
    CHECK_CONTAINS(csv, "boom: dp has no data; ");
    CHECK_CONTAINS(csv, "/dp/summary.json: missing");
    CHECK_CONTAINS(csv, "\nddp,ddp,2,bf16,128,cpu,300,4,3,0,");
    free(csv);
    char *md = slurp(parent, "comparison.md");
    CHECK_CONTAINS(md, "| dp | 1 | dp | 2 | fp32 | 128 | auto |");
    CHECK_CONTAINS(md, "| failed (exit 2) |");
    free(md);
    char *html = slurp(parent, "report.html");
    CHECK_CONTAINS(html, "<tr class=\"failed\">");
    CHECK_CONTAINS(html, "3 members, 3 runs, 2 completed");
    free(html);

    /* `runner report PARENT` reads the comparison directory as its members */
    char out[2100];
    snprintf(out, sizeof out, "%s/again", parent);
    const char *dirs[] = {parent};
    err_clear(&e);
    CHECK_INT(report_runs(dirs, 1, out, NULL, &e), 0);
    md = slurp(out, "comparison.md");
    CHECK_CONTAINS(md, "# cmp_fail\n");
    /* without the experiment, a member that wrote nothing has only its name and status */
    CHECK_CONTAINS(md, "| dp | 1 |  |  |  |  |  |  |  |  |  |  |  |  |  |  | failed (exit 2) |");
    CHECK_CONTAINS(md, "| ddp | 2 | ddp | 2 | bf16 | 128 | cpu | 300.0 |");
    free(md);
    free(s);
    free(m);
}

/* A run function that gives no reason: the member's log, else its exit code. */
static void test_failure_messages(void) {
    experiment_matrix_t *m = make_matrix("cmp_msg");
    fake_t f = {.silent_name = "single", .mute_name = "ddp"};
    err_t e;
    err_clear(&e);
    char parent[2048];
    CHECK_INT(compare_main(m, fake_run, &f, NULL, parent, sizeof parent, &e), -1);
    CHECK_INT(e.code, ERR_RUNTIME);
    CHECK_CONTAINS(e.msg, "2 of 3 runs failed: single (exit 3), ddp (exit 4)");
    compare_state_t *s = calloc(1, sizeof *s);
    CHECK_INT(compare_state_load(parent, s, &e), 0);
    CHECK_STR(s->members[0].message, "runner: data/x.bin: missing; set data.download: true");
    CHECK_STR(s->members[2].message, "exited with code 4");
    /* the first row failed: no speed-ups anywhere */
    char *csv = slurp(parent, "comparison.csv");
    CHECK_CONTAINS(csv, "\ndp,dp,2,fp32,128,cpu,200,4,,0,");
    free(csv);
    free(s);
    free(m);
}

static void test_interrupt_resume(void) {
    experiment_matrix_t *m = make_matrix("cmp_int");
    fake_t f = {.interrupt_name = "dp", .interrupt_left = 1};
    err_t e;
    err_clear(&e);
    char parent[2048], parent2[2048];
    CHECK_INT(compare_main(m, fake_run, &f, NULL, parent, sizeof parent, &e), -1);
    CHECK_INT(e.code, ERR_INTERRUPT);
    CHECK_CONTAINS(e.msg, "compare: interrupted during 'dp'; run the same command again to resume");
    CHECK_INT(f.calls, 2);            /* ddp did not start */
    compare_state_t *s = calloc(1, sizeof *s);
    CHECK_INT(compare_state_load(parent, s, &e), 0);
    CHECK_STR(s->status, "interrupted");
    CHECK_INT(s->members[0].status, MEMBER_COMPLETED);
    CHECK_INT(s->members[1].status, MEMBER_INTERRUPTED);
    CHECK_INT(s->members[1].exit_code, 130);
    CHECK_STR(s->members[1].message, "interrupted by SIGINT; checkpoint saved");
    CHECK_INT(s->members[2].status, MEMBER_PENDING);
    CHECK_INT(s->members[2].exit_code, -1);
    char *html = slurp(parent, "report.html");
    CHECK(html == NULL);              /* no report until every member ran */
    free(html);

    err_clear(&e);
    CHECK_INT(compare_main(m, fake_run, &f, NULL, parent2, sizeof parent2, &e), 0);
    CHECK_STR(parent2, parent);       /* resumed the same comparison */
    CHECK_INT(f.calls, 4);            /* single skipped */
    CHECK_STR(f.called[2], "dp");
    CHECK_STR(f.called[3], "ddp");
    CHECK_INT(f.saw_partial, 1);      /* dp got the same member_dir back */
    CHECK_INT(compare_state_load(parent, s, &e), 0);
    CHECK_STR(s->status, "completed");
    CHECK_INT(s->members[0].attempts, 1);
    CHECK_INT(s->members[1].attempts, 2);
    CHECK_INT(s->members[1].status, MEMBER_COMPLETED);
    CHECK_STR(s->members[1].message, "");
    html = slurp(parent, "report.html");
    CHECK_CONTAINS(html, "3 members, 3 runs, 3 completed");
    free(html);
    free(s);
    free(m);
}

/* The process was killed mid-member: compare.json still says "running". */
static void test_killed_resume(void) {
    experiment_matrix_t *m = make_matrix("cmp_kill");
    char mroot[1200], parent[2048], found[2048];
    snprintf(mroot, sizeof mroot, "%s/cmp_kill", root);
    err_t e;
    err_clear(&e);
    CHECK_INT(compare_new_parent(mroot, parent, sizeof parent, &e), 0);
    fake_t f = {0};
    char single[2100];
    snprintf(single, sizeof single, "%s/single", parent);
    fake_run(&f, &m->runs[0], single, &e);
    fx_write(parent, "compare.json",
             "{\"matrix\": \"cmp_kill\", \"status\": \"running\", \"members\": [\n"
             " {\"name\": \"single\", \"status\": \"completed\", \"exit_code\": 0, \"attempts\": 1},\n"
             " {\"name\": \"dp\", \"status\": \"running\", \"exit_code\": null, \"attempts\": 1},\n"
             " {\"name\": \"ddp\", \"status\": \"pending\", \"exit_code\": null, \"attempts\": 0}]}\n");
    CHECK_INT(compare_find_unfinished(mroot, m, found, sizeof found, &e), 1);
    CHECK_STR(found, parent);
    CHECK_INT(compare_main(m, fake_run, &f, NULL, found, sizeof found, &e), 0);
    CHECK_STR(found, parent);
    CHECK_INT(f.calls, 3);
    CHECK_STR(f.called[1], "dp");
    CHECK_STR(f.called[2], "ddp");
    CHECK_INT(compare_find_unfinished(mroot, m, found, sizeof found, &e), 0);
    free(m);
}

static void test_find_newest_and_bad_state(void) {
    experiment_matrix_t *m = make_matrix("cmp_find");
    char mroot[1200], dir[2048], found[2048];
    snprintf(mroot, sizeof mroot, "%s/cmp_find", root);
    err_t e;
    err_clear(&e);
    CHECK_INT(compare_find_unfinished(mroot, m, found, sizeof found, &e), 0);   /* no such dir yet */
    mkdir(mroot, 0777);
    const char *ok_members = "[{\"name\": \"single\", \"status\": \"completed\"}, {\"name\": \"dp\", \"status\": "
                             "\"interrupted\"}, {\"name\": \"ddp\", \"status\": \"pending\"}]";
    struct { const char *dir, *status, *members; } parents[] = {
        {"20260101-000000-aaaaaa", "interrupted", ok_members},
        {"20260102-000000-bbbbbb", "running", ok_members},
        {"20260103-000000-cccccc", "running", "[{\"name\": \"other\", \"status\": \"pending\"}]"},
        {"20260104-000000-dddddd", "completed", ok_members},
    };
    for (int i = 0; i < 4; i++) {
        char text[1024];
        snprintf(dir, sizeof dir, "%s/%s", mroot, parents[i].dir);
        snprintf(text, sizeof text, "{\"matrix\": \"cmp_find\", \"status\": \"%s\", \"members\": %s}\n",
                 parents[i].status, parents[i].members);
        fx_write(dir, "compare.json", text);
    }
    snprintf(dir, sizeof dir, "%s/20260105-000000-eeeeee", mroot);   /* killed before its first save */
    mkdir(dir, 0777);
    CHECK_INT(compare_find_unfinished(mroot, m, found, sizeof found, &e), 1);
    snprintf(dir, sizeof dir, "%s/20260102-000000-bbbbbb", mroot);
    CHECK_STR(found, dir);

    /* a parent whose members differ from the matrix is refused by compare_run */
    fake_t f = {0};
    snprintf(dir, sizeof dir, "%s/20260103-000000-cccccc", mroot);
    err_clear(&e);
    CHECK_INT(compare_run(m, dir, fake_run, &f, NULL, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "20260103-000000-cccccc/compare.json: lists other members than the matrix cmp_find");
    CHECK_INT(f.calls, 0);

    /* malformed state files name the file and the place */
    snprintf(dir, sizeof dir, "%s/20260106-000000-ffffff", mroot);
    fx_write(dir, "compare.json", "{\"matrix\": \"cmp_find\",\n \"status\": }");
    err_clear(&e);
    CHECK_INT(compare_find_unfinished(mroot, m, found, sizeof found, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "20260106-000000-ffffff/compare.json: line 2, column 12");
    fx_write(dir, "compare.json", "{\"matrix\": \"cmp_find\", \"status\": \"running\", \"members\": "
             "[{\"name\": \"single\", \"status\": \"weird\"}]}");
    err_clear(&e);
    CHECK_INT(compare_find_unfinished(mroot, m, found, sizeof found, &e), -1);
    CHECK_CONTAINS(e.msg, "compare.json: members[0].status 'weird' is not one of pending, running");
    fx_write(dir, "compare.json", "{\"matrix\": \"cmp_find\", \"status\": \"running\"}");
    err_clear(&e);
    CHECK_INT(compare_find_unfinished(mroot, m, found, sizeof found, &e), -1);
    CHECK_CONTAINS(e.msg, "compare.json: expected an object with a \"members\" array");

    /* a comparison another process is running is refused (flock on .compare.lock) */
    snprintf(dir, sizeof dir, "%s/20260102-000000-bbbbbb", mroot);
    char lock_path[2200];
    snprintf(lock_path, sizeof lock_path, "%s/.compare.lock", dir);
    int fd = open(lock_path, O_RDWR | O_CREAT, 0666);
    CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
    err_clear(&e);
    CHECK_INT(compare_run(m, dir, fake_run, &f, NULL, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "20260102-000000-bbbbbb: another runner compare is running this comparison");
    CHECK_INT(f.calls, 0);
    close(fd);   /* released: now it runs (and resumes dp, ddp) */
    err_clear(&e);
    CHECK_INT(compare_run(m, dir, fake_run, &f, NULL, &e), 0);
    CHECK_INT(f.calls, 2);

    /* compare_run needs an existing parent */
    err_clear(&e);
    CHECK_INT(compare_run(m, "/nonexistent/parent", fake_run, &f, NULL, &e), -1);
    CHECK_CONTAINS(e.msg, "/nonexistent/parent: not a directory");
    free(m);
}

/* What the fake timed run saw: member directories relative to their comparison, in order. */
typedef struct timed {
    int calls;
    char called[8][64];
    const char *stop_at;        /* this member exits 130 once */
} timed_t;

/* A fake run writing a run directory of the current layout (fixture.h fx_timed_run):
 * 64 images a step, 100 * (seed + 1) images/s, val top-1 0.5 + 0.01 * seed. */
static int fake_timed_run(void *ctx, const experiment_t *x, const char *dir, err_t *e) {
    timed_t *t = ctx;
    const char *last = strrchr(dir, '/'), *name = last + 1;
    if (!strncmp(name, "seed", 4))    /* a repeat: <entry>/seed<S> */
        for (name = last; name > dir && name[-1] != '/'; name--) {}
    if (t->calls < 8) snprintf(t->called[t->calls], sizeof t->called[0], "%s", name);
    t->calls++;
    if (t->stop_at && !strcmp(name, t->stop_at)) {
        t->stop_at = NULL;
        return err_set(e, ERR_INTERRUPT, "interrupted"), 130;
    }
    char config[128];
    snprintf(config, sizeof config, "parallel:\n  mode: %s\n", x->parallel.mode == PAR_DP ? "dp" : "single");
    fx_timed_run(dir, x->name, (int)x->seed, config, 64, 30, 0.64 / (double)(x->seed + 1), 1, 10,
                 0.5 + 0.01 * (double)x->seed);
    return 0;
}

/* repeats: 2 over a 2-entry matrix: 4 members run round by round, each in
 * <entry>/seed<S>, resumable; the report has 2 members of 2 seeds each. */
static void test_repeats(void) {
    experiment_matrix_t *m = make_matrix("cmp_rep");
    m->n = 2;                         /* single (seed 0), dp (seed 1) */
    m->repeats = 2;
    CHECK_INT(compare_member_count(m), 4);
    timed_t t = {.stop_at = "single/seed1"};
    err_t e;
    err_clear(&e);
    char parent[2048], again[2048];
    char *log = NULL;
    size_t len = 0;
    FILE *lf = open_memstream(&log, &len);
    CHECK_INT(compare_main(m, fake_timed_run, &t, lf, parent, sizeof parent, &e), -1);
    CHECK_INT(e.code, ERR_INTERRUPT);
    CHECK_INT(t.calls, 3);
    /* resumed: single/seed1 again, then dp/seed2 */
    err_clear(&e);
    CHECK_INT(compare_main(m, fake_timed_run, &t, lf, again, sizeof again, &e), 0);
    fclose(lf);
    CHECK_STR(again, parent);
    CHECK_INT(t.calls, 5);
    const char *order[] = {"single/seed0", "dp/seed1", "single/seed1", "single/seed1", "dp/seed2"};
    for (int i = 0; i < 5; i++) CHECK_STR(t.called[i], order[i]);
    CHECK_CONTAINS(log, "compare: 4 runs (2 entries x 2 seeds) in ");
    /* single 100, 200 images/s; dp 200, 300: one degree of freedom each, within noise */
    CHECK_CONTAINS(log, "compare: No clear fastest: dp (250 images/s) is ahead, but single is within noise of it "
                        "(dp is 1.67x single, 95% interval ");
    CHECK_CONTAINS(log, "\ncompare: Accuracy is the same within the seed spread: no member's final val top-1 "
                        "differs from single's 50.50% \xc2\xb1 0.71 over 2 seeds");
    free(log);
    compare_state_t *s = calloc(1, sizeof *s);
    CHECK_INT(compare_state_load(parent, s, &e), 0);
    CHECK_INT(s->n, 4);
    CHECK_STR(s->members[2].name, "single/seed1");
    CHECK_STR(s->members[2].entry, "single");
    CHECK(s->members[2].has_seed && s->members[2].seed == 1);
    CHECK_INT(s->members[2].attempts, 2);
    CHECK_STR(s->status, "completed");
    char *json = slurp(parent, "compare.json");
    CHECK_CONTAINS(json, "\"name\": \"dp/seed2\",\n      \"entry\": \"dp\",\n      \"seed\": 2,");
    CHECK_CONTAINS(json, "\"run_dir\": \"dp/seed2\"");
    free(json);
    char path[2200];
    snprintf(path, sizeof path, "%s/dp/seed2/timing.csv", parent);
    CHECK_INT(access(path, R_OK), 0);
    char *md = slurp(parent, "comparison.md"), *csv = slurp(parent, "comparison.csv");
    CHECK_CONTAINS(md, "| single | 2 | 150.0 \xc2\xb1 70.7 | 100.0\xe2\x80\x93" "200.0 | 30 |");
    CHECK_CONTAINS(md, "| dp | 2 | 250.0 \xc2\xb1 70.7 | 200.0\xe2\x80\x93" "300.0 | 30 |");
    CHECK_CONTAINS(md, "| dp/seed2 | 2 | dp |");
    CHECK_CONTAINS(csv, ",dp,2,30,10,");
    free(md);
    free(csv);
    /* other repeats make other members: this comparison is not theirs */
    m->repeats = 3;
    err_clear(&e);
    CHECK_INT(compare_run(m, parent, fake_timed_run, &t, NULL, &e), -1);
    CHECK_CONTAINS(e.msg, "compare.json: lists other members than the matrix cmp_rep (entries or repeats changed?)");
    free(s);
    free(m);
}

int main(void) {
    if (test_tmpdir(root, sizeof root)) return 1;
    TEST_RUN(test_repeats);
    TEST_RUN(test_all_succeed);
    TEST_RUN(test_one_fails);
    TEST_RUN(test_failure_messages);
    TEST_RUN(test_interrupt_resume);
    TEST_RUN(test_killed_resume);
    TEST_RUN(test_find_newest_and_bad_state);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_main_end();
}
