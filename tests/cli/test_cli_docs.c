/* test_cli_docs.c: the documentation cannot drift from the files.
 *  - Every key docs/architecture.md lists for summary.json, plan.json, env.json and
 *    config_changes.jsonl, and the metrics.csv / steps.csv / timing.csv headers it and
 *    docs/tracking.md give, is parsed from the docs and compared, both ways, with the files of a real run
 *    directory made here (a run, a resume with --set, a run that failed).
 *  - docs/ and README.md are self-contained: no reference to ../shared, every relative
 *    link resolves.
 *  - Every torchrun command line in the docs has --no-python (without it torchrun runs a
 *    Python interpreter on the runner binary).
 */
#include "tests/cli/cli_util.h"

#include <ctype.h>
#include <dirent.h>
#include <unistd.h>

#include "util/json.h"

static char tmp[512];
static char out[1 << 16];

enum { MAX_KEYS = 128 };
typedef struct keyset {
    int n;
    char name[MAX_KEYS][64];
    bool optional[MAX_KEYS];   /* documented as present only sometimes ("only when") */
} keyset_t;

static char *doc(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", test_source_dir(), name);
    char *s = test_read_file(path, NULL);
    if (!s) fprintf(stderr, "cannot read %s\n", path);
    return s;
}

/* The text between the first `open` after `after` and the next `close` (malloc'd). */
static char *between(const char *text, const char *after, const char *open, const char *close) {
    const char *p = text ? strstr(text, after) : NULL;
    if (p) p = strstr(p + strlen(after), open);
    if (!p) return NULL;
    p += strlen(open);
    const char *q = strstr(p, close);
    return q ? strndup(p, (size_t)(q - p)) : NULL;
}

/* Names of a documented key list: items separated by commas outside parentheses and
 * brackets, each item's leading [a-z0-9_] name (quotes skipped); "only when" in an item
 * marks it optional. */
static void parse_keys(const char *list, keyset_t *k) {
    memset(k, 0, sizeof *k);
    int depth = 0;
    const char *item = list;
    for (const char *p = list;; p++) {
        if (*p == '(' || *p == '[') depth++;
        if (*p == ')' || *p == ']') depth--;
        if ((*p == ',' && depth == 0) || !*p) {
            const char *s = item;
            while (*s && (isspace((unsigned char)*s) || *s == '"' || *s == '{')) s++;
            size_t n = 0;
            while (islower((unsigned char)s[n]) || isdigit((unsigned char)s[n]) || s[n] == '_') n++;
            if (n && k->n < MAX_KEYS) {
                snprintf(k->name[k->n], sizeof k->name[0], "%.*s", (int)n, s);
                char *it = strndup(item, (size_t)(p - item));
                k->optional[k->n] = it && strstr(it, "only when");
                free(it);
                k->n++;
            }
            item = p + 1;
        }
        if (!*p) break;
    }
}

/* Checks that the top-level keys of JSON object obj are exactly the documented ones
 * (optional ones may be absent). */
static void check_json_keys(const char *what, const json_t *obj, const keyset_t *k) {
    CHECK(obj && obj->type == JSON_OBJECT);
    if (!obj || obj->type != JSON_OBJECT) return;
    for (int i = 0; i < k->n; i++)
        if (!k->optional[i] && !json_get(obj, k->name[i])) {
            fprintf(stderr, "%s: documented key '%s' is not in the file\n", what, k->name[i]);
            CHECK(!"documented key missing from the file");
        }
    for (size_t j = 0; j < obj->count; j++) {
        bool doc = false;
        for (int i = 0; i < k->n && !doc; i++) doc = !strcmp(k->name[i], obj->keys[j]);
        if (!doc) {
            fprintf(stderr, "%s: key '%s' is in the file but not documented\n", what, obj->keys[j]);
            CHECK(!"undocumented key in the file");
        }
    }
}

static json_t *load_json(const char *dir, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    err_t e = {0};
    json_t *j = json_parse_file(path, 1 << 20, &e);
    if (!j) fprintf(stderr, "%s\n", e.msg);
    return j;
}

/* The first line of dir/name. */
static char *first_line(const char *dir, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *s = test_read_file(path, NULL);
    if (s) s[strcspn(s, "\n")] = '\0';
    return s;
}

static char run_dir[4096], failed_dir[4096];

static void make_runs(void) {
    char exp[700], args[4096];
    snprintf(exp, sizeof exp, "%s/docs.yaml", tmp);
    test_write_file(exp, "name: docs\ndevice: cpu\n"
                         "data: {dataset: synthetic, synthetic: {train_size: 32, val_size: 16, image: [3, 8, 8], "
                         "classes: 4}, workers: 0}\n"
                         "model: {arch: resnet20}\ntrain: {epochs: 2, batch_size: 8, max_steps: 2}\n"
                         "parallel: {mode: single}\nlogging: {print_every: 1}\n");
    snprintf(args, sizeof args, "%s --set output.root=%s/runs", exp, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    char root[700];
    snprintf(root, sizeof root, "%s/runs", tmp);
    const char *d = only_run_dir(root, "docs");
    CHECK(d != NULL);
    if (!d) return;
    snprintf(run_dir, sizeof run_dir, "%s", d);
    /* a resume with a change: config_changes.jsonl */
    snprintf(args, sizeof args, "resume %s --set train.max_steps=3 --set optimizer.lr=0.05", run_dir);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    /* a run that fails after its directory exists (the loss diverges): summary.json with
     * "error" */
    snprintf(args, sizeof args, "%s --set output.root=%s/failed --set optimizer.lr=1e30", exp, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 1);
    snprintf(root, sizeof root, "%s/failed", tmp);
    d = only_run_dir(root, "docs");
    CHECK(d != NULL);
    if (d) snprintf(failed_dir, sizeof failed_dir, "%s", d);
}

static void run_dir_keys_match_docs(void) {
    if (!run_dir[0]) return;
    char *arch = doc("docs/architecture.md");
    const char *sect = arch ? strstr(arch, "## Run directory files") : NULL;
    CHECK(sect != NULL);
    if (!sect) { free(arch); return; }
    keyset_t k;
    /* summary.json */
    char *list = between(sect, "`summary.json`", "flat keys `", "`");
    CHECK(list != NULL);
    parse_keys(list ? list : "", &k);
    CHECK(k.n >= 25);
    json_t *j = load_json(run_dir, "summary.json");
    check_json_keys("summary.json", j, &k);
    CHECK(!json_get(j, "error"));   /* only when failed */
    json_free(j);
    if (failed_dir[0]) {
        j = load_json(failed_dir, "summary.json");
        check_json_keys("summary.json (failed)", j, &k);
        CHECK(json_get(j, "error") != NULL);
        json_free(j);
    }
    free(list);
    /* plan.json */
    list = between(sect, "`plan.json`", "keys `", "`");
    CHECK(list != NULL);
    parse_keys(list ? list : "", &k);
    j = load_json(run_dir, "plan.json");
    check_json_keys("plan.json", j, &k);
    json_free(j);
    free(list);
    /* env.json */
    list = between(sect, "`env.json`", "`{", "}`");
    CHECK(list != NULL);
    parse_keys(list ? list : "", &k);
    CHECK(k.n >= 13);
    j = load_json(run_dir, "env.json");
    check_json_keys("env.json", j, &k);
    json_free(j);
    free(list);
    /* config_changes.jsonl: the record and its change objects */
    list = between(sect, "`config_changes.jsonl`", "`{", "}`");
    CHECK(list != NULL);
    char path[4400];
    snprintf(path, sizeof path, "%s/config_changes.jsonl", run_dir);
    char *line = test_read_file(path, NULL);
    CHECK(line != NULL);
    if (list && line) {
        char *inner = strchr(list, '[');
        keyset_t kc;
        parse_keys(inner ? inner + 1 : "", &kc);   /* the keys of a change */
        if (inner) *inner = '\0';
        parse_keys(list, &k);
        err_t e = {0};
        json_t *r = json_parse(line, strlen(line), &e);
        check_json_keys("config_changes.jsonl", r, &k);
        const json_t *ch = json_get(r, "changes");
        CHECK(ch && ch->type == JSON_ARRAY && ch->count == 2);
        for (size_t i = 0; ch && ch->type == JSON_ARRAY && i < ch->count; i++)
            check_json_keys("config_changes.jsonl change", ch->items[i], &kc);
        json_free(r);
    }
    free(line);
    free(list);
    /* CSV headers, as architecture.md and tracking.md give them */
    char *m_arch = between(sect, "`metrics.csv`", "header exactly\n  `", "`");
    char *s_arch = between(sect, "`steps.csv`", "steps:\n  `", "`");
    char *track = doc("docs/tracking.md");
    char *m_track = between(track, "CSV headers (exact)", "metrics.csv: ", "\n");
    char *s_track = between(track, "CSV headers (exact)", "steps.csv:   ", "\n");
    char *m_file = first_line(run_dir, "metrics.csv"), *s_file = first_line(run_dir, "steps.csv");
    CHECK_STR(m_arch, m_file);
    CHECK_STR(m_track, m_file);
    CHECK_STR(s_arch, s_file);
    CHECK_STR(s_track, s_file);
    char *t_arch = between(sect, "`timing.csv`", "header exactly\n  `", "`");
    char *t_track = between(track, "CSV headers (exact)", "timing.csv:  ", "\n");
    char *t_file = first_line(run_dir, "timing.csv");
    CHECK_STR(t_arch, t_file);
    CHECK_STR(t_track, t_file);
    /* the run took 2 steps, then its resume 1: a row per step (CPU), none lost or doubled */
    snprintf(path, sizeof path, "%s/timing.csv", run_dir);
    CHECK_INT(test_count_lines(path), 4);
    free(t_arch); free(t_track); free(t_file);
    free(m_arch); free(s_arch); free(track); free(m_track); free(s_track); free(m_file); free(s_file);
    free(arch);
}

/* Every relative link of a markdown file resolves; no ../shared reference. */
static void check_links(const char *dir_rel, const char *file) {
    char rel[512];
    snprintf(rel, sizeof rel, "%s%s", dir_rel, file);
    char *s = doc(rel);
    CHECK(s != NULL);
    if (!s) return;
    if (strstr(s, "../shared")) {
        fprintf(stderr, "%s refers to ../shared (outside the repository)\n", rel);
        CHECK(!"reference outside the repository");
    }
    for (const char *p = s; (p = strstr(p, "](")); p += 2) {
        const char *q = p + 2;
        size_t n = strcspn(q, ")#");
        if (!n || !strncmp(q, "http", 4) || !strncmp(q, "mailto:", 7)) continue;
        char target[1024];
        snprintf(target, sizeof target, "%s/%s%.*s", test_source_dir(), dir_rel, (int)n, q);
        if (access(target, F_OK) != 0) {
            fprintf(stderr, "%s: link to %.*s does not resolve\n", rel, (int)n, q);
            CHECK(!"broken link");
        }
    }
    /* torchrun command lines that start the runner need --no-python (a mention of one of
     * torchrun's options, such as `torchrun --max-restarts`, is not a command line) */
    for (const char *p = s; (p = strstr(p, "torchrun --")); p++) {
        size_t n = strcspn(p, "\n`");
        if (memmem(p, n, "runner", 6) && !memmem(p, n, "--no-python", 11)) {
            fprintf(stderr, "%s: '%.*s' lacks --no-python\n", rel, (int)n, p);
            CHECK(!"torchrun without --no-python");
        }
    }
    free(s);
}

static void docs_are_self_contained(void) {
    check_links("", "README.md");
    char path[1024];
    snprintf(path, sizeof path, "%s/docs", test_source_dir());
    DIR *d = opendir(path);
    CHECK(d != NULL);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 3 && !strcmp(de->d_name + l - 3, ".md")) {
            check_links("docs/", de->d_name);
            n++;
        }
    }
    if (d) closedir(d);
    CHECK(n >= 7);   /* design.md among them */
    snprintf(path, sizeof path, "%s/docs/design.md", test_source_dir());
    CHECK(access(path, R_OK) == 0);
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    TEST_RUN(make_runs);
    TEST_RUN(run_dir_keys_match_docs);
    TEST_RUN(docs_are_self_contained);
    test_remove_dir_if_passed(tmp);
    return test_main_end();
}
