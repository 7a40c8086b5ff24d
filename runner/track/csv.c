/* csv.c: the CSV sink (steps.csv, metrics.csv): one header line, rows flushed one by one,
 * and the resume rule: keep the rows up to the checkpoint's step, drop the rest (and a
 * half-written last line), then append.
 *
 * Not here: which columns exist (track.c passes the header and the cells).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/track/track_impl.h"

/* Scans an existing file for resume: checks the header and returns in *keep the byte
 * length to keep (header + rows with step <= resume_step, complete lines only). */
static int csv_scan(const char *path, FILE *f, const char *header, int step_col,
                    int64_t resume_step, long *keep, err_t *e) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long pos = 0;
    int lineno = 0;
    *keep = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (line[n - 1] != '\n') break;            /* half-written last line: drop it */
        line[n - 1] = 0;
        if (n >= 2 && line[n - 2] == '\r') line[n - 2] = 0;
        if (lineno == 1) {
            if (strcmp(line, header) != 0) {
                err_set(e, ERR_INPUT, "%s: line 1: the header is \"%.200s\", expected \"%s\"; "
                        "move the file away or start a new run instead of resuming", path,
                        line, header);
                free(line);
                return -1;
            }
        } else {
            const char *c = line;
            for (int i = 0; i < step_col && c; i++) {
                c = strchr(c, ',');
                if (c) c++;
            }
            char *end = NULL;
            long long s = c ? strtoll(c, &end, 10) : 0;
            if (!c || end == c || (*end != ',' && *end != 0)) {
                free(line);
                return err_set(e, ERR_INPUT, "%s: line %d: the step cell (column %d) is not "
                               "an integer; repair or remove that line to resume", path,
                               lineno, step_col + 1);
            }
            if (s > resume_step) break;           /* rows are in step order */
        }
        pos += (long)n;
        *keep = pos;
    }
    free(line);
    return 0;
}

/* Opens (or on resume reopens and trims) a CSV file; see track_impl.h. */
int track_csv_open(track_csv_t *c, const char *path, const char *header, int step_col,
                   bool resume, int64_t resume_step, err_t *e) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    if (resume) {
        FILE *f = fopen(path, "r+");
        if (f) {
            long keep = 0;
            if (csv_scan(path, f, header, step_col, resume_step, &keep, e) != 0) {
                fclose(f);
                return -1;
            }
            if (keep > 0) {
                fflush(f);
                if (ftruncate(fileno(f), keep) != 0) {
                    fclose(f);
                    return err_errno(e, ERR_RUNTIME, "%s: cannot trim rows after step %" PRId64,
                                     path, resume_step);
                }
                fseek(f, 0, SEEK_END);
                c->f = f;
                return 0;
            }
            fclose(f);                            /* empty: rewrite with a header */
        } else if (errno != ENOENT) {
            return err_errno(e, ERR_INPUT, "%s: cannot open to resume", path);
        }
    }
    c->f = fopen(path, "w");
    if (!c->f) return err_errno(e, ERR_RUNTIME, "%s: cannot create", path);
    if (fprintf(c->f, "%s\n", header) < 0 || fflush(c->f) != 0) {
        track_csv_close(c);
        return err_errno(e, ERR_RUNTIME, "%s: cannot write", path);
    }
    return 0;
}

/* Writes one row; NaN cells stay empty; integer cells print without a fraction. */
int track_csv_row(track_csv_t *c, const double *cells, int n, uint32_t int_mask, err_t *e) {
    if (!c->f) return 0;
    char row[1024];
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof row - 40; i++) {
        if (i) row[len++] = ',';
        double v = cells[i];
        if (isnan(v)) continue;
        int w;
        if (int_mask & (1u << i)) w = snprintf(row + len, sizeof row - len, "%lld", (long long)v);
        else w = snprintf(row + len, sizeof row - len, "%.10g", v);
        if (w > 0) len += (size_t)w;
    }
    row[len++] = '\n';
    if (fwrite(row, 1, len, c->f) != len || fflush(c->f) != 0)
        return err_errno(e, ERR_RUNTIME, "%s: cannot write a row", c->path);
    return 0;
}

void track_csv_close(track_csv_t *c) {
    if (c->f) fclose(c->f);
    c->f = NULL;
}
