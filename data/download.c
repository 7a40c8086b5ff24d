/* download.c: fetching dataset archives with libcurl, then verify + extract + rename.
 *
 * Implements download_file and download_dataset_archive (download.h). The layout on disk
 * while working, for a target T:
 *   T.tmp-XXXXXX/archive        the download
 *   T.tmp-XXXXXX/x/...          the extraction
 * and only on success is the archive's top directory (or x itself) renamed to T; the
 * T.tmp-XXXXXX directory is removed on success and on every failure. Not here: the tar
 * reader (tar.c) and MD5 (md5.c).
 */
#include "data/download.h"
#include "util/fs.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct progress {
    const char *url;
    int on;
    int last_pct;
    curl_off_t last_bytes;
} progress_t;

static size_t write_cb(char *p, size_t sz, size_t n, void *f) {
    return fwrite(p, sz, n, (FILE *)f);
}

/* Prints "downloading URL: 12.0 / 162.0 MiB (7%)" on stderr when the percentage moves. */
static int progress_cb(void *ctx, curl_off_t total, curl_off_t now, curl_off_t ut,
                       curl_off_t un) {
    (void)ut; (void)un;
    progress_t *p = ctx;
    if (!p->on) return 0;
    int pct = total > 0 ? (int)(100 * now / total) : -1;
    if (pct == p->last_pct && (total > 0 || now - p->last_bytes < (1 << 20))) return 0;
    p->last_pct = pct;
    p->last_bytes = now;
    if (total > 0)
        fprintf(stderr, "\rdownloading %s: %.1f / %.1f MiB (%d%%)", p->url, now / 1048576.0,
                total / 1048576.0, pct);
    else
        fprintf(stderr, "\rdownloading %s: %.1f MiB", p->url, now / 1048576.0);
    return 0;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

/* One attempt; returns 0, or -1 with msg filled and *permanent set for HTTP 4xx. */
static int fetch_once(const download_opts_t *o, FILE *f, progress_t *pr, char *msg,
                      size_t msglen, int *permanent) {
    CURL *c = curl_easy_init();
    if (!c) { snprintf(msg, msglen, "curl_easy_init failed"); return -1; }
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, o->url);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s > 0 ? o->connect_timeout_s : 20L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o->low_speed_time_s > 0 ? o->low_speed_time_s : 60L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "runner-data/1");
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, pr->on ? 0L : 1L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress_cb);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, pr);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    if (pr->on) fputc('\n', stderr);
    if (rc == CURLE_OK) return 0;
    *permanent = (rc == CURLE_HTTP_RETURNED_ERROR && status >= 400 && status < 500) ||
                 rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT ||
                 rc == CURLE_FILE_COULDNT_READ_FILE;
    if (rc == CURLE_HTTP_RETURNED_ERROR)
        snprintf(msg, msglen, "HTTP status %ld", status);
    else
        snprintf(msg, msglen, "%s", ebuf[0] ? ebuf : curl_easy_strerror(rc));
    return -1;
}

int download_file(const download_opts_t *o, const char *path, err_t *e) {
    char part[4200];
    snprintf(part, sizeof part, "%s.part", path);
    int retries = o->retries > 0 ? o->retries : o->retries < 0 ? 0 : 3;
    double backoff = o->backoff_s == 0 ? 1.0 : o->backoff_s;
    progress_t pr = {o->url, o->progress < 0 ? isatty(2) : o->progress, -2, 0};
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char msg[4400] = "";
    int attempt = 0, ok = 0;
    for (; attempt <= retries; attempt++) {
        if (attempt > 0) {
            sleep_s(backoff);
            backoff *= 2;
        }
        FILE *f = fopen(part, "wb");
        if (!f) {
            curl_global_cleanup();
            return err_errno(e, ERR_RUNTIME, "cannot create %s", part);
        }
        int permanent = 0;
        int rc = fetch_once(o, f, &pr, msg, sizeof msg, &permanent);
        if (fclose(f) != 0 && rc == 0) {
            snprintf(msg, sizeof msg, "writing %s: %s", part, strerror(errno));
            rc = -1;
            permanent = 1;
        }
        if (rc == 0) { ok = 1; break; }
        if (permanent) { attempt++; break; }
    }
    curl_global_cleanup();
    if (!ok) {
        unlink(part);
        return err_set(e, ERR_INPUT, "download of %s failed after %d attempt%s: %s", o->url,
                       attempt > retries + 1 ? retries + 1 : attempt, attempt == 1 ? "" : "s",
                       msg);
    }
    if (rename(part, path) != 0) {
        unlink(part);
        return err_errno(e, ERR_RUNTIME, "cannot rename %s to %s", part, path);
    }
    return 0;
}

int download_rmtree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path);
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[4608];
        if (snprintf(p, sizeof p, "%s/%s", path, de->d_name) >= (int)sizeof p) { rc = -1; continue; }
        if (download_rmtree(p)) rc = -1;
    }
    closedir(d);
    if (rmdir(path)) rc = -1;
    return rc;
}

/* If dir holds exactly one entry and it is a directory, writes its path to out. */
static int single_top_dir(const char *dir, char *out, size_t len) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int n = 0;
    char name[256] = "";
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        n++;
        snprintf(name, sizeof name, "%s", de->d_name);
    }
    closedir(d);
    if (n != 1) return 0;
    snprintf(out, len, "%s/%s", dir, name);
    struct stat st;
    return lstat(out, &st) == 0 && S_ISDIR(st.st_mode);
}

int download_dataset_archive(const download_opts_t *o, err_t *e) {
    if (!o->url || !*o->url || !o->target || !*o->target)
        return err_set(e, ERR_INPUT, "download: no URL or no target directory");
    char tbuf[4096];
    if (snprintf(tbuf, sizeof tbuf, "%s", o->target) >= (int)sizeof tbuf)
        return err_set(e, ERR_INPUT, "download: target path too long");
    for (size_t n = strlen(tbuf); n > 1 && tbuf[n - 1] == '/'; n--) tbuf[n - 1] = 0;
    const char *t = tbuf;
    char manual[6000];
    snprintf(manual, sizeof manual, "or download it yourself: `curl -L -o archive.tar.gz "
             "'%.1000s' && mkdir -p '%.1000s' && tar -xzf archive.tar.gz --strip-components=1 "
             "-C '%.1000s'` (so that the files are directly in %.1000s)", o->url, t, t, t);
    struct stat st;
    if (lstat(t, &st) == 0)
        return err_set(e, ERR_INPUT, "download of %s: the target %s already exists; move it "
                       "away (or delete it) first, %s", o->url, t, manual);
    if (o->md5 && *o->md5 && strlen(o->md5) != 32)
        return err_set(e, ERR_INPUT, "download of %s: md5 \"%s\" is not 32 hex digits "
                       "(data.download_md5)", o->url, o->md5);
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", t);
    char *par = dirname(parent);
    if (mkdir_p(par, ERR_INPUT, e) != 0)
        return err_wrap(e, "download of %s into %s", o->url, t);
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", t) >= (int)sizeof tmp)
        return err_set(e, ERR_INPUT, "download: target path too long");
    if (!mkdtemp(tmp))
        return err_errno(e, ERR_INPUT, "download of %s: cannot create a temporary directory "
                         "next to %s", o->url, t);
    char archive[4300], xdir[4300], src[4600];
    snprintf(archive, sizeof archive, "%s/archive", tmp);
    snprintf(xdir, sizeof xdir, "%s/x", tmp);
    int rc = -1;
    if (download_file(o, archive, e)) {
        err_wrap(e, "cannot fetch the dataset for %s", t);
        if (e) {
            size_t l = strlen(e->msg);
            snprintf(e->msg + l, sizeof e->msg - l, ". Check the network or "
                     "data.download_url, %s", manual);
        }
        goto done;
    }
    if (o->md5 && *o->md5) {
        char hex[33];
        if (md5_file(archive, hex, e)) goto done;
        if (strcasecmp(hex, o->md5) != 0) {
            err_set(e, ERR_INPUT, "download of %s: md5 is %s, expected %s: the file is corrupt "
                    "or not the expected archive (set data.download_md5 for a mirror that "
                    "serves another file); nothing was extracted to %s; retry, %s", o->url, hex,
                    o->md5, t, manual);
            goto done;
        }
    }
    if (mkdir(xdir, 0755) != 0) { err_errno(e, ERR_RUNTIME, "cannot create %s", xdir); goto done; }
    if (tar_extract(archive, xdir, e)) {
        err_wrap(e, "extracting the download of %s failed (nothing was written to %s)", o->url, t);
        goto done;
    }
    if (!single_top_dir(xdir, src, sizeof src)) snprintf(src, sizeof src, "%s", xdir);
    if (rename(src, t) != 0) {
        /* another process (say, a second rank) finished the same download first: use it */
        if ((errno == EEXIST || errno == ENOTEMPTY) && lstat(t, &st) == 0 && S_ISDIR(st.st_mode)) {
            rc = 0;
            goto done;
        }
        err_errno(e, ERR_RUNTIME, "cannot rename %s to %s", src, t);
        goto done;
    }
    rc = 0;
done:
    download_rmtree(tmp);
    return rc;
}
