/* fuzz_checkpoint.c: the checkpoint reader (runner/checkpoint.c ckpt_parse: magic,
 * version, table of contents, sizes, CRCs) and the meta section's check
 * (ckpt_meta_check: every number fits the conversion resume and export make), as resume
 * reads a .ckpt file.
 *
 * Input: byte 0 is a mode; the rest is the file. Mode bit 0 set: the harness first puts
 * correct CRCs into the header and every section it can locate, so that mutations reach
 * the table of contents and the meta JSON instead of stopping at the CRC check. */
#include <zlib.h>

#include "runner/checkpoint.h"
#include "util/json.h"
#include "tests/fuzz/fuzz.h"

static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i); }

/* Recomputes the section CRCs, then the header CRC (layout in checkpoint.h). */
static void fix_crcs(uint8_t *img, size_t n) {
    if (n < 36) return;
    uint32_t ns = rd32(img + 12);
    if (ns > CKPT_MAX_SECTIONS) return;
    size_t meta = 32 + (size_t)ns * 64 + 4;
    if (n < meta) return;
    for (uint32_t i = 0; i < ns; i++) {
        uint8_t *t = img + 32 + (size_t)i * 64;
        uint64_t off = rd64(t + 40), sz = rd64(t + 48);
        if (off <= n && sz <= n - off) wr32(t + 56, (uint32_t)crc32(0, img + off, (uInt)sz));
    }
    wr32(img + meta - 4, (uint32_t)crc32(0, img, (uInt)(meta - 4)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    uint8_t *img = malloc(size);
    if (!img) abort();
    memcpy(img, data + 1, size - 1);
    if (mode & 1) fix_crcs(img, size - 1);
    err_t e = {0};
    ckpt_t *c = ckpt_parse("fuzz.ckpt", img, size - 1, &e);
    if (!c) {
        FUZZ_ERR_OK(&e);
        return 0;
    }
    const ckpt_section_t *ms = ckpt_find(c, "meta");
    if (ms) {
        err_t me = {0};
        json_t *m = json_parse((const char *)ms->data, (size_t)ms->size, &me);
        if (m && ckpt_meta_check(c->path, m, &me) == 0) {
            /* what resume and export then convert: defined for every value that passed */
            volatile int ci = (int)json_get_number(m, "num_classes", -1) + (int)json_get_number(m, "epoch", 0) +
                              (int)json_get_number(m, "in_h", 32) + (int)json_get_number(m, "data_world_size", 1);
            volatile int64_t cl = (int64_t)json_get_number(m, "step", 0) + (int64_t)json_get_number(m, "optim_steps", 0);
            (void)ci;
            (void)cl;
            const json_t *cn = json_get(m, "bn_counters");
            for (size_t i = 0; cn && i < cn->count; i++) (void)(int64_t)cn->items[i]->number;
        } else {
            FUZZ_ERR_OK(&me);
        }
        json_free(m);
    }
    const ckpt_section_t *ps = ckpt_find(c, "params");
    if (ps && ps->size <= (1u << 24)) {
        void *dst = malloc(ps->size ? ps->size : 1);
        err_t ge = {0};
        FUZZ_ASSERT(ckpt_get(c, "params", dst, (size_t)ps->size, &ge) == 0);
        FUZZ_ASSERT(ckpt_get(c, "params", dst, (size_t)ps->size + 1, &ge) == -1);
        free(dst);
    }
    ckpt_free(c);
    return 0;
}
