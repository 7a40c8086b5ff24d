/* data_test_util.h: small file-writing helpers shared by the data tests (header-only). */
#ifndef RUNNER_TESTS_DATA_TEST_UTIL_H
#define RUNNER_TESTS_DATA_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Writes n bytes to dir/name (name may be NULL: dir is the path). Returns 0 on success. */
static inline int tw_write(const char *dir, const char *name, const void *buf, size_t n) {
    char p[4096];
    if (name) snprintf(p, sizeof p, "%s/%s", dir, name);
    else snprintf(p, sizeof p, "%s", dir);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(buf, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

/* Writes n bytes gzip-compressed to dir/name. */
static inline int tw_write_gz(const char *dir, const char *name, const void *buf, size_t n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    gzFile f = gzopen(p, "wb");
    if (!f) return -1;
    int w = n ? gzwrite(f, buf, (unsigned)n) : 0;
    return (gzclose(f) == Z_OK && (size_t)w == n) ? 0 : -1;
}

static inline void tw_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

#endif
