/* test_fault_kill.c: kill at any moment. A short CPU training with a checkpoint every 3
 * steps (checkpoint.every_steps, the background writer) and every epoch of 4 steps is
 * killed with SIGKILL, every process of it at once (its whole session: the runner, or the
 * DDP launcher and both ranks), at 30+ moments drawn from a seeded generator, and
 * restarted (checkpoint.resume: auto) after each kill until it completes. A third of the
 * kills are timed (a random delay after the start: start-up, a step, evaluation, a
 * checkpoint being written in the background); a third land inside a checkpoint write
 * through faultfs.so (FAULTFS_KILL): after a random number of bytes of the file, at its
 * fsync, or at the rename that puts it (or last.ckpt) in place; a third inside a random
 * steps.csv row (which is also the timed attempts' backstop, so no attempt runs to the
 * end before enough kills happened).
 *
 * After every kill every .ckpt file of the run loads (ckpt_read: CRCs, sizes), and every
 * restart either resumes (no fallback to an older checkpoint needed) or, before the first
 * checkpoint file exists, starts afresh: a run directory with any finished checkpoint
 * (even one killed before last.ckpt was linked to it) is always the one continued. The finished run's weights, buffers and optimizer state equal
 * an uninterrupted run's bit for bit, and its metrics.csv / steps.csv hold the same rows
 * (timing columns aside): no torn or duplicated row survives.
 * Seeds: FAULT_KILL_SEED overrides (the seed is printed, so a failure can be replayed). */
#include "tests/fault/fault_util.h"

static char tmp[512];
static uint64_t rng_state;

static uint64_t rnd(void) {   /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rnd01(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static long file_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : 0;
}

/* How many run directories under root/name hold a finished checkpoint file (a name
 * ending in .ckpt: last.ckpt, epoch_<N>.ckpt, step_<S>.ckpt; temporaries do not count).
 * A restart over any of them must continue that run: a second one would mean a restart
 * started afresh and lost the progress its checkpoint held. */
static int runs_with_checkpoints(const char *root, const char *name) {
    char parent[4200];
    snprintf(parent, sizeof parent, "%s/%s", root, name);
    DIR *d = opendir(parent);
    int runs = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char dir[4500];
        snprintf(dir, sizeof dir, "%s/%s/checkpoints", parent, de->d_name);
        DIR *c = opendir(dir);
        bool any = false;
        struct dirent *ce;
        while (c && !any && (ce = readdir(c))) {
            size_t n = strlen(ce->d_name);
            any = n > 5 && !strcmp(ce->d_name + n - 5, ".ckpt");
        }
        if (c) closedir(c);
        runs += any;
    }
    if (d) closedir(d);
    return runs;
}

/* One lineage: reference, then kill/restart until complete; compares the result. */
static void kill_loop(const char *name, const char *mode, int epochs, int want_kills, double max_delay) {
    char exp[700], root[700], set[760], log[800];
    fault_write_exp(exp, sizeof exp, tmp, name, epochs, mode);
    /* the uninterrupted reference */
    snprintf(root, sizeof root, "%s/%s_ref", tmp, name);
    snprintf(set, sizeof set, "output.root=%s", root);
    snprintf(log, sizeof log, "%s/%s_ref.log", tmp, name);
    const char *args[] = {exp, "--set", set, NULL};
    double t_ref = dist_now();
    CHECK_INT(fault_wait(fault_spawn(args, NULL, log)), 0);
    t_ref = dist_now() - t_ref;
    /* a timed kill lands within the first 70% of an uninterrupted run's time (start-up
     * included), so that attempts rarely run to the end on a fast machine */
    if (max_delay > 0.7 * t_ref) max_delay = 0.7 * t_ref;
    char ref[4200];
    const char *r = fault_completed_run(root, name);
    CHECK(r != NULL);
    if (!r) return;
    snprintf(ref, sizeof ref, "%s", r);
    char p[4400];
    snprintf(p, sizeof p, "%s/checkpoints/last.ckpt", ref);
    long ckpt = file_size(p);

    snprintf(root, sizeof root, "%s/%s_kill", tmp, name);
    snprintf(set, sizeof set, "output.root=%s", root);
    int kills = 0, timed = 0, injected = 0, in_row = 0, resumed = 0, attempts = 0;
    const char *done = NULL;
    while (!done && attempts < 200) {
        attempts++;
        snprintf(log, sizeof log, "%s/%s_kill_%d.log", tmp, name, attempts);
        bool had_ckpt = runs_with_checkpoints(root, name) > 0;
        /* past twice the kills asked for (a slow, loaded machine progresses little per
         * attempt), the run is left to finish: the test's time stays bounded */
        bool finish = kills >= 2 * want_kills;
        /* 0: timed; 1: inside a checkpoint write; 2: inside a steps.csv row (a row is about
         * 80 bytes). A timed attempt also dies at its 10th row if the timer has not fired,
         * so no attempt runs to the end before enough kills happened. */
        int kind = finish ? -1 : (int)(rnd() % 3);
        char op[64], after[64], path[64];
        const char *env[8] = {NULL};
        if (kind >= 0) {
            env[0] = "LD_PRELOAD=" FAULTFS_SO;
            env[1] = path;
            env[2] = op;
            env[3] = after;
            env[4] = "FAULTFS_KILL=1";
        }
        if (kind == 1) {
            static const char *const ops[] = {"write", "fsync", "rename"};
            const char *o = ops[rnd() % 3];
            long a = !strcmp(o, "write") ? (long)(rnd01() * (double)ckpt) : (long)(rnd() % 3);
            snprintf(path, sizeof path, "FAULTFS_PATH=.ckpt");
            snprintf(op, sizeof op, "FAULTFS_OP=%s", o);
            snprintf(after, sizeof after, "FAULTFS_AFTER=%ld", a);
        } else if (kind >= 0) {
            snprintf(path, sizeof path, "FAULTFS_PATH=steps.csv");
            snprintf(op, sizeof op, "FAULTFS_OP=write");
            snprintf(after, sizeof after, "FAULTFS_AFTER=%ld", kind == 0 ? 10 * 80 : (long)(rnd() % (8 * 80)));
        }
        bool inject = kind > 0;
        double delay = finish ? 1e9 : rnd01() * max_delay;
        pid_t pid = fault_spawn(args, env, log);
        int st = 0;
        bool exited = false, we_killed = false;
        double t0 = dist_now();
        /* timed kill: after the delay; injected: wait for it to kill itself (or finish) */
        while (!exited) {
            pid_t w = waitpid(pid, &st, WNOHANG);
            if (w == pid) { exited = true; break; }
            if (w < 0) { CHECK(false); return; }
            if ((!inject && dist_now() - t0 >= delay) || dist_now() - t0 > 300) {
                fault_kill_session(pid);
                we_killed = true;
                waitpid(pid, &st, 0);
                exited = true;
            }
            usleep(2000);
        }
        fault_kill_session(pid);   /* DDP: ranks that outlived their launcher */
        fault_reap();
        bool killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        if (killed) {
            kills++;
            if (we_killed) timed++;
            else if (kind == 1) injected++;
            else in_row++;
        } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            char *s = test_read_file(log, NULL);
            fprintf(stderr, "attempt %d ended with status %d:\n%s\n", attempts, st, s ? s : "");
            free(s);
            CHECK(false);
            return;
        }
        /* whatever the moment, every checkpoint on disk loads */
        int n = fault_all_checkpoints_loadable(root, name);
        if (n < 0) fprintf(stderr, "after kill %d (%s): a checkpoint does not load\n", kills, inject ? after : "timed");
        CHECK(n >= 0);
        /* a restart over a checkpoint resumed from it, without falling back */
        char *s = test_read_file(log, NULL);
        if (had_ckpt && s && strstr(s, "runner: resuming")) resumed++;
        if (s) CHECK(!strstr(s, "trying the previous checkpoint"));
        free(s);
        /* never a second run directory with checkpoints: every restart over one continued it */
        if (runs_with_checkpoints(root, name) > 1) {
            fprintf(stderr, "after attempt %d: a restart started a new run instead of continuing\n", attempts);
            CHECK(false);
            return;
        }
        done = fault_completed_run(root, name);
    }
    fprintf(stderr, "%s: uninterrupted %.2f s; %d attempts, %d kills (%d timed, %d inside checkpoint writes, %d "
            "inside steps.csv rows), %d resumed from a checkpoint\n", name, t_ref, attempts, kills, timed, injected,
            in_row, resumed);
    CHECK(done != NULL);
    if (!done) return;
    CHECK(kills >= want_kills);
    CHECK(injected >= want_kills / 4);
    CHECK(resumed >= want_kills / 4);
    char run[4200];
    snprintf(run, sizeof run, "%s", done);
    fault_check_same_run(ref, run);
}

/* The narrowest window, on purpose: killed right after the first checkpoint file
 * (step_3.ckpt) was renamed into place, before last.ckpt was linked to it. The restart
 * must continue that run from step_3.ckpt, not start a new one, and end equal to the
 * uninterrupted run. */
static void killed_before_last_link(void) {
    char exp[700], root[700], set[760], log[800];
    fault_write_exp(exp, sizeof exp, tmp, "gap", 2, "single, world_size: 1");
    snprintf(root, sizeof root, "%s/gap_ref", tmp);
    snprintf(set, sizeof set, "output.root=%s", root);
    snprintf(log, sizeof log, "%s/gap_ref.log", tmp);
    const char *args[] = {exp, "--set", set, NULL};
    CHECK_INT(fault_wait(fault_spawn(args, NULL, log)), 0);
    const char *r = fault_completed_run(root, "gap");
    CHECK(r != NULL);
    if (!r) return;
    char ref[4200];
    snprintf(ref, sizeof ref, "%s", r);
    snprintf(root, sizeof root, "%s/gap_kill", tmp);
    snprintf(set, sizeof set, "output.root=%s", root);
    snprintf(log, sizeof log, "%s/gap_kill_1.log", tmp);
    /* renames: step_3.ckpt's temporary file, then last.ckpt's link (the second, after 1) */
    const char *env[] = {"LD_PRELOAD=" FAULTFS_SO, "FAULTFS_PATH=.ckpt", "FAULTFS_OP=rename", "FAULTFS_AFTER=1",
                         "FAULTFS_KILL=1", NULL};
    pid_t pid = fault_spawn(args, env, log);
    int st = 0;
    waitpid(pid, &st, 0);
    fault_kill_session(pid);
    fault_reap();
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    CHECK_INT(runs_with_checkpoints(root, "gap"), 1);
    snprintf(log, sizeof log, "%s/gap_kill_2.log", tmp);
    CHECK_INT(fault_wait(fault_spawn(args, NULL, log)), 0);
    char *out = test_read_file(log, NULL);
    CHECK_CONTAINS(out, "runner: resuming");
    CHECK_CONTAINS(out, "continuing at step 3");
    free(out);
    CHECK_INT(runs_with_checkpoints(root, "gap"), 1);
    const char *done = fault_completed_run(root, "gap");
    CHECK(done != NULL);
    if (done) fault_check_same_run(ref, done);
}

static void single_process_kills(void) { kill_loop("kill1", "single, world_size: 1", 50, 30, 0.35); }
static void ddp_two_rank_kills(void) { kill_loop("killddp", "ddp, world_size: 2", 40, 10, 0.6); }

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    prctl(PR_SET_CHILD_SUBREAPER, 1);   /* DDP ranks orphaned by a kill are reaped here */
    const char *seed = getenv("FAULT_KILL_SEED");
    rng_state = seed ? strtoull(seed, NULL, 0) : 18;
    fprintf(stderr, "FAULT_KILL_SEED=%llu\n", (unsigned long long)rng_state);
    TEST_RUN(killed_before_last_link);
    TEST_RUN(single_process_kills);
    TEST_RUN(ddp_two_rank_kills);
    return test_main_end();
}
