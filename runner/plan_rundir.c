/* plan_rundir.c: which run directory a run writes and whether it resumes (plan.h
 * plan_rundir). Reads run directories; writes nothing.
 *
 * checkpoint.resume: auto, in order:
 *   1. the newest unfinished run of the name whose checkpoint has this configuration's
 *      hash resumes;
 *   2. else the newest completed run of the name continues when this experiment only
 *      extends its schedule: train.max_steps larger (or removed) and/or train.epochs
 *      larger, every other hashed key the same, and the run not stopped by early
 *      stopping. A max_steps extension is exact (the schedule follows train.epochs, and a
 *      max_steps checkpoint carries the cut epoch's sums); an epochs extension is exact
 *      with a constant or multistep schedule (the learning rate of a step does not depend
 *      on the total), not with cosine: then it is a new run, and the plan says which
 *      command continues the old one anyway;
 *   3. else a new run, under <root>/<name>/, named <YYYYmmdd-HHMMSS>-<id> when it starts.
 * An unfinished run of another hash is never continued; the plan names it and the
 * `runner resume DIR --set ...` line that would continue it with the change.
 */
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/plan.h"
#include "runner/rundir.h"
#include "runner/runlock.h"
#include "util/json.h"

/* The unfinished run `other` was written by another configuration: note which hashed
 * keys differ (from its resolved.yaml) so the new run can say why it did not continue it,
 * and how to continue it with the change instead. */
static void note_changed_config(const experiment_t *e, const char *other, plan_t *p) {
    snprintf(p->changed_from, sizeof p->changed_from, "%s", other);
    char path[CFG_PATH + 32];
    snprintf(path, sizeof path, "%s/resolved.yaml", other);
    experiment_t *old = malloc(sizeof *old);
    config_change_t ch[8];
    err_t ignore = {0};
    int n = old && config_load(path, NULL, 0, old, &ignore) == 0 ? config_diff(old, e, true, ch, 8) : 0;
    free(old);
    size_t a = 0, b = 0;
    for (int i = 0; i < n && i < 8; i++) {
        a += (size_t)snprintf(p->changes + a, a < sizeof p->changes ? sizeof p->changes - a : 0, "%s%s %s -> %s",
                              i ? ", " : "", ch[i].key, ch[i].before, ch[i].after);
        const char *q = strpbrk(ch[i].after, " []{}\"'$*?~;&|<>()") ? "'" : "";
        b += (size_t)snprintf(p->change_sets + b, b < sizeof p->change_sets ? sizeof p->change_sets - b : 0,
                              " --set %s%s=%s%s", q, ch[i].key, ch[i].after, q);
    }
    if (n > 8) snprintf(p->changes + (a < sizeof p->changes ? a : sizeof p->changes - 1),
                        a < sizeof p->changes ? sizeof p->changes - a : 1, ", and %d more", n - 8);
    if (n == 0) snprintf(p->changes, sizeof p->changes, "its checkpoint's configuration hash differs");
}

/* "train.max_steps 6 -> 10" and the like for the keys that grew from old to e. */
static void describe_growth(const experiment_t *old, const experiment_t *e, char *out, size_t len) {
    size_t at = 0;
    out[0] = '\0';
    if (e->train.epochs != old->train.epochs)
        at += (size_t)snprintf(out, len, "train.epochs %d -> %d", old->train.epochs, e->train.epochs);
    if (e->train.max_steps != old->train.max_steps && at < len) {
        char a[32], b[32];
        snprintf(a, sizeof a, old->train.max_steps > 0 ? "%lld" : "null", (long long)old->train.max_steps);
        snprintf(b, sizeof b, e->train.max_steps > 0 ? "%lld" : "null", (long long)e->train.max_steps);
        snprintf(out + at, len - at, "%strain.max_steps %s -> %s", at ? ", " : "", a, b);
    }
}

/* Step 2 above: whether the newest completed run of the name continues. Returns 1 and
 * sets run_dir/resume_from/extends when it does; 0 otherwise, with p->note saying why a
 * completed run is not continued where the user may have meant it to be. */
static int plan_extension(const experiment_t *e, plan_t *p) {
    char done[CFG_PATH], path[CFG_PATH + 64], ck[CFG_PATH + 128];
    if (!rundir_find_completed(e->output.root, e->name, done, sizeof done) ||
        !rundir_resume_checkpoint(done, ck, sizeof ck))
        return 0;
    snprintf(path, sizeof path, "%s/summary.json", done);
    err_t ignore = {0};
    json_t *s = json_parse_file(path, 1 << 20, &ignore);
    if (!s) return 0;
    int64_t steps = (int64_t)json_get_number(s, "steps", -1);
    const json_t *es = json_get(s, "early_stopped");
    bool early = es && es->type == JSON_BOOL && es->boolean;
    json_free(s);
    experiment_t *old = malloc(sizeof *old);
    snprintf(path, sizeof path, "%s/resolved.yaml", done);
    if (!old || steps < 0 || config_load(path, NULL, 0, old, &ignore) != 0) {
        free(old);
        return 0;
    }
    /* the hashed keys that differ: only a longer train.epochs may (max_steps is not hashed) */
    config_change_t ch[4];
    int n = config_diff(old, e, true, ch, 4);
    bool other = n > 1 || (n == 1 && strcmp(ch[0].key, "train.epochs"));
    bool shorter = e->train.epochs < old->train.epochs;
    char grew[256];
    describe_growth(old, e, grew, sizeof grew);
    int rc = 0;
    if (other || shorter || early) {
        /* another experiment, or nothing a continuation could add: a new run, as before */
    } else if (steps >= p->total_steps) {
        char more[96];   /* the key that ended it, doubled */
        if (old->train.max_steps > 0 && steps == old->train.max_steps)
            snprintf(more, sizeof more, "--set train.max_steps=%lld", (long long)(steps * 2));
        else
            snprintf(more, sizeof more, "--set train.epochs=%d", old->train.epochs * 2);
        snprintf(p->note, sizeof p->note, "the newest run of %s, %s, completed all its %lld steps, so this is a new "
                 "run; to train that one further instead, run this command with a larger train.max_steps or "
                 "train.epochs (e.g. %s)", e->name, done, (long long)steps, more);
    } else if (e->train.epochs != old->train.epochs && e->schedule.name == SCHED_COSINE) {
        snprintf(p->note, sizeof p->note, "not continuing the completed run %.700s: its cosine schedule decays to "
                 "train.epochs %d, so continuing it to %d epochs would not equal a %d-epoch run; this is a new "
                 "run. To continue that run anyway (the learning rate then follows the %d-epoch cosine from step "
                 "%lld on): runner resume %.700s --set train.epochs=%d", done, old->train.epochs, e->train.epochs,
                 e->train.epochs, e->train.epochs, (long long)steps, done, e->train.epochs);
    } else {
        snprintf(p->run_dir, sizeof p->run_dir, "%s", done);
        snprintf(p->resume_from, sizeof p->resume_from, "%s", ck);
        snprintf(p->extends, sizeof p->extends, "%s, from step %lld to %lld", grew[0] ? grew : "a longer schedule",
                 (long long)steps, (long long)p->total_steps);
        p->resumes = true;
        rc = 1;
    }
    free(old);
    return rc;
}

int plan_rundir(const experiment_t *e, const plan_request_t *req, plan_t *p, err_t *err) {
    p->resumes = false;
    p->resume_from[0] = '\0';
    p->run_dir[0] = '\0';
    char ck[CFG_PATH + 128];
    if (req && req->resume_dir) {
        snprintf(p->run_dir, sizeof p->run_dir, "%s", req->resume_dir);
        if (!rundir_resume_checkpoint(req->resume_dir, ck, sizeof ck))
            return err_set(err, ERR_INPUT, "%s: no checkpoint to resume from (checkpoints/last.ckpt is "
                           "missing); the run stopped before its first checkpoint: start it again with "
                           "runner %s", req->resume_dir, e->source_path);
        p->resumes = true;
        snprintf(p->resume_from, sizeof p->resume_from, "%s", ck);
    } else if (!strcmp(e->checkpoint.resume, "auto")) {
        /* only a run of the same configuration continues; a changed one starts afresh */
        char other[CFG_PATH];
        if (rundir_find_resumable(e->output.root, e->name, config_hash(e), p->run_dir, sizeof p->run_dir,
                                  other, sizeof other)) {
            p->resumes = true;
            rundir_resume_checkpoint(p->run_dir, ck, sizeof ck);
            snprintf(p->resume_from, sizeof p->resume_from, "%s", ck);
        } else {
            p->run_dir[0] = '\0';
            if (other[0]) note_changed_config(e, other, p);
            plan_extension(e, p);
        }
    } else if (strcmp(e->checkpoint.resume, "never") != 0) {
        const char *r = e->checkpoint.resume;
        struct stat st;
        if (stat(r, &st) != 0)
            return err_set(err, ERR_INPUT, "%s: checkpoint.resume: %s does not exist; give a run directory, a "
                           ".ckpt file, auto or never", e->source_path, r);
        if (S_ISDIR(st.st_mode)) {
            snprintf(p->run_dir, sizeof p->run_dir, "%s", r);
            rundir_resume_checkpoint(r, ck, sizeof ck);
        } else {
            char tmp[CFG_PATH];
            snprintf(tmp, sizeof tmp, "%s", r);
            snprintf(p->run_dir, sizeof p->run_dir, "%s", dirname(dirname(tmp)));
            snprintf(ck, sizeof ck, "%s", r);
        }
        if (access(ck, R_OK) != 0)
            return err_set(err, ERR_INPUT, "%s: checkpoint.resume: %s has no checkpoint to resume from",
                           e->source_path, ck);
        p->resumes = true;
        snprintf(p->resume_from, sizeof p->resume_from, "%s", ck);
    }
    if (p->resumes) {
        /* another runner writing it now: running this would stop with exit 2 (runlock.h) */
        if (!run_lock_holder(p->run_dir, p->busy, sizeof p->busy)) p->busy[0] = '\0';
    } else {
        snprintf(p->run_parent, sizeof p->run_parent, "%s/%s", e->output.root, e->name);
    }
    return 0;
}
