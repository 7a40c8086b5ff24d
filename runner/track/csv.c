/* csv.c: the CSV sink (steps.csv, metrics.csv): one header line, then rows, each appended
 * with a single write(2), and the rules that keep the files whole:
 *   - a row that cannot be written completely (a full disk, EIO) is cut off again, so
 *     the file ends with the last complete row and the run stops naming the file;
 *   - on resume the rows up to the checkpoint's step are kept, the rest and a
 *     half-written last line (a machine crash mid-write) dropped, then rows are appended;
 *   - metrics.csv is fsynced with each row (once an epoch, before its checkpoint), so
 *     the rows a checkpoint counts survive a machine crash with it.
 *
 * Not here: which columns exist (track.c passes the header and the cells).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/track/track_impl.h"
#include "util/fs.h"

/* Scans an existing file for resume: checks the header and returns in *keep the byte
 * length to keep (header + rows with step <= resume_step, complete lines only). */
int track_csv_scan(const char *path, FILE *f, const char *header, int step_col,
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

/* Appends len bytes as one write; on failure cuts the file back to c->len. */
static int append(track_csv_t *c, const char *buf, size_t len, const char *what, err_t *e) {
    /* one write(2) puts a whole row down; a short one (the disk filling up) is followed
     * by another for the rest, which reports the error */
    if (write_all_fd(c->fd, buf, len) == 0) {
        c->len += (int64_t)len;
        return 0;
    }
    int k = errno;
    if (ftruncate(c->fd, (off_t)c->len) == 0) lseek(c->fd, (off_t)c->len, SEEK_SET);
    errno = k;
    return err_errno(e, ERR_RUNTIME, "%s: cannot write %s", c->path, what);
}

/* Opens (or on resume reopens and trims) a CSV file; see track_impl.h. */
int track_csv_open(track_csv_t *c, const char *path, const char *header, int step_col,
                   bool resume, int64_t resume_step, err_t *e) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    if (resume) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            /* the scan reads through its own descriptor; fd keeps the file for appending */
            FILE *f = fdopen(dup(fd), "r");
            long keep = 0;
            int rc = f ? track_csv_scan(path, f, header, step_col, resume_step, &keep, e)
                       : err_errno(e, ERR_RUNTIME, "%s: cannot read", path);
            if (f) fclose(f);
            if (rc != 0) {
                close(fd);
                return -1;
            }
            if (keep > 0) {
                /* rows after the checkpoint's step and a half-written last line go */
                if (ftruncate(fd, keep) != 0 || lseek(fd, keep, SEEK_SET) < 0) {
                    close(fd);
                    return err_errno(e, ERR_RUNTIME, "%s: cannot trim rows after step %" PRId64,
                                     path, resume_step);
                }
                c->fd = fd;
                c->open = true;
                c->len = keep;
                return 0;
            }
            close(fd);                            /* empty: rewrite with a header */
        } else if (errno != ENOENT) {
            return err_errno(e, ERR_INPUT, "%s: cannot open to resume", path);
        }
    }
    c->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (c->fd < 0) return err_errno(e, ERR_RUNTIME, "%s: cannot create", path);
    c->open = true;
    char line[1200];
    int n = snprintf(line, sizeof line, "%s\n", header);
    if (append(c, line, (size_t)n, "the header", e)) {
        track_csv_close(c);
        return -1;
    }
    return 0;
}

/* Writes one row; NaN cells stay empty; integer cells print without a fraction. */
int track_csv_row(track_csv_t *c, const double *cells, int n, uint32_t int_mask, err_t *e) {
    if (!c->open) return 0;
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
    return append(c, row, len, "a row", e);
}

int track_csv_sync(track_csv_t *c, err_t *e) {
    if (c->open && fsync(c->fd) != 0) return err_errno(e, ERR_RUNTIME, "%s: cannot sync", c->path);
    return 0;
}

void track_csv_close(track_csv_t *c) {
    if (c->open) close(c->fd);
    c->open = false;
}
