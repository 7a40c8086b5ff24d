/* model_util.h: what the optimizer and EMA tests (tests/model) both build: a CPU backend
 * and a net with exactly 5 parameters and 2 buffers. Not a library: static inline
 * functions, included by each test; they CHECK what they build (tests/test.h). */
#ifndef RUNNER_TESTS_MODEL_UTIL_H
#define RUNNER_TESTS_MODEL_UTIL_H

#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "tests/test.h"

/* A CPU backend with `threads` threads (NULL, a failed check, when it cannot be made). */
static inline backend_t *test_cpu_backend(int threads) {
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = threads};
    backend_t *be = cpu_backend_create(&bo, &e);
    CHECK(be != NULL);
    return be;
}

/* conv 1x1 (1 weight), bn (2 params, 2 buffers), avg-pool, fc 1->1 (2), bound for batch 1
 * of 1x2x2 fp32 inputs. */
static inline net_t *test_tiny_net(backend_t *be) {
    err_t e = {0};
    net_t *n = net_create(1, &e);
    int c = net_add_conv(n, "conv", NET_INPUT, 1, 1, 1, 0, &e);
    int b = net_add_bn(n, "bn", NODE_BN, c, -2, false, &e);
    int p = net_add_avgpool(n, b, &e);
    CHECK(net_add_linear(n, "fc", p, 1, &e) >= 0);
    CHECK_INT(net_num_params(n), 5);
    CHECK_INT(net_bind(n, be, 1, 2, 2, DT_F32, &e), 0);
    return n;
}

#endif
