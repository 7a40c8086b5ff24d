/* encode.c: byte-level helpers shared by the tracking sinks: CRC-32C (Castagnoli, for
 * TFRecord framing), a growable byte buffer, protobuf wire-format encoding, and clocks.
 *
 * Not here: CRC-32 (IEEE, the W&B datastore's checksum) comes from zlib's crc32().
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner/track/track_impl.h"
#include "util/json.h"

/* CRC-32C, reflected polynomial 0x82F63B78, bitwise with a nibble table built on the
 * fly (16 entries, no global state). Returns the updated crc (pass 0 to start). */
uint32_t track_crc32c(uint32_t crc, const void *data, size_t n) {
    uint32_t tab[16];
    for (uint32_t i = 0; i < 16; i++) {
        uint32_t c = i;
        for (int k = 0; k < 4; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        tab[i] = c;
    }
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = (crc >> 4) ^ tab[crc & 15];
        crc = (crc >> 4) ^ tab[crc & 15];
    }
    return ~crc;
}

/* TFRecord's masked CRC: rotate right by 15 and add a constant. */
uint32_t track_crc32c_masked(const void *data, size_t n) {
    uint32_t c = track_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* Appends n bytes, growing geometrically; on allocation failure sets oom and drops. */
void tbuf_put(tbuf_t *b, const void *data, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

void tbuf_free(tbuf_t *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void pb_varint(tbuf_t *b, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        tmp[n++] = byte | (v ? 0x80 : 0);
    } while (v);
    tbuf_put(b, tmp, (size_t)n);
}

void pb_tag(tbuf_t *b, int field, int wire) { pb_varint(b, ((uint64_t)field << 3) | (unsigned)wire); }

void pb_bytes(tbuf_t *b, int field, const void *data, size_t n) {
    pb_tag(b, field, 2);
    pb_varint(b, n);
    tbuf_put(b, data, n);
}

void pb_string(tbuf_t *b, int field, const char *s) {
    if (s && *s) pb_bytes(b, field, s, strlen(s));
}

void pb_int(tbuf_t *b, int field, int64_t v) {
    if (v == 0) return;
    pb_tag(b, field, 0);
    pb_varint(b, (uint64_t)v);
}

void pb_float(tbuf_t *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    uint8_t le[4] = {u & 0xff, (u >> 8) & 0xff, (u >> 16) & 0xff, u >> 24};
    pb_tag(b, field, 5);
    tbuf_put(b, le, 4);
}

void pb_double(tbuf_t *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(u >> (8 * i));
    pb_tag(b, field, 1);
    tbuf_put(b, le, 8);
}

void pb_message(tbuf_t *b, int field, const tbuf_t *m) { pb_bytes(b, field, m->p, m->n); }

double track_now_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Serialises a parsed JSON value back to compact text. Depth is bounded by the parser. */
void track_json_dump(FILE *f, const json_t *j) {
    switch (j->type) {
    case JSON_NULL: fputs("null", f); break;
    case JSON_BOOL: fputs(j->boolean ? "true" : "false", f); break;
    case JSON_NUMBER: fprintf(f, "%.17g", j->number); break;
    case JSON_STRING: json_write_string(f, j->string); break;
    case JSON_ARRAY:
    case JSON_OBJECT:
        fputc(j->type == JSON_ARRAY ? '[' : '{', f);
        for (size_t i = 0; i < j->count; i++) {
            if (i) fputc(',', f);
            if (j->type == JSON_OBJECT) { json_write_string(f, j->keys[i]); fputc(':', f); }
            track_json_dump(f, j->items[i]);
        }
        fputc(j->type == JSON_ARRAY ? ']' : '}', f);
        break;
    }
}
