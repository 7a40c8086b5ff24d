/* fuzz_tar.c: archive extraction (data/tar.c through zlib: gzip or plain tar, ustar, GNU
 * long names, pax headers, the refusal of links, devices, absolute paths and `..`) into
 * a fresh directory, and for one input in eight the whole download path of data/download.c
 * (a file:// URL: fetch, extract into a temporary directory, rename onto the target).
 * Input: byte 0 is a mode; the rest is the archive.
 * Property: nothing is ever written outside the directory given (checked by extracting
 * inside a sandbox directory and looking at what appeared next to it). */
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/download.h"
#include "tests/fuzz/fuzz.h"

/* Number of entries in dir (not . and ..). */
static int entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char sandbox[4096], dest[4200];
    snprintf(sandbox, sizeof sandbox, "%s/fuzz_tar.XXXXXX", base);
    if (!mkdtemp(sandbox)) abort();
    snprintf(dest, sizeof dest, "%s/x", sandbox);
    int fd = memfd_create("archive", MFD_CLOEXEC);
    if (fd < 0) abort();
    if (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) abort();
    lseek(fd, 0, SEEK_SET);
    err_t e = {0};
    if ((data[0] & 7) == 0) {
        /* the download path: the archive from a file:// URL into a target that must not exist */
        char url[128];
        snprintf(url, sizeof url, "file:///proc/%ld/fd/%d", (long)getpid(), fd);
        download_opts_t o = {.url = url, .target = dest, .retries = -1, .progress = 0, .backoff_s = -1};
        if (download_dataset_archive(&o, &e) != 0) {
            FUZZ_ERR_OK(&e);
            FUZZ_ASSERT(entries(sandbox) == 0);  /* nothing left at the target or beside it */
        } else {
            FUZZ_ASSERT(entries(sandbox) == 1);  /* only the target */
        }
    } else {
        if (mkdir(dest, 0755) != 0) abort();
        if (tar_extract_fd(fd, "fuzz.tar.gz", dest, &e) != 0) FUZZ_ERR_OK(&e);
        FUZZ_ASSERT(entries(sandbox) == 1);      /* everything stayed inside dest */
    }
    close(fd);
    download_rmtree(sandbox);
    return 0;
}
