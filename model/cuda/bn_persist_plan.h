/* bn_persist_plan.h: the arithmetic of bn_persist's launch (model/cuda/norm_persist.cu), in
 * plain C so that the byte model (model/net_fusion.c) and a unit test without a GPU use
 * the one the kernels launch with: how many blocks the cooperative grid has and how many
 * rows each thread keeps in shared memory, from the device's shared memory, the kernel's
 * static shared memory and blocks an SM, and the row kernels' virtual grid.
 */
#ifndef RUNNER_MODEL_CUDA_BN_PERSIST_PLAN_H
#define RUNNER_MODEL_CUDA_BN_PERSIST_PLAN_H

#include <stddef.h>
#include <stdint.h>

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

#endif
