/* test_fault_writers.c: one writer per run directory (runner/runlock.h).
 *
 * A run is interrupted, then the same command is started several times at the same
 * moment: 2 at once, 8 at once, `runner EXP` racing `runner resume DIR`, in rounds over
 * one run (each round's winner is interrupted with SIGINT, or killed with SIGKILL, and the
 * next round races for the same directory). In every round exactly one process proceeds
 * (it resumes, and exits 130 when interrupted, 0 at the end) and every other one exits 2
 * at once with a message naming the directory and the winner's pid (the lock holder: the
 * runner itself, or the DDP launcher). A killed winner leaves no stale lock: the next
 * round resumes. At the end the run is whole: metrics.csv and steps.csv have the header's
 * field count on every line, one row per epoch / step in order with none lost or
 * repeated, no more TensorBoard segments than processes that trained, `runner report`
 * reads it, and its weights, BN buffers, momentum and CSV rows equal an uninterrupted
 * run's bit for bit.
 * DDP (world 2 over shm): the same race, and a launcher restarting its ranks
 * (parallel.max_restarts) keeps the directory locked across the restart: a `runner
 * resume DIR` during it exits 2 naming the launcher, and `runner plan` says it is in use.
 *
 * On the old code (no lock) every racer resumes: the first round fails with all of them
 * exiting 0/130, and the CSVs end up with lines of other field counts.
 */
#include "tests/fault/fault_util.h"

static char tmp[512];

/* Lines of path: every one with the header's field count; column col of the rows counts
 * first, first + 1, ... up to last. Each problem is reported once. */
static void check_csv(const char *run, const char *file, int col, long first, long last) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", run, file);
    char *s = test_read_file(path, NULL);
    CHECK(s != NULL);
    if (!s) return;
    int fields = -1, line = 0, bad_fields = 0, bad_seq = 0;
    long want = first;
    for (char *save, *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save), line++) {
        int n = 1;
        for (const char *c = l; *c; c++) n += *c == ',';
        if (fields < 0) { fields = n; continue; }
        if (n != fields && !bad_fields++) fprintf(stderr, "%s line %d: %d fields, header %d\n", path, line + 1, n, fields);
        const char *cell = l;
        for (int k = 0; k < col && cell; k++) cell = strchr(cell, ',') ? strchr(cell, ',') + 1 : NULL;
        long v = cell ? strtol(cell, NULL, 10) : -1;
        if (v != want && !bad_seq++) fprintf(stderr, "%s line %d: %ld where %ld comes next\n", path, line + 1, v, want);
        want = v + 1;
    }
    CHECK_INT(bad_fields, 0);
    CHECK_INT(bad_seq, 0);
    CHECK_INT(want - 1, last);
    free(s);
}

/* How many times needle occurs in the file at path. */
static int count_in_file(const char *path, const char *needle) {
    char *s = test_read_file(path, NULL);
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p++) n++;
    free(s);
    return n;
}

typedef enum { END_SIGINT, END_SIGKILL, END_FINISH } round_end_t;

/* Starts the racers (argument lists args[0..n), NULL-terminated each) at once and waits
 * until one of them is left and has trained `steps` more rows of run/steps.csv; ends it
 * as `end` says. Checks that exactly that one proceeded (exit 130, 137 or 0) and every
 * other one exited 2 naming run and the winner's pid. Returns the winner's index, -1. */
static int race(const char *const *const *args, int n, const char *run, int steps, round_end_t end) {
    static int round_no;
    int want = end == END_SIGINT ? 130 : end == END_SIGKILL ? 128 + SIGKILL : 0;
    round_no++;
    pid_t pid[8];
    int code[8];
    bool alive[8];
    char log[8][700], path[4400];
    snprintf(path, sizeof path, "%s/steps.csv", run);
    int rows0 = test_count_lines(path);
    for (int i = 0; i < n; i++) {
        snprintf(log[i], sizeof log[i], "%s/race%d_%d.log", tmp, round_no, i);
        pid[i] = fault_spawn(args[i], NULL, log[i]);
        alive[i] = true;
        code[i] = -1;   /* still running when the wait gave up */
    }
    int left = n, winner = -1;
    double t0 = dist_now();
    while (left > 0 && dist_now() - t0 < 240) {
        for (int i = 0; i < n; i++) {
            int st;
            if (alive[i] && waitpid(pid[i], &st, WNOHANG) == pid[i]) {
                alive[i] = false;
                code[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                left--;
            }
        }
        if (left == 1 && winner < 0) {
            for (int i = 0; i < n; i++)
                if (alive[i]) winner = i;
        }
        if (winner >= 0 && alive[winner] && end != END_FINISH && test_count_lines(path) >= rows0 + steps) {
            if (end == END_SIGINT) kill(pid[winner], SIGINT);
            else fault_kill_session(pid[winner]);
            end = END_FINISH;   /* signalled once; now wait for it */
        }
        usleep(5000);
    }
    for (int i = 0; i < n; i++)
        if (alive[i]) fault_kill_session(pid[i]);   /* past the time limit: failed below */
    fault_reap();
    int proceeded = 0;
    for (int i = 0; i < n; i++) proceeded += code[i] != 2;
    CHECK_INT(proceeded, 1);
    if (winner < 0 || proceeded != 1) {
        for (int i = 0; i < n; i++) {
            char *s = test_read_file(log[i], NULL);
            fprintf(stderr, "round %d racer %d exited %d:\n%s\n", round_no, i, alive[i] ? -1 : code[i], s ? s : "");
            free(s);
        }
        return -1;
    }
    CHECK_INT(code[winner], want);
    char holder[64];
    snprintf(holder, sizeof holder, "(pid %d on host ", (int)pid[winner]);
    for (int i = 0; i < n; i++) {
        if (i == winner) continue;
        CHECK_INT(code[i], 2);
        char *s = test_read_file(log[i], NULL);
        CHECK_CONTAINS(s, " is in use: another runner is writing it ");
        CHECK_CONTAINS(s, holder);
        CHECK_CONTAINS(s, run);
        CHECK(s && !strstr(s, "resuming"));   /* it decided nothing */
        free(s);
    }
    return winner;
}

/* One run the racers fight over: fault_util.h's experiment on 16x16 images (a resumed run
 * then lasts seconds, long after every racer has decided), TensorBoard on. */
typedef struct race_run {
    char exp[700], root[700], set[760], run[4200];
    const char *args[8];      /* `runner EXP --set output.root=ROOT --set ...` */
    const char *resume[3];    /* `runner resume RUN` */
} race_run_t;

/* Writes the experiment, starts it and interrupts it with SIGINT after 5 steps. */
static bool start_run(race_run_t *r, const char *name, int epochs, const char *mode) {
    fault_write_exp(r->exp, sizeof r->exp, tmp, name, epochs, mode);
    snprintf(r->root, sizeof r->root, "%s/%s_runs", tmp, name);
    snprintf(r->set, sizeof r->set, "output.root=%s", r->root);
    const char *args[] = {r->exp, "--set", r->set, "--set", "data.synthetic.image=[3,16,16]", "--set",
                          "logging.tensorboard=true", NULL};
    memcpy(r->args, args, sizeof args);
    char log[700];
    snprintf(log, sizeof log, "%s/%s_first.log", tmp, name);
    pid_t pid = fault_spawn(r->args, NULL, log);
    const char *d = cli_wait_steps(r->root, name, 5);
    kill(pid, SIGINT);
    CHECK_INT(fault_wait(pid), 130);
    CHECK(d != NULL);
    snprintf(r->run, sizeof r->run, "%s", d ? d : "");
    r->resume[0] = "resume";
    r->resume[1] = r->run;
    r->resume[2] = NULL;
    return d != NULL;
}

/* The run completed and is whole: epochs x 4 steps, every CSV line complete, one row per
 * epoch and per step in order, `runner report` reads it. */
static void check_whole(const race_run_t *r, int epochs) {
    CHECK(fault_completed(r->run));
    check_csv(r->run, "metrics.csv", 0, 1, epochs);
    check_csv(r->run, "steps.csv", 0, 1, epochs * 4L);
    char args[4400], out[8192];
    snprintf(args, sizeof args, "report %s --output %s/report_%d", r->run, tmp, epochs);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
}

/* Rounds of 2 and 8 racers over one single-process run, then the comparison with an
 * uninterrupted run. */
static void single_process_races(void) {
    race_run_t r;
    if (!start_run(&r, "race", 20, "single")) return;
    const char *const *two[] = {r.args, r.args};
    const char *const *eight[] = {r.args, r.args, r.args, r.args, r.args, r.args, r.args, r.args};
    const char *const *mixed[] = {r.resume, r.args, r.resume, r.args};
    int trained = 1;   /* processes that trained in run: each writes one TensorBoard file */
    if (race(two, 2, r.run, 4, END_SIGINT) < 0) return;
    trained++;
    if (race(eight, 8, r.run, 4, END_SIGINT) < 0) return;
    trained++;
    if (race(mixed, 4, r.run, 4, END_SIGKILL) < 0) return;   /* no stale lock after this */
    trained++;
    if (race(two, 2, r.run, 4, END_SIGINT) < 0) return;
    trained++;
    if (race(eight, 8, r.run, 0, END_FINISH) < 0) return;
    trained++;
    check_whole(&r, 20);
    char tb[4300];
    snprintf(tb, sizeof tb, "%s/tensorboard", r.run);
    int segments = fault_dir_entries(tb);
    CHECK(segments >= 1 && segments <= trained);
    /* nothing lost, nothing twice: the uninterrupted run's numbers */
    char ref_root[700], ref_set[760], log[800];
    snprintf(ref_root, sizeof ref_root, "%s/ref", tmp);
    snprintf(ref_set, sizeof ref_set, "output.root=%s", ref_root);
    snprintf(log, sizeof log, "%s/ref.log", tmp);
    const char *ref_args[] = {r.exp, "--set", ref_set, "--set", "data.synthetic.image=[3,16,16]", NULL};
    CHECK_INT(fault_wait(fault_spawn(ref_args, NULL, log)), 0);
    const char *ref = only_run_dir(ref_root, "race");
    CHECK(ref != NULL);
    if (ref) fault_check_same_run(ref, r.run);
}

/* DDP, world 2 over shm: racers against a launcher, and a launcher's restart. */
static void ddp_races(void) {
    race_run_t r;
    if (!start_run(&r, "drace", 30, "ddp, world_size: 2, backend: shm, max_restarts: 1")) return;
    const char *const *two[] = {r.args, r.resume};
    if (race(two, 2, r.run, 4, END_SIGINT) < 0) return;

    /* a restart: rank 1 killed, the launcher starts both ranks again from the checkpoint;
     * all the while the directory is locked by the launcher */
    char log[700], path[4400], out[8192], args[4400], holder[128];
    snprintf(log, sizeof log, "%s/drace_restart.log", tmp);
    pid_t launcher = fault_spawn(r.args, NULL, log);
    snprintf(path, sizeof path, "%s/steps.csv", r.run);
    int rows = test_count_lines(path);
    double t0 = dist_now();
    while (test_count_lines(path) < rows + 3 && dist_now() - t0 < 120) usleep(10000);
    pid_t kids[8];
    int nk = dist_children_of(launcher, kids, 8);
    CHECK_INT(nk, 2);
    char v[32];
    for (int i = 0; i < nk; i++)
        if (!strcmp(dist_proc_env(kids[i], "RANK", v, sizeof v), "1")) kill(kids[i], SIGKILL);
    snprintf(path, sizeof path, "%s/restarts.jsonl", r.run);
    t0 = dist_now();
    while (access(path, F_OK) != 0 && dist_now() - t0 < 120) usleep(10000);
    CHECK_INT(access(path, F_OK), 0);
    snprintf(args, sizeof args, "resume %s", r.run);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    snprintf(holder, sizeof holder, "(pid %d on host ", (int)launcher);
    CHECK_CONTAINS(out, holder);
    /* the plan says so beforehand (and takes nothing) */
    snprintf(args, sizeof args, "plan %s --set %s --set data.synthetic.image=[3,16,16]", r.exp, r.set);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(holder, sizeof holder, "in use now: another runner is writing it (pid %d on host ", (int)launcher);
    CHECK_CONTAINS(out, holder);
    /* SIGINT once the restarted rank 0 handles it (its second "continuing at step") */
    t0 = dist_now();
    while (count_in_file(log, "continuing at step") < 2 && dist_now() - t0 < 120) usleep(10000);
    kill(launcher, SIGINT);
    CHECK_INT(fault_wait(launcher), 130);
    fault_reap();
    /* the last racers; the winner runs to the end */
    if (race(two, 2, r.run, 0, END_FINISH) < 0) return;
    check_whole(&r, 30);
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    prctl(PR_SET_CHILD_SUBREAPER, 1);   /* DDP ranks orphaned by a kill are reaped here */
    TEST_RUN(single_process_races);
    TEST_RUN(ddp_races);
    int rc = test_main_end();
    if (rc == 0) test_remove_dir_if_passed(tmp);
    return rc;
}
