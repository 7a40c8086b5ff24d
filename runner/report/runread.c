/* runread.c: the run-directory reader declared in runread.h (numeric CSV by header name,
 * the JSON files, median). It does not compute report numbers; report.c does. */
#include "runner/report/runread.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { CSV_MAX_BYTES = 256 << 20, JSON_MAX_BYTES = 16 << 20, CSV_MAX_COLS = 256 };

/* Reads a whole file into a NUL-terminated heap buffer. Returns NULL with ERR_INPUT set
 * ("PATH: cannot open: ...") when it cannot be read or is larger than max bytes. */
static char *read_all(const char *path, size_t max, size_t *len, err_t *e) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_errno(e, ERR_INPUT, "%s: cannot open", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap, e);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap > max) {
                free(buf);
                fclose(f);
                err_set(e, ERR_INPUT, "%s: larger than %zu bytes; is this the right file?", path, max);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); buf = NULL; err_set(e, ERR_RUNTIME, "out of memory reading %s", path); break; }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
        err_errno(e, ERR_INPUT, "%s: read error", path);
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

void csv_table_free(csv_table_t *t) {
    if (!t) return;
    for (int c = 0; c < t->ncols; c++) {
        if (t->names) free(t->names[c]);
        if (t->cols) free(t->cols[c]);
    }
    free(t->names);
    free(t->cols);
    memset(t, 0, sizeof *t);
}

/* Index of the column called name, or -1. */
static int col_index(const csv_table_t *t, const char *name) {
    for (int c = 0; c < t->ncols; c++)
        if (!strcmp(t->names[c], name)) return c;
    return -1;
}

const double *csv_table_col(const csv_table_t *t, const char *name) {
    int c = col_index(t, name);
    return c < 0 ? NULL : t->cols[c];
}

/* Splits line (modified in place, no newline) at commas into at most max fields,
 * returning the field count (max + 1 when there are more). Trailing '\r' is removed. */
static int split_fields(char *line, char **fields, int max) {
    size_t l = strlen(line);
    if (l && line[l - 1] == '\r') line[l - 1] = '\0';
    int n = 0;
    char *p = line;
    for (;;) {
        if (n == max) return max + 1;
        fields[n++] = p;
        char *comma = strchr(p, ',');
        if (!comma) break;
        *comma = '\0';
        p = comma + 1;
    }
    return n;
}

/* Parses one cell: empty (or blank) is NaN; otherwise the whole cell must be a number. */
static int parse_cell(const char *s, double *out) {
    while (*s == ' ') s++;
    if (!*s) { *out = NAN; return 0; }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (*end == ' ') end++;
    if (end == s || *end) return -1;
    *out = v;
    return 0;
}

/* Appends a row of values to every column, growing the arrays geometrically. */
static int table_push(csv_table_t *t, size_t *cap, const double *vals, err_t *e) {
    if (t->nrows == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        for (int c = 0; c < t->ncols; c++) {
            double *p = realloc(t->cols[c], nc * sizeof *p);
            if (!p) return err_set(e, ERR_RUNTIME, "out of memory reading a CSV file");
            t->cols[c] = p;
        }
        *cap = nc;
    }
    for (int c = 0; c < t->ncols; c++) t->cols[c][t->nrows] = vals[c];
    t->nrows++;
    return 0;
}

int csv_table_load(const char *path, const char *const *required, int nreq, csv_table_t *t,
                   err_t *e) {
    memset(t, 0, sizeof *t);
    size_t len;
    char *buf = read_all(path, CSV_MAX_BYTES, &len, e);
    if (!buf) return -1;
    return csv_table_parse(path, buf, required, nreq, t, e);
}

int csv_table_parse(const char *path, char *buf, const char *const *required, int nreq,
                    csv_table_t *t, err_t *e) {
    memset(t, 0, sizeof *t);
    char *fields[CSV_MAX_COLS + 1];
    double vals[CSV_MAX_COLS];
    size_t cap = 0;
    int rc = 0, lineno = 0;
    char *p = buf;
    while (*p && rc == 0) {
        char *nl = strchr(p, '\n');
        bool complete = nl != NULL;
        if (nl) *nl = '\0';
        char *line = p;
        p = nl ? nl + 1 : p + strlen(p);
        lineno++;
        if (lineno == 1) {
            int n = split_fields(line, fields, CSV_MAX_COLS);
            if (n > CSV_MAX_COLS) {
                rc = err_set(e, ERR_INPUT, "%s: line 1: more than %d columns; is this a runner CSV file?",
                             path, CSV_MAX_COLS);
                break;
            }
            t->names = xcalloc((size_t)n, sizeof *t->names, e);
            t->cols = xcalloc((size_t)n, sizeof *t->cols, e);
            if (!t->names || !t->cols) { rc = -1; break; }
            t->ncols = n;
            cap = 64;
            for (int c = 0; c < n && rc == 0; c++) {
                t->names[c] = strdup(fields[c]);
                t->cols[c] = malloc(cap * sizeof(double));
                if (!t->names[c] || !t->cols[c]) rc = err_set(e, ERR_RUNTIME, "out of memory reading %s", path);
            }
            for (int i = 0; i < nreq && rc == 0; i++)
                if (col_index(t, required[i]) < 0)
                    rc = err_set(e, ERR_INPUT,
                                 "%s: line 1: the header has no '%s' column; the file must start "
                                 "with the header from docs/architecture.md",
                                 path, required[i]);
            continue;
        }
        if (line[0] == '\0' || (line[0] == '\r' && line[1] == '\0')) continue;  /* blank line */
        int n = split_fields(line, fields, CSV_MAX_COLS);
        if (n != t->ncols) {
            if (!complete) break;  /* half-written last line of a killed run */
            rc = err_set(e, ERR_INPUT, "%s: line %d: %d fields where the header has %d; "
                         "fix or remove that line", path, lineno, n > CSV_MAX_COLS ? n - 1 : n, t->ncols);
            break;
        }
        for (int c = 0; c < n && rc == 0; c++)
            if (parse_cell(fields[c], &vals[c]))
                rc = err_set(e, ERR_INPUT, "%s: line %d, column %d (%s): '%.40s' is not a number; "
                             "fix or remove that line", path, lineno, c + 1, t->names[c], fields[c]);
        if (rc == 0) rc = table_push(t, &cap, vals, e);
    }
    if (rc == 0 && lineno == 0)
        rc = err_set(e, ERR_INPUT, "%s: line 1: the file is empty; it must start with the header "
                     "from docs/architecture.md", path);
    free(buf);
    if (rc) csv_table_free(t);
    return rc;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Loads dir/name as JSON into *out. A missing file is fine when optional (leaves NULL);
 * otherwise the error names the file (with line and column for a parse error). */
static int load_json(const char *dir, const char *name, bool optional, json_t **out, err_t *e) {
    char path[RUNREAD_PATH + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *out = NULL;
    if (!file_exists(path)) {
        if (optional) return 0;
        return err_set(e, ERR_INPUT, "%s: missing; is %s a run directory of a run that got as far "
                       "as writing it?", path, dir);
    }
    *out = json_parse_file(path, JSON_MAX_BYTES, e);
    if (!*out) return -1;
    if ((*out)->type != JSON_OBJECT) {
        json_free(*out);
        *out = NULL;
        return err_set(e, ERR_INPUT, "%s: line 1, column 1: expected a JSON object {...}", path);
    }
    return 0;
}

/* Loads dir/name as a CSV table with the required columns; missing file handled like
 * load_json. *has tells whether it was read. */
static int load_csv(const char *dir, const char *name, bool optional, const char *const *req,
                    int nreq, csv_table_t *t, bool *has, err_t *e) {
    char path[RUNREAD_PATH + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *has = false;
    if (!file_exists(path)) {
        if (optional) return 0;
        return err_set(e, ERR_INPUT, "%s: missing; is %s a run directory of a run that finished "
                       "at least one epoch?", path, dir);
    }
    if (csv_table_load(path, req, nreq, t, e)) return -1;
    *has = true;
    return 0;
}

/* Reads resolved.yaml into r->config without comment lines and without the top-level
 * seed: line, whose value goes to r->seed. A missing or unreadable file leaves NULL. */
static void load_config(run_files_t *r) {
    char path[RUNREAD_PATH + 32];
    snprintf(path, sizeof path, "%s/resolved.yaml", r->dir);
    err_t ignored;
    char *text = read_all(path, JSON_MAX_BYTES, NULL, &ignored);
    if (!text) return;
    char *out = text, *p = text;
    while (*p) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p + 1) : strlen(p);
        const char *q = p;
        while (*q == ' ') q++;
        if (!strncmp(p, "seed:", 5)) {
            const char *v = p + 5;
            while (*v == ' ') v++;
            size_t vl = strcspn(v, " #\r\n");
            snprintf(r->seed, sizeof r->seed, "%.*s", (int)(vl < sizeof r->seed ? vl : sizeof r->seed - 1), v);
        } else if (*q != '#') {
            /* every other line as it is (its trailing comment describes the key) */
            memmove(out, p, len);
            out += len;
        }
        p += len;
    }
    *out = '\0';
    r->config = text;
}

/* Lenient loading: keeps the first problem's message (the error the file gave). */
static void note_problem(run_files_t *r, err_t *local) {
    if (!r->problem[0] && local->msg[0]) snprintf(r->problem, sizeof r->problem, "%.1000s", local->msg);
    err_clear(local);
}

int run_files_load(const char *dir, bool lenient, run_files_t *r, err_t *e) {
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (lenient) {
            snprintf(r->problem, sizeof r->problem, "%s: no run directory", dir);
            return 0;
        }
        return err_set(e, ERR_INPUT, "%s: not a directory; give the path of a run directory "
                       "(runs/<name>/<time>-<id>)", dir);
    }
    static const char *const metrics_req[] = {"epoch", "train_loss", "val_top1", "epoch_seconds"};
    static const char *const steps_req[] = {"images_per_second", "step_seconds",
                                            "comm_exposed_seconds"};
    err_t local;
    err_t *ep = lenient ? &local : e;
    int rcs[6];
    err_clear(&local);
    rcs[0] = load_json(dir, "summary.json", false, &r->summary, ep);
    if (rcs[0] && !lenient) return -1;
    if (rcs[0]) note_problem(r, &local);
    rcs[1] = load_csv(dir, "metrics.csv", false, metrics_req, 4, &r->metrics, &r->has_metrics, ep);
    if (rcs[1] && !lenient) return -1;
    if (rcs[1]) note_problem(r, &local);
    rcs[2] = load_csv(dir, "steps.csv", true, steps_req, 3, &r->steps, &r->has_steps, ep);
    if (rcs[2] && !lenient) return -1;
    if (rcs[2]) note_problem(r, &local);
    rcs[3] = load_json(dir, "env.json", true, &r->env, ep);
    if (rcs[3] && !lenient) return -1;
    if (rcs[3]) note_problem(r, &local);
    static const char *const timing_req[] = {"step", "steps", "since_start", "images", "seconds"};
    rcs[4] = load_csv(dir, "timing.csv", true, timing_req, 5, &r->timing, &r->has_timing, ep);
    if (rcs[4] && !lenient) return -1;
    if (rcs[4]) note_problem(r, &local);
    rcs[5] = load_json(dir, "plan.json", true, &r->plan, ep);
    if (rcs[5] && !lenient) return -1;
    if (rcs[5]) note_problem(r, &local);
    load_config(r);
    return 0;
}

void run_files_free(run_files_t *r) {
    if (!r) return;
    json_free(r->summary);
    json_free(r->env);
    json_free(r->plan);
    free(r->config);
    csv_table_free(&r->metrics);
    csv_table_free(&r->steps);
    csv_table_free(&r->timing);
    memset(r, 0, sizeof *r);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double stats_median(const double *v, size_t n) {
    double *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp) return NAN;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i])) tmp[m++] = v[i];
    double med = NAN;
    if (m) {
        qsort(tmp, m, sizeof *tmp, cmp_double);
        med = (m % 2) ? tmp[m / 2] : 0.5 * (tmp[m / 2 - 1] + tmp[m / 2]);
    }
    free(tmp);
    return med;
}
