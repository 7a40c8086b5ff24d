/* bn_persist_plan.h: the launch arithmetic of the BN kernels in plain C, so that the byte
 * model (model/net_fusion.c) and unit tests without a GPU use the one the kernels launch
 * with: the row kernels' geometry (bn_row_v, bn_row_grid: norm_impl.cuh's bn_geom is
 * made of them), and bn_persist's (model/cuda/norm_persist.cu) cooperative grid and the
 * rows each thread keeps in shared memory (bn_persist_plan, bn_persist_kept_rows).
 */
#ifndef RUNNER_MODEL_CUDA_BN_PERSIST_PLAN_H
#define RUNNER_MODEL_CUDA_BN_PERSIST_PLAN_H

#include <stddef.h>
#include <stdint.h>

/* The channels a thread takes in the row kernels: with vec16, 16 bytes of channels where
 * that divides c and every pointer is 16-byte aligned; v_max (an override, 0: none) caps
 * it; else the widest of 8, 4, 2 (at most 16 bytes) that divides c, gives all 32 lanes of
 * a warp channels (c >= 32 v) and every pointer is aligned to; else 1. align: the
 * largest power of two, at most 16, that every pointer of the call is aligned to. */
static inline int bn_row_v(int c, size_t esz, size_t align, int vec16, int v_max) {
    int v = 1;
    if (vec16 && c % (int)(16 / esz) == 0 && align >= 16) v = (int)(16 / esz);
    if (v_max && v > v_max) v = 1;   /* (vec16's width above the override) */
    for (int k = v_max ? v_max : 8; v == 1 && k > 1; k /= 2) {
        size_t al = esz * (size_t)k;
        if (al <= 16 && c % k == 0 && c >= 32 * k && align >= al) v = k;
    }
    return v;
}

/* The row kernels' blocks for v channels a thread: tx x ty threads (tx = 32; narrow, as
 * vec16 makes it: c / v where that is below 32; ty = 256 / tx), gx channel blocks and gy
 * row splits: enough for per_sm blocks an SM, at least rows rows a thread, at most 1024.
 * bn_persist's mask_write relies on this: where c is a multiple of 8, tx is a multiple of
 * 8 / v (32 is; narrow tx = c / v is), so the threads of a mask byte share a warp row. */
typedef struct bn_row_geom {
    int v, tx, ty, gx;
    int64_t gy;
} bn_row_geom_t;

static inline bn_row_geom_t bn_row_grid(int64_t m, int c, int v, int narrow, int rows, int per_sm, int sms) {
    bn_row_geom_t g;
    g.v = v;
    g.tx = 32;
    if (narrow && c / v < 32) g.tx = c / v > 0 ? c / v : 1;
    g.ty = 256 / g.tx;
    g.gx = (c + g.tx * v - 1) / (g.tx * v);
    int64_t want = ((int64_t)sms * per_sm + g.gx - 1) / g.gx;
    int64_t most = (m + (int64_t)g.ty * rows - 1) / ((int64_t)g.ty * rows);
    g.gy = want < most ? want : most;
    if (g.gy > 1024) g.gy = 1024;
    if (g.gy < 1) g.gy = 1;
    return g;
}

/* The device: SMs, shared memory an SM, the most a block may opt into, the reservation a
 * block (cudaDevAttr*). */
typedef struct bn_persist_dev {
    int sms, smem_sm, smem_optin, smem_reserved;
} bn_persist_dev_t;

/* H100 and H200 alike (sm_90, 132 SMs): 228 KB an SM, 227 KB a block, 1 KB reserved. */
#define BN_PERSIST_DEV_H100 ((bn_persist_dev_t){132, 233472, 232448, 1024})

typedef struct bn_persist_plan {
    int64_t grid;    /* blocks of the cooperative grid; 0: none can be resident */
    int64_t slots;   /* rows a thread keeps */
    size_t dyn;      /* dynamic shared memory a block: slots x nt x row_bytes */
} bn_persist_plan_t;

/* The plan for nvb virtual blocks (the row kernels' gx x gy) of nt threads, each thread
 * rows_vb rows a virtual block, row_bytes kept a row (one pack forward, two backward),
 * for a kernel of static_smem bytes and nb0 blocks an SM without dynamic shared memory.
 * max_blocks > 0: at most that many blocks; max_slots > 0: at most that many rows kept,
 * < 0: none (cuda_bn_geom_t's persist overrides). The blocks an SM hold share its shared
 * memory; a thread keeps no more rows than it reads. The caller still bounds the grid by
 * the occupancy at the chosen dyn. */
static inline bn_persist_plan_t bn_persist_plan(const bn_persist_dev_t *d, int nb0, size_t static_smem, int64_t nvb,
                                                int64_t rows_vb, int nt, size_t row_bytes, int max_blocks,
                                                int max_slots) {
    bn_persist_plan_t p = {0, 0, 0};
    if (nb0 < 1 || d->sms < 1 || nvb < 1 || nt < 1 || row_bytes < 1) return p;
    int64_t grid = (int64_t)nb0 * d->sms;
    if (grid > nvb) grid = nvb;
    if (max_blocks > 0 && grid > max_blocks) grid = max_blocks;
    int64_t per_sm = (grid + d->sms - 1) / d->sms;
    int64_t room = d->smem_sm / per_sm - (int64_t)static_smem - d->smem_reserved;
    int64_t most = d->smem_optin - (int64_t)static_smem;
    if (room > most) room = most;
    int64_t need = (nvb + grid - 1) / grid * rows_vb;
    int64_t slots = room > 0 ? room / ((int64_t)nt * (int64_t)row_bytes) : 0;
    if (slots > need) slots = need;
    if (max_slots < 0) slots = 0;
    else if (max_slots > 0 && slots > max_slots) slots = max_slots;
    p.grid = grid;
    p.slots = slots;
    p.dyn = (size_t)slots * (size_t)nt * row_bytes;
    return p;
}

/* The thread-rows plan p keeps of nvb virtual blocks of rows_vb rows a thread: block b
 * takes the virtual blocks b, b + grid, ... and keeps at most slots of their rows (a
 * thread's rows; times the block's threads for all of them). */
static inline int64_t bn_persist_kept_rows(const bn_persist_plan_t *p, int64_t nvb, int64_t rows_vb) {
    if (p->grid < 1) return 0;
    int64_t q = nvb / p->grid, r = nvb % p->grid;   /* r blocks take q + 1, the rest q */
    int64_t hi = (q + 1) * rows_vb, lo = q * rows_vb;
    return r * (p->slots < hi ? p->slots : hi) + (p->grid - r) * (p->slots < lo ? p->slots : lo);
}

#endif
