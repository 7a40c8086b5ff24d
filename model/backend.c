/* backend.c: backend creation by kind, and the backend-independent helpers of
 * model/backend.h (dtype names, element sizes, CUDA device queries).
 *
 * The CUDA entry points come from model/cuda/ when the build has CUDA; without it a cuda
 * backend cannot be created and no GPU is reported. Not here: any op (model/cpu/,
 * model/cuda/).
 */
#include "model/backend.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/cpu_backend.h"

#ifdef RUNNER_HAVE_CUDA
/* Provided by model/cuda/ (cuda_backend.h). */
backend_t *cuda_backend_create(const backend_opts_t *o, err_t *e);
int cuda_device_count(void);
int cuda_device_name(int i, char *buf, size_t len);
size_t cuda_device_memory(int i);
void cuda_versions(char *buf, size_t len);
#endif

const char *const dtype_names[DT_COUNT] = {"fp32", "fp16", "bf16"};

static const char *const FUSION_NAMES[] = {BACKEND_FUSION_NAMES};
_Static_assert(sizeof FUSION_NAMES / sizeof FUSION_NAMES[0] == BACKEND_FUSE_COUNT, "one name per fusion option");

const char *backend_fusion_name(int bit) {
    return bit >= 0 && bit < BACKEND_FUSE_COUNT ? FUSION_NAMES[bit] : NULL;
}

int backend_fusion_parse(const char *list, unsigned *mask, err_t *e) {
    *mask = 0;
    const char *p = list ? list : "";
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *q = p;
        while (len && isspace((unsigned char)*q)) q++, len--;
        while (len && isspace((unsigned char)q[len - 1])) len--;
        int bit = -1;
        for (int i = 0; i < BACKEND_FUSE_COUNT; i++)
            if (strlen(FUSION_NAMES[i]) == len && !strncmp(q, FUSION_NAMES[i], len)) bit = i;
        if (bit >= 0) *mask |= 1u << bit;
        else if (len == 3 && !strncmp(q, "all", 3)) *mask |= BACKEND_FUSE_ALL;
        else if (!(len == 4 && !strncmp(q, "none", 4)) && len) {
            char known[BACKEND_FUSION_NAMES_MAX] = "";
            for (int i = 0; i < BACKEND_FUSE_COUNT; i++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s, ", FUSION_NAMES[i]);
            return err_set(e, ERR_INPUT, "cuda fusion: unknown option '%.*s'; use %sall or none", (int)len, q,
                           known);
        }
        p += strcspn(p, ",");
        if (*p == ',') p++;
    }
    return 0;
}

void backend_fusion_format(unsigned mask, char *buf, size_t len) {
    size_t used = 0;
    if (!len) return;
    buf[0] = '\0';
    for (int i = 0; i < BACKEND_FUSE_COUNT; i++) {
        if (!(mask & (1u << i)) || used + 1 >= len) continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? "," : "", FUSION_NAMES[i]);
        if (w < 0) break;
        used += (size_t)w < len - used ? (size_t)w : len - used - 1;
    }
    if (!used) snprintf(buf, len, "none");
}

backend_t *backend_create(const backend_opts_t *opts, err_t *e) {
    backend_opts_t none = {0};
    if (!opts) opts = &none;
    switch (opts->kind) {
    case BACKEND_CPU:
        return cpu_backend_create(opts, e);
    case BACKEND_CUDA:
#ifdef RUNNER_HAVE_CUDA
        return cuda_backend_create(opts, e);
#else
        err_set(e, ERR_INPUT, "device: cuda requested but this runner was built without CUDA "
                "(rebuild with nvcc installed, or set device: cpu)");
        return NULL;
#endif
    default:
        err_set(e, ERR_INPUT, "backend: unknown kind %d (use cpu or cuda)", (int)opts->kind);
        return NULL;
    }
}

void backend_free(backend_t *be) {
    if (be && be->ops && be->ops->destroy) be->ops->destroy(be);
}

size_t backend_elem_size(const backend_t *be, dtype_t dt) {
    if (be && be->kind == BACKEND_CPU) return 4;
    return dt == DT_F32 ? 4 : 2;
}

int backend_cuda_device_count(void) {
#ifdef RUNNER_HAVE_CUDA
    int n = cuda_device_count();
    return n > 0 ? n : 0;
#else
    return 0;
#endif
}

int backend_cuda_device_name(int i, char *buf, size_t len) {
#ifdef RUNNER_HAVE_CUDA
    return cuda_device_name(i, buf, len);
#else
    (void)i;
    if (buf && len) buf[0] = '\0';
    return -1;
#endif
}

size_t backend_cuda_device_memory(int i) {
#ifdef RUNNER_HAVE_CUDA
    return cuda_device_memory(i);
#else
    (void)i;
    return 0;
#endif
}

void backend_cuda_versions(char *buf, size_t len) {
    if (!buf || !len) return;
#ifdef RUNNER_HAVE_CUDA
    cuda_versions(buf, len);
#else
    buf[0] = '\0';
#endif
}
