/* train_skipped.c: the image files a run leaves out (data.bad_images: skip), named.
 *
 * Two kinds, counted apart: files found bad while indexing (left out of the dataset: the
 * plan's count; every rank's index is the same, so rank 0 knows them all) and files that
 * failed to decode (each replaced by the next sample that decodes; each rank finds only
 * those of the samples it decodes). Rank 0 keeps the union. At each sync point (the end of
 * an epoch's steps, a step checkpoint, a stop: places every rank reaches in the same order)
 * one small all-reduce says whether any rank found something new; only then do the other
 * ranks send their finds through the store (keys numbered by those sync points) and rank
 * 0 merges them. So the list is complete at every checkpoint whatever the world size or
 * worker count, and a resumed run starts from the list its directory holds (the replayed
 * steps find the rest again).
 *
 * Output, rank 0: skipped_images.jsonl in the run directory, rewritten atomically when it
 * changes, one object per file {"found": "indexing"|"decoding", "split": "train"|"val",
 * "path", "reason"}, sorted by found (indexing first), split, path; and the console: the
 * first SKIPPED_NAMED files of each kind by name, then counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/train_internal.h"
#include "util/fs.h"
#include "util/json.h"

enum { SKIPPED_NAMED = 10, FOUND_INDEXING = 0, FOUND_DECODING = 1, PATH_CAP = 4096 };

typedef struct skipped_file {
    int found, split;        /* FOUND_*, data_split_t */
    char *path, *reason;
} skipped_file_t;

struct train_skipped {
    skipped_file_t *f;
    int64_t n, cap;
    int64_t n_found[2];
    int64_t named_decoding;  /* decode-time finds named on the console so far */
    int seq;                 /* sync points with finds so far (store keys) */
};

static int cmp_file(const void *a, const void *b) {
    const skipped_file_t *x = a, *y = b;
    if (x->found != y->found) return x->found - y->found;
    if (x->split != y->split) return x->split - y->split;
    return strcmp(x->path, y->path);
}

/* Adds a file unless it is listed (1 added, 0 known, -1 out of memory); keeps f sorted. */
static int add_file(train_skipped_t *s, int found, int split, const char *path, const char *reason) {
    skipped_file_t key = {found, split, (char *)path, NULL};
    if (s->n && bsearch(&key, s->f, (size_t)s->n, sizeof *s->f, cmp_file)) return 0;
    if (s->n == s->cap) {
        int64_t c = s->cap ? 2 * s->cap : 32;
        skipped_file_t *g = realloc(s->f, (size_t)c * sizeof *g);
        if (!g) return -1;
        s->f = g, s->cap = c;
    }
    char *p = strdup(path), *r = strdup(reason && *reason ? reason : "(no reason recorded)");
    if (!p || !r) { free(p); free(r); return -1; }
    int64_t at = s->n;
    while (at > 0 && cmp_file(&key, &s->f[at - 1]) < 0) at--;
    memmove(s->f + at + 1, s->f + at, (size_t)(s->n - at) * sizeof *s->f);
    s->f[at] = (skipped_file_t){found, split, p, r};
    s->n++;
    s->n_found[found]++;
    return 1;
}

static const char *split_name(int split) { return split == DATA_SPLIT_VAL ? "val" : "train"; }

static int write_list(const trainer_t *t, err_t *e) {
    char *buf = NULL, path[CFG_PATH + 32];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return err_set(e, ERR_RUNTIME, "out of memory");
    const train_skipped_t *s = t->skipped;
    for (int64_t i = 0; i < s->n; i++) {
        jw_t w;
        jw_init(&w, f, false);
        jw_obj_begin(&w);
        jw_kstr(&w, "found", s->f[i].found == FOUND_DECODING ? "decoding" : "indexing");
        jw_kstr(&w, "split", split_name(s->f[i].split));
        jw_kstr(&w, "path", s->f[i].path);
        jw_kstr(&w, "reason", s->f[i].reason);
        jw_obj_end(&w);
        fputc('\n', f);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/skipped_images.jsonl", t->run_dir);
    int rc = write_file_atomic(path, buf ? buf : "", len, e);
    free(buf);
    return rc;
}

/* A resumed run's earlier decode-time finds, from its skipped_images.jsonl (a missing or
 * unreadable file: none; the replayed steps find them again). */
static void read_previous(trainer_t *t) {
    char path[CFG_PATH + 32];
    snprintf(path, sizeof path, "%s/skipped_images.jsonl", t->run_dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        err_t ignore = {0};
        json_t *j = json_parse(line, (size_t)n, &ignore);
        if (j && !strcmp(json_get_string(j, "found", ""), "decoding") && *json_get_string(j, "path", ""))
            add_file(t->skipped, FOUND_DECODING, strcmp(json_get_string(j, "split", ""), "val") ? 0 : 1,
                     json_get_string(j, "path", ""), json_get_string(j, "reason", ""));
        json_free(j);
    }
    free(line);
    fclose(f);
}

int trainer_skipped_start(trainer_t *t, err_t *e) {
    if (!t->p->images || t->e->data.bad_images != 1) return 0;
    if (!(t->skipped = calloc(1, sizeof *t->skipped))) return err_set(e, ERR_RUNTIME, "out of memory");
    if (!t->rank0) return 0;
    const dataset_t *ds[2] = {t->train_ds, t->val_ds};
    char path[PATH_CAP], line[PATH_CAP + 1200];
    for (int split = 0; split < 2; split++)
        for (int64_t k = 0; k < dataset_notes(ds[split])->skipped; k++) {
            const char *why = dataset_skipped_file(ds[split], k, path, sizeof path);
            if (why && add_file(t->skipped, FOUND_INDEXING, split, path, why) < 0)
                return err_set(e, ERR_RUNTIME, "out of memory");
        }
    if (t->p->resumes) read_previous(t);
    const train_skipped_t *s = t->skipped;
    if (!s->n) return 0;
    if (s->n_found[FOUND_INDEXING]) {
        snprintf(line, sizeof line, "data.bad_images: skip: %lld image file%s found bad while indexing, left out "
                 "(all in %.1000s/skipped_images.jsonl):", (long long)s->n_found[FOUND_INDEXING],
                 s->n_found[FOUND_INDEXING] == 1 ? "" : "s", t->run_dir);
        track_console(t->track, line);
        for (int64_t i = 0; i < s->n_found[FOUND_INDEXING] && i < SKIPPED_NAMED; i++) {
            snprintf(line, sizeof line, "  %.4000s: %.1000s", s->f[i].path, s->f[i].reason);
            track_console(t->track, line);
        }
        if (s->n_found[FOUND_INDEXING] > SKIPPED_NAMED) {
            snprintf(line, sizeof line, "  ... and %lld more", (long long)(s->n_found[FOUND_INDEXING] - SKIPPED_NAMED));
            track_console(t->track, line);
        }
    }
    return write_list(t, e);
}

/* This rank's new decode-time finds as "split\tindex\treason\n" lines (malloc'd). */
static char *take_local(trainer_t *t, size_t *len) {
    char *buf = NULL;
    *len = 0;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    loader_t *ld[2] = {t->train_ld, t->val_ld};
    for (int split = 0; split < 2; split++) {
        int64_t *idx;
        char **why;
        int64_t n = ld[split] ? loader_take_bad(ld[split], &idx, &why) : 0;
        for (int64_t i = 0; i < n; i++) {
            for (char *c = why[i]; c && *c; c++)
                if (*c == '\t' || *c == '\n') *c = ' ';
            fprintf(f, "%d\t%lld\t%s\n", split, (long long)idx[i], why[i] ? why[i] : "");
            free(why[i]);
        }
        free(idx);
        free(why);
    }
    fclose(f);
    return buf;
}

/* Rank 0: merges finds in the take_local format; names the new ones on the console while
 * fewer than SKIPPED_NAMED were, counts the others in *unnamed. */
static int merge(trainer_t *t, char *text, int64_t *added_n, int64_t *unnamed, err_t *e) {
    train_skipped_t *s = t->skipped;
    const dataset_t *ds[2] = {t->train_ds, t->val_ds};
    char path[PATH_CAP], line[PATH_CAP + 1200];
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        int split = l[0] == '1';
        char *tab = strchr(l, '\t'), *tab2 = tab ? strchr(tab + 1, '\t') : NULL;
        if (!tab2) continue;
        long long idx = atoll(tab + 1);
        if (idx < 0 || idx >= dataset_size(ds[split])) continue;
        dataset_sample_path(ds[split], idx, path, sizeof path);
        int added = add_file(s, FOUND_DECODING, split, path, tab2 + 1);
        if (added < 0) return err_set(e, ERR_RUNTIME, "out of memory");
        if (!added) continue;
        (*added_n)++;
        if (s->named_decoding >= SKIPPED_NAMED) {
            (*unnamed)++;
            continue;
        }
        s->named_decoding++;
        snprintf(line, sizeof line, "data.bad_images: skip: %.4000s failed to decode, replaced by the next "
                 "sample (%.1000s)", path, tab2 + 1);
        track_console(t->track, line);
    }
    return 0;
}

/* A rank's finds of sync point seq through the store, in parts of at most STORE_PART
 * bytes (whole lines; the store takes values up to 1 MiB): key skipped/SEQ/RANK holds
 * the number of parts, skipped/SEQ/RANK/I part I. */
enum { STORE_PART = 512 << 10 };

static int send_finds(trainer_t *t, int seq, const char *text, size_t len, err_t *e) {
    char key[96];
    int parts = 0;
    for (size_t at = 0; at < len; parts++) {
        size_t n = len - at;
        if (n > STORE_PART) {   /* end at the last line break that fits */
            n = STORE_PART;
            while (n > 1 && text[at + n - 1] != '\n') n--;
        }
        snprintf(key, sizeof key, "skipped/%d/%d/%d", seq, t->env->rank, parts);
        if (store_set(t->store, key, text + at, n, e)) return -1;
        at += n;
    }
    char count[16];
    snprintf(count, sizeof count, "%d", parts);
    snprintf(key, sizeof key, "skipped/%d/%d", seq, t->env->rank);
    return store_set(t->store, key, count, strlen(count), e);
}

/* Rank 0: rank r's finds of sync point seq, merged. */
static int receive_finds(trainer_t *t, int seq, int r, int64_t *added, int64_t *unnamed, err_t *e) {
    char key[96], count[16];
    size_t n = 0;
    double timeout = t->e->parallel.timeout_s;
    snprintf(key, sizeof key, "skipped/%d/%d", seq, r);
    if (store_get(t->store, key, count, sizeof count - 1, &n, timeout, e)) return -1;
    count[n < sizeof count ? n : sizeof count - 1] = '\0';
    int parts = atoi(count), rc = 0;
    char *buf = malloc(STORE_PART + 1);
    if (!buf) return err_set(e, ERR_RUNTIME, "out of memory");
    for (int i = 0; !rc && i < parts; i++) {
        snprintf(key, sizeof key, "skipped/%d/%d/%d", seq, r, i);
        rc = store_get(t->store, key, buf, STORE_PART, &n, timeout, e);
        if (!rc) {
            buf[n < STORE_PART ? n : STORE_PART] = '\0';
            rc = merge(t, buf, added, unnamed, e);
        }
    }
    free(buf);
    return rc;
}

int trainer_skipped_sync(trainer_t *t, err_t *e) {
    train_skipped_t *s = t->skipped;
    if (!s) return 0;
    size_t len = 0;
    char *mine = take_local(t, &len);
    if (!mine) return err_set(e, ERR_RUNTIME, "out of memory");
    int rc = 0;
    int64_t added = 0, unnamed = 0;
    if (t->ddp_mode && t->store && t->comm) {
        /* whether any rank found something: no store traffic (and no keys piling up in it
         * over a long run) when none did, the usual case */
        float any = len > 0;
        if (trainer_allreduce_small(t, &any, 1, e)) { free(mine); return -1; }
        if (any == 0) { free(mine); return 0; }
        int seq = s->seq++;
        if (!t->rank0) {
            rc = send_finds(t, seq, mine, len, e);
            free(mine);
            return rc;
        }
        rc = merge(t, mine, &added, &unnamed, e);
        for (int r = 1; !rc && r < t->env->world_size; r++) rc = receive_finds(t, seq, r, &added, &unnamed, e);
    } else {
        rc = merge(t, mine, &added, &unnamed, e);
    }
    free(mine);
    if (!rc && unnamed) {
        char line[CFG_PATH + 200];
        snprintf(line, sizeof line, "data.bad_images: skip: %lld more image file%s failed to decode (%lld so far; "
                 "all in %.1000s/skipped_images.jsonl)", (long long)unnamed, unnamed == 1 ? "" : "s",
                 (long long)s->n_found[FOUND_DECODING], t->run_dir);
        track_console(t->track, line);
    }
    if (!rc && added) rc = write_list(t, e);
    return rc;
}

void trainer_skipped_report(const trainer_t *t) {
    const train_skipped_t *s = t->skipped;
    if (!s || !t->rank0 || !s->n) return;
    char line[CFG_PATH + 300];
    snprintf(line, sizeof line, "data.bad_images: skip: %lld image file%s skipped: %lld found bad while indexing "
             "(left out), %lld failed to decode (replaced); all in %.1000s/skipped_images.jsonl",
             (long long)s->n, s->n == 1 ? "" : "s", (long long)s->n_found[FOUND_INDEXING],
             (long long)s->n_found[FOUND_DECODING], t->run_dir);
    track_console(t->track, line);
}

void trainer_skipped_counts(const trainer_t *t, int64_t *indexing, int64_t *decoding) {
    *indexing = t->skipped ? t->skipped->n_found[FOUND_INDEXING] : 0;
    *decoding = t->skipped ? t->skipped->n_found[FOUND_DECODING] : 0;
}

void trainer_skipped_free(trainer_t *t) {
    train_skipped_t *s = t->skipped;
    if (!s) return;
    for (int64_t i = 0; i < s->n; i++) {
        free(s->f[i].path);
        free(s->f[i].reason);
    }
    free(s->f);
    free(s);
    t->skipped = NULL;
}
