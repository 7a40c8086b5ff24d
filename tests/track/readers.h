/* readers.h: independent readers for the files the tracking sinks write, used by the
 * track tests: CRC-32 (IEEE) and CRC-32C written bit by bit (not the library's code),
 * a protobuf wire-format field iterator, a W&B datastore (.wandb) record reader and a
 * TFRecord reader. Everything is static; each test program includes it once.
 */
#ifndef TESTS_TRACK_READERS_H
#define TESTS_TRACK_READERS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bitwise reflected CRC with polynomial poly (0xEDB88320 IEEE, 0x82F63B78 Castagnoli). */
static uint32_t rd_crc(uint32_t poly, uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ ((crc & 1) ? poly : 0);
    }
    return ~crc;
}
static uint32_t rd_crc32(const uint8_t *p, size_t n) { return rd_crc(0xEDB88320u, 0, p, n); }
static uint32_t rd_crc32c(const uint8_t *p, size_t n) { return rd_crc(0x82F63B78u, 0, p, n); }
static uint32_t rd_masked(const uint8_t *p, size_t n) {
    uint32_t c = rd_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
static uint32_t rd_u32(const uint8_t *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd_u64(const uint8_t *p) { return rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32; }

/* ---- protobuf ---- */
typedef struct pbf {
    int field, wire;
    uint64_t v;               /* varint / fixed value */
    const uint8_t *data;      /* length-delimited payload */
    size_t len;
} pbf_t;

/* Reads the next field of msg at *pos; returns 1, 0 at the end, -1 if malformed. */
static int pb_next(const uint8_t *msg, size_t n, size_t *pos, pbf_t *f) {
    if (*pos >= n) return 0;
    uint64_t v = 0;
    int shift = 0;
#define RD_VARINT(out) do { out = 0; shift = 0; for (;;) { if (*pos >= n || shift > 63) return -1; \
        uint8_t b_ = msg[(*pos)++]; out |= (uint64_t)(b_ & 0x7f) << shift; shift += 7; \
        if (!(b_ & 0x80)) break; } } while (0)
    RD_VARINT(v);
    f->field = (int)(v >> 3);
    f->wire = (int)(v & 7);
    f->data = NULL;
    f->len = 0;
    switch (f->wire) {
    case 0: RD_VARINT(f->v); break;
    case 1: if (*pos + 8 > n) return -1; f->v = rd_u64(msg + *pos); *pos += 8; break;
    case 5: if (*pos + 4 > n) return -1; f->v = rd_u32(msg + *pos); *pos += 4; break;
    case 2: RD_VARINT(f->v); if (*pos + f->v > n) return -1;
            f->data = msg + *pos; f->len = (size_t)f->v; *pos += f->len; break;
    default: return -1;
    }
#undef RD_VARINT
    return 1;
}

/* Finds the first field number `field` in msg; returns 1 and fills f, else 0. */
static int pb_find(const uint8_t *msg, size_t n, int field, pbf_t *f) {
    size_t pos = 0;
    int r;
    while ((r = pb_next(msg, n, &pos, f)) == 1)
        if (f->field == field) return 1;
    return 0;
}

/* Copies a string field into buf ("" if absent). */
static const char *pb_str(const uint8_t *msg, size_t n, int field, char *buf, size_t cap) {
    pbf_t f;
    buf[0] = 0;
    if (pb_find(msg, n, field, &f) && f.wire == 2) {
        size_t k = f.len < cap - 1 ? f.len : cap - 1;
        memcpy(buf, f.data, k);
        buf[k] = 0;
    }
    return buf;
}

static double pb_f64(uint64_t v) { double d; memcpy(&d, &v, 8); return d; }
static float pb_f32(uint64_t v) { uint32_t u = (uint32_t)v; float x; memcpy(&x, &u, 4); return x; }

/* ---- W&B datastore ---- */
typedef struct rd_rec {
    uint8_t *data;
    size_t len;
} rd_rec_t;

/* Splits a .wandb file into records. Returns the count, or -1 (reason in why) on a bad
 * header, a CRC mismatch, a bad chunk sequence or non-zero padding. recs is malloc'd. */
static int rd_wandb(const uint8_t *p, size_t n, rd_rec_t **recs, char *why) {
    *recs = NULL;
    if (n < 7 || memcmp(p, ":W&B", 4) || p[4] != 0xE1 || p[5] != 0xBE || p[6] != 0) {
        strcpy(why, "bad header");
        return -1;
    }
    size_t pos = 7;
    int count = 0, cap = 0;
    uint8_t *cur = NULL;
    size_t cur_len = 0;
    bool in_multi = false;
    while (pos < n) {
        size_t left = 32768 - pos % 32768;
        if (left < 7) {
            for (size_t i = 0; i < left && pos + i < n; i++)
                if (p[pos + i]) { strcpy(why, "non-zero padding"); return -1; }
            pos += left;
            continue;
        }
        if (pos + 7 > n) { strcpy(why, "truncated chunk header"); return -1; }
        uint32_t crc = rd_u32(p + pos);
        size_t len = p[pos + 4] | (size_t)p[pos + 5] << 8;
        int type = p[pos + 6];
        if (pos + 7 + len > n || 7 + len > left) { strcpy(why, "chunk overruns block/file"); return -1; }
        uint8_t *tmp = malloc(len + 1);
        tmp[0] = (uint8_t)type;
        memcpy(tmp + 1, p + pos + 7, len);
        uint32_t want = rd_crc32(tmp, len + 1);
        free(tmp);
        if (want != crc) { sprintf(why, "crc mismatch at offset %zu", pos); return -1; }
        const uint8_t *d = p + pos + 7;
        pos += 7 + len;
        if (type == 1 || type == 2) {
            if (in_multi) { strcpy(why, "FULL/FIRST inside a multi-chunk record"); return -1; }
            cur = malloc(len ? len : 1);
            memcpy(cur, d, len);
            cur_len = len;
            in_multi = type == 2;
        } else if (type == 3 || type == 4) {
            if (!in_multi) { strcpy(why, "MIDDLE/LAST without FIRST"); return -1; }
            cur = realloc(cur, cur_len + len);
            memcpy(cur + cur_len, d, len);
            cur_len += len;
            in_multi = type == 3;
        } else {
            sprintf(why, "bad chunk type %d", type);
            return -1;
        }
        if (!in_multi) {
            if (count == cap) { cap = cap ? cap * 2 : 16; *recs = realloc(*recs, sizeof(rd_rec_t) * cap); }
            (*recs)[count].data = cur;
            (*recs)[count].len = cur_len;
            count++;
            cur = NULL;
        }
    }
    if (in_multi) { strcpy(why, "unterminated record"); return -1; }
    return count;
}

/* ---- TFRecord ---- */
/* Splits an event file into records (pointers into p). Returns the count or -1. */
static int rd_tfrecords(const uint8_t *p, size_t n, rd_rec_t *recs, int max, char *why) {
    size_t pos = 0;
    int count = 0;
    while (pos < n) {
        if (pos + 12 > n) { strcpy(why, "truncated length"); return -1; }
        uint64_t len = rd_u64(p + pos);
        if (rd_u32(p + pos + 8) != rd_masked(p + pos, 8)) { strcpy(why, "length crc"); return -1; }
        if (pos + 12 + len + 4 > n) { strcpy(why, "truncated record"); return -1; }
        if (rd_u32(p + pos + 12 + len) != rd_masked(p + pos + 12, (size_t)len)) {
            strcpy(why, "data crc");
            return -1;
        }
        if (count < max) {
            recs[count].data = (uint8_t *)(p + pos + 12);
            recs[count].len = (size_t)len;
        }
        count++;
        pos += 12 + len + 4;
    }
    return count;
}

#endif
