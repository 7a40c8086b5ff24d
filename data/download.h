/* download.h: fetch a .tar.gz over HTTP(S), verify its md5, extract it safely.
 *
 * download_dataset_archive is what dataset_open calls when files are missing and download
 * was requested: libcurl with connect and low-speed timeouts, a few retries with backoff,
 * a progress line on stderr when it is a terminal; the archive goes to a temporary file
 * next to the target; its md5 (own RFC 1321 implementation) is checked before anything is
 * extracted; extraction (zlib + own ustar/GNU tar reader) goes into a temporary directory
 * next to the target, which is renamed onto the target only when complete. Entries with
 * absolute paths or `..` components, and symlinks/hardlinks, device files or fifos, fail the
 * whole extraction. If the archive has a single top-level directory (as the CIFAR tarballs
 * do) its contents become the target; otherwise the archive's top level does. On any
 * failure, nothing is left at the target path or beside it, and the message names the URL,
 * the target and the manual alternative. If another process completes the same download
 * first (the rename finds the target in place), its result is kept and this call succeeds;
 * still, download once (e.g. in the launcher) before starting several ranks.
 */
#ifndef RUNNER_DATA_DOWNLOAD_H
#define RUNNER_DATA_DOWNLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct download_opts {
    const char *url;          /* http://, https:// (or file:// for tests) */
    const char *md5;          /* 32 hex digits; NULL/"" = do not verify (not recommended) */
    const char *target;       /* directory to create; must not exist or be empty */
    int retries;              /* extra attempts after the first; 0 -> 3; < 0 -> none */
    long connect_timeout_s;   /* 0 -> 20 */
    long low_speed_time_s;    /* abort if < 1 KiB/s for this long; 0 -> 60 */
    int progress;             /* -1 auto (stderr isatty), 0 off, 1 on */
    double backoff_s;         /* first retry delay, doubled each retry; 0 -> 1.0; <0 -> none */
} download_opts_t;

/* Downloads o->url, verifies o->md5, extracts into o->target (see above). 0 / -1. */
int download_dataset_archive(const download_opts_t *o, err_t *e);

/* Downloads url to the file path (written as path.part and renamed). 0 / -1. */
int download_file(const download_opts_t *o, const char *path, err_t *e);

/* Extracts a .tar.gz (or plain .tar) file into the existing empty directory dest, with the
 * safety rules above. On failure dest may hold partial output (callers use a temp dir). */
int tar_extract(const char *archive, const char *dest, err_t *e);
/* The same from an open descriptor (not closed; archive names it in messages). */
int tar_extract_fd(int fd, const char *archive, const char *dest, err_t *e);

/* MD5 (RFC 1321). */
typedef struct md5_ctx {
    uint32_t state[4];
    uint64_t bytes;
    uint8_t buf[64];
} md5_ctx_t;
void md5_init(md5_ctx_t *c);
void md5_update(md5_ctx_t *c, const void *data, size_t len);
void md5_final(md5_ctx_t *c, uint8_t digest[16]);
/* md5 of a file as 32 lowercase hex digits + NUL into hex[33]. 0 / -1. */
int md5_file(const char *path, char hex[33], err_t *e);

/* Removes a directory tree (no symlink following). 0 / -1. */
int download_rmtree(const char *path);

#ifdef __cplusplus
}
#endif
#endif
