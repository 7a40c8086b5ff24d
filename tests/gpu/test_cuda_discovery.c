/* test_cuda_discovery.c: the CUDA entry points that must work on every machine, GPU or
 * not: device count never fails, device names and versions are well formed, and asking
 * for a CUDA backend without a GPU is an input error with the documented message.
 * Runs everywhere (no skip); on a GPU machine it checks the GPU side instead.
 */
#include "model/cuda/cuda_backend.h"
#include "tests/test.h"

static void test_count_and_names(void) {
    int n = cuda_device_count();
    CHECK(n >= 0);
    char name[256];
    CHECK_INT(cuda_device_name(n, name, sizeof name), -1);   /* one past the last */
    CHECK_STR(name, "unknown");
    if (n > 0) {
        CHECK_INT(cuda_device_name(0, name, sizeof name), 0);
        CHECK_CONTAINS(name, ", cc ");
    }
    char v[256];
    cuda_versions(v, sizeof v);
    CHECK_CONTAINS(v, "cuDNN 9.");
    CHECK_CONTAINS(v, n > 0 ? "runtime " : "driver ");
}

static void test_create_without_gpu(void) {
    backend_opts_t o = {0};
    o.kind = BACKEND_CUDA;
    err_t e = {0};
    if (cuda_device_count() == 0) {
        CHECK(cuda_backend_create(&o, &e) == NULL);
        CHECK_INT(e.code, ERR_INPUT);
        CHECK_CONTAINS(e.msg, "device: cuda requested but no CUDA GPU is visible");
        CHECK_CONTAINS(e.msg, "use device: cpu or auto");
        void *p = cuda_host_alloc(1024, &e);   /* no driver: an error, not a crash */
        if (p) cuda_host_free(p);
        else CHECK_INT(e.code, ERR_RUNTIME);
    } else {
        backend_t *be = cuda_backend_create(&o, &e);
        CHECK(be != NULL);
        if (be) {
            CHECK_STR(be->ops->name, "cuda");
            CHECK(be->kind == BACKEND_CUDA);
            backend_free(be);
        }
    }
}

int main(void) {
    TEST_RUN(test_count_and_names);
    TEST_RUN(test_create_without_gpu);
    return test_main_end();
}
