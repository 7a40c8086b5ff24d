/* md5.c: MD5 message digest (RFC 1321), used to verify downloaded archives.
 *
 * Written from the RFC's description (four rounds of 16 operations, sine-derived
 * constants, little-endian words). Not a security primitive here: it only detects
 * corrupt or wrong downloads against the published checksums.
 */
#include <stdio.h>
#include <string.h>

#include "data/download.h"

static const uint32_t md5_k[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
    0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
    0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
    0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
    0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
    0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
    0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
    0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
    0xeb86d391};
static const int md5_s[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                              5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                              4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                              6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

/* Processes one 64-byte block. */
static void md5_block(uint32_t st[4], const uint8_t *p) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
               (uint32_t)p[4 * i + 3] << 24;
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) { f = (b & c) | (~b & d); g = i; }
        else if (i < 32) { f = (d & b) | (~d & c); g = (5 * i + 1) & 15; }
        else if (i < 48) { f = b ^ c ^ d; g = (3 * i + 5) & 15; }
        else { f = c ^ (b | ~d); g = (7 * i) & 15; }
        uint32_t t = a + f + md5_k[i] + m[g];
        a = d; d = c; c = b;
        b = b + ((t << md5_s[i]) | (t >> (32 - md5_s[i])));
    }
    st[0] += a; st[1] += b; st[2] += c; st[3] += d;
}

void md5_init(md5_ctx_t *c) {
    c->state[0] = 0x67452301; c->state[1] = 0xefcdab89;
    c->state[2] = 0x98badcfe; c->state[3] = 0x10325476;
    c->bytes = 0;
}

void md5_update(md5_ctx_t *c, const void *data, size_t len) {
    const uint8_t *p = data;
    size_t have = (size_t)(c->bytes & 63);
    c->bytes += len;
    if (have) {
        size_t take = 64 - have < len ? 64 - have : len;
        memcpy(c->buf + have, p, take);
        p += take; len -= take; have += take;
        if (have < 64) return;
        md5_block(c->state, c->buf);
    }
    for (; len >= 64; p += 64, len -= 64) md5_block(c->state, p);
    memcpy(c->buf, p, len);
}

void md5_final(md5_ctx_t *c, uint8_t digest[16]) {
    uint64_t bits = c->bytes * 8;
    uint8_t pad[72] = {0x80};
    size_t have = (size_t)(c->bytes & 63);
    size_t padlen = have < 56 ? 56 - have : 120 - have;
    for (int i = 0; i < 8; i++) pad[padlen + i] = (uint8_t)(bits >> (8 * i));
    md5_update(c, pad, padlen + 8);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) digest[4 * i + j] = (uint8_t)(c->state[i] >> (8 * j));
}

int md5_file(const char *path, char hex[33], err_t *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_errno(e, ERR_INPUT, "cannot open %s to check its md5", path);
    md5_ctx_t c;
    md5_init(&c);
    static const size_t bufsize = 1 << 16;
    uint8_t buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, bufsize, f)) > 0) md5_update(&c, buf, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) return err_errno(e, ERR_INPUT, "error reading %s", path);
    uint8_t d[16];
    md5_final(&c, d);
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return 0;
}
