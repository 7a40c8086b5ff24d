/* test_golden.c: the model engine on the CPU backend against PyTorch golden data.
 *
 * Usage: test_golden MODEL FIXTURE_DIR [cpu|cpu-winograd|cuda] (cpu-winograd: the CPU
 * backend with the opt-in train.cpu_winograd; cuda: the same checks on the CUDA backend
 * with TF32 off, exits 77, skipped, without a GPU). Reads FIXTURE_DIR/MODEL_init.safetensors
 * through safetensors_load_net (so the reader, the OIHW->KRSC import and the names are
 * tested too) and FIXTURE_DIR/MODEL_golden.safetensors (written by make_fixtures.py), then:
 *   1. one training forward on the fixture's batch: logits, loss (label smoothing 0.1,
 *      mean), BN running stats;
 *   2. backward: every parameter gradient of the mean loss;
 *   3. where the fixture has them (resnet20; make_fixtures.py says why not resnet50):
 *      SGD (lr 0.1, momentum 0.9, wd 5e-4) and AdamW (lr 1e-3, wd 5e-2, eps 1e-4) steps on
 *      the fixture's steps batch, each started from the fp64 run's state after the
 *      previous step (teacher forcing, see run_optimizer): every parameter, running stat,
 *      num_batches_tracked and optimizer buffer after each step.
 *
 * The reference is PyTorch in float64; tolerances are relative L2 errors per tensor
 * (||ours - ref|| / max(||ref||, floor), the floor only for tensors that are zero up to
 * rounding in exact arithmetic, see make_fixtures.py's FLOOR): max(the base stated per
 * check below, 10 x PyTorch's own
 * fp32 error on that tensor), PyTorch's error being the worst of its plain fp32 run and
 * its runs with rounding-sized noise on every convolution (err.<name>, sens.<name>). Both
 * sides are fp32 but sum in different orders (OpenBLAS/oneDNN vs PyTorch's kernels), so
 * single-rounding agreement (1e-7) is impossible; the forward agrees to ~1e-6, gradients
 * through 20-50 BN layers to ~1e-6..1e-5 (the BN backward subtracts nearly equal sums).
 * The resnet20 fixture is well conditioned (make_fixtures.py checks it: no ReLU switches
 * under rounding-sized noise), so the verdict is the same on every CPU and ISA level
 * (ctest runs it at each: tests/isa_run.sh); resnet50's is not (BN-bias gradients at batch
 * 4 move ~1e-2 with rounding), and its tolerances come from the measured sensitivity.
 * MODEL may also be a fixture of the families of issue 24 (make_fixtures.py's FIXTURE:
 * wrn16_1, preact_resnet18, resnext29_4x2, vgg11_bn, mobilenet_v2_w025, mobilenet_v2_tv050):
 * the net is built from the golden file's metadata (arch, width, groups, dropout, stem)
 * through arch_build; their fixtures hold SGD steps only.
 */
#include <stdlib.h>

#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "model/optim.h"
#include "model/arch/resnet.h"
#include "model/safetensors.h"
#include "tests/test.h"

static const char *g_model, *g_dir;
static backend_kind_t g_kind = BACKEND_CPU;
static bool g_winograd;   /* "cpu-winograd": the opt-in train.cpu_winograd engine */
static char g_init[1024], g_gold[1024];

/* Index of element (o, i, h, w) of a conv weight in KRSC (the net's layout) and in OIHW
 * (torchvision's). */
static int64_t krsc_at(const net_tensor_t *t, int64_t o, int64_t i, int64_t h, int64_t w) {
    return ((o * t->shape[2] + h) * t->shape[3] + w) * t->shape[1] + i;
}
static int64_t oihw_at(const net_tensor_t *t, int64_t o, int64_t i, int64_t h, int64_t w) {
    return ((o * t->shape[1] + i) * t->shape[2] + h) * t->shape[3] + w;
}

/* Copies net tensor t between the net's host arrays (hp for params and anything laid out
 * like them, hb for buffers) and torchvision layout (conv weights OIHW): to_torch, or back. */
static void tensor_xfer(const net_tensor_t *t, float *hp, float *hb, float *torch, bool to_torch) {
    float *net = (t->store == NET_STORE_PARAM ? hp : hb) + t->offset;
    if (!t->conv_weight) {
        if (to_torch) memcpy(torch, net, t->numel * sizeof(float));
        else memcpy(net, torch, t->numel * sizeof(float));
        return;
    }
    for (int64_t o = 0; o < t->shape[0]; o++)
        for (int64_t i = 0; i < t->shape[1]; i++)
            for (int64_t h = 0; h < t->shape[2]; h++)
                for (int64_t w = 0; w < t->shape[3]; w++) {
                    if (to_torch) torch[oihw_at(t, o, i, h, w)] = net[krsc_at(t, o, i, h, w)];
                    else net[krsc_at(t, o, i, h, w)] = torch[oihw_at(t, o, i, h, w)];
                }
}

static void tensor_host(const net_t *n, const net_tensor_t *t, const float *hp, const float *hb,
                        float *out) {
    (void)n;
    tensor_xfer(t, (float *)hp, (float *)hb, out, true);
}

/* A scalar of the fixture (0 when absent). */
static float gold_scalar(const safetensors_t *gold, const char *prefix, const char *name) {
    char en[200];
    snprintf(en, sizeof en, "%s%s", prefix, name);
    const st_tensor_t *t = safetensors_find(gold, en);
    float v = 0;
    err_t e = {0};
    if (t && t->numel == 1) safetensors_read_f32(gold, t, &v, &e);
    return v;
}

/* The tolerance for gold tensor `name`: max(base, 10 x PyTorch's own fp32 error on it),
 * where PyTorch's error is the worse of its plain fp32 run (err.<name>) and its runs under
 * rounding-sized noise (sens.<name>; make_fixtures.py): a tensor that a last-bit
 * difference moves gets the slack every correct fp32 implementation needs, whatever CPU
 * and kernels round this run. (resnet20's fixture is chosen so that sens stays within a
 * few x err everywhere; resnet50's is not, see make_fixtures.py.) */
static double tol_for(const safetensors_t *gold, const char *name, double base, double *torch_err) {
    double err = gold_scalar(gold, "err.", name), sens = gold_scalar(gold, "sens.", name);
    *torch_err = err > sens ? err : sens;
    return 10.0 * *torch_err > base ? 10.0 * *torch_err : base;
}

/* Relative L2 error of ours against gold: ||ours - gold|| / max(||gold||, floor). floor
 * is the fixture's floor.<name> for tensors that are zero up to rounding in exact
 * arithmetic (make_fixtures.py's FLOOR: VGG's conv biases before a BN, MobileNetV2's
 * linear-bottleneck BN biases), else 0. */
static double rel_err(const float *ours, const float *gold, size_t n, double floor, double *maxabs) {
    double d2 = 0, g2 = 0;
    *maxabs = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)ours[i] - gold[i];
        d2 += d * d;
        g2 += (double)gold[i] * gold[i];
        if (fabs(d) > *maxabs) *maxabs = fabs(d);
    }
    double den = sqrt(g2) > floor ? sqrt(g2) : floor;
    return den > 0 ? sqrt(d2) / den : sqrt(d2);
}

typedef struct ctx {
    backend_t *be;
    net_t *net;
    safetensors_t *gold;
    float *hp, *hb, *tmp, *ref;
    int batch;
    int32_t labels[64];
} ctx_t;

/* Compares net tensors against the gold tensors named prefix + name: the params (from
 * the host array pbase: params, gradients or an optimizer state, all laid out alike) when
 * params is set, the buffers and counters when buffers is set; returns the worst error
 * relative to its tolerance and checks it. */
static double compare(ctx_t *c, const char *prefix, const float *pbase, bool params, bool buffers, double tol) {
    double worst = 0, worst_err = 0, worst_torch = 0;  /* worst: error / tolerance */
    const char *worst_name = "";
    for (int i = 0; i < net_num_tensors(c->net); i++) {
        const net_tensor_t *t = net_tensor(c->net, i);
        if (t->store == NET_STORE_COUNTER) {
            if (!buffers) continue;
            char name[160];
            snprintf(name, sizeof name, "%s%s", prefix, t->name);
            const st_tensor_t *g = safetensors_find(c->gold, name);
            CHECK(g != NULL);
            int64_t v = -1;
            err_t e = {0};
            if (g) CHECK_INT(safetensors_read_i64(c->gold, g, &v, &e), 0);
            CHECK_INT(net_counters(c->net)[t->offset], v);
            continue;
        }
        if (t->store == NET_STORE_BUFFER && !buffers) continue;
        if (t->store == NET_STORE_PARAM && !params) continue;
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        const st_tensor_t *g = safetensors_find(c->gold, name);
        if (!g) {
            fprintf(stderr, "gold tensor %s missing\n", name);
            CHECK(g != NULL);
            continue;
        }
        CHECK_INT(g->numel, t->numel);
        err_t e = {0};
        CHECK_INT(safetensors_read_f32(c->gold, g, c->ref, &e), 0);
        tensor_host(c->net, t, pbase, c->hb, c->tmp + net_num_params(c->net));
        double mx, terr;
        double r = rel_err(c->tmp + net_num_params(c->net), c->ref, t->numel, gold_scalar(c->gold, "floor.", name), &mx);
        double tol_t = tol_for(c->gold, name, tol, &terr);
        if (r / tol_t > worst) {
            worst = r / tol_t;
            worst_name = t->name;
            worst_err = r;
            worst_torch = terr;
        }
        if (r > tol_t || getenv("GOLDEN_VERBOSE"))   /* GOLDEN_VERBOSE: every tensor */
            fprintf(stderr, "  %s%s: rel %.3g (PyTorch fp32 %.3g) max abs %.3g\n", prefix, t->name, r, terr, mx);
    }
    printf("%s %s: worst relative L2 error vs the fp64 reference %.3g (%s; PyTorch fp32: %.3g), "
           "%.2f of its tolerance max(%.1g, 10 x PyTorch's)\n", g_model, prefix, worst_err, worst_name,
           worst_torch, worst, tol);
    CHECK(worst <= 1.0);
    return worst;
}

/* The net of the fixture: its metadata's arch and model options (make_fixtures.py's
 * "model": width, groups, dropout, stem; the CIFAR one by default), or MODEL itself with
 * the CIFAR stem (resnet20 and resnet50 fixtures record none). */
static net_t *build_net(const safetensors_t *gold, int classes, err_t *e) {
    const char *arch = safetensors_meta(gold, "arch"), *w = safetensors_meta(gold, "width"),
               *g = safetensors_meta(gold, "groups"), *d = safetensors_meta(gold, "dropout"),
               *stem = safetensors_meta(gold, "stem");
    arch_opts_t o = {.stem = stem && !strcmp(stem, "imagenet") ? ARCH_STEM_IMAGENET : ARCH_STEM_CIFAR,
                     .in_channels = 3, .num_classes = classes,
                     .width = w ? atof(w) : 0, .groups = g ? atoi(g) : 0, .dropout = d ? atof(d) : -1};
    return arch_build(arch && arch[0] ? arch : g_model, &o, e);
}

/* The backend, the fixture, and the net bound to the batch of one part of it: prefix ""
 * (input, labels: forward and gradients) or "steps." (steps.input, steps.labels: the
 * optimizer runs, when the fixture has a batch of their own). */
static int setup(ctx_t *c, const char *prefix) {
    memset(c, 0, sizeof *c);
    err_t e = {0};
    backend_opts_t bo = {.kind = g_kind, .threads = 0, .deterministic = true, .allow_tf32 = false,
                         .cpu_winograd = g_winograd};
    c->be = g_kind == BACKEND_CPU ? cpu_backend_create(&bo, &e) : backend_create(&bo, &e);
    if (!c->be && g_kind == BACKEND_CUDA) test_skip(e.msg);
    CHECK(c->be != NULL);
    if (!c->be) return -1;
    c->gold = safetensors_open(g_gold, 0, &e);
    if (!c->gold) fprintf(stderr, "%s\n", e.msg);
    CHECK(c->gold != NULL);
    if (!c->gold) return -1;
    char xn[64], yn[64];
    snprintf(xn, sizeof xn, "%sinput", prefix);
    snprintf(yn, sizeof yn, "%slabels", prefix);
    if (*prefix && !safetensors_find(c->gold, xn)) {
        snprintf(xn, sizeof xn, "input");
        snprintf(yn, sizeof yn, "labels");
    }
    const st_tensor_t *x = safetensors_find(c->gold, xn), *y = safetensors_find(c->gold, yn),
                      *lg = safetensors_find(c->gold, "logits");
    CHECK(x && y && lg);
    if (!x || !y || !lg) return -1;
    c->batch = (int)x->shape[0];
    CHECK(c->batch <= 64);
    CHECK_INT(x->ndim, 4);
    int side = (int)x->shape[1];   /* NHWC, square */
    int classes = (int)lg->shape[1];
    c->net = build_net(c->gold, classes, &e);
    if (!c->net) fprintf(stderr, "%s\n", e.msg);
    CHECK(c->net != NULL);
    if (!c->net) return -1;
    CHECK_INT(net_bind(c->net, c->be, c->batch, side, side, DT_F32, &e), 0);
    int rc = safetensors_load_net(c->net, g_init, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    CHECK_INT(rc, 0);
    size_t np = net_num_params(c->net), nb = net_num_buffers(c->net);
    c->hp = malloc(np * 4);
    c->hb = malloc(nb * 4 + 4);
    c->tmp = malloc(np * 8);
    c->ref = malloc(np * 4);
    float *img = malloc(x->numel * 4);
    int64_t lab[64];
    CHECK_INT(safetensors_read_f32(c->gold, x, img, &e), 0);
    CHECK_INT(safetensors_read_i64(c->gold, y, lab, &e), 0);
    for (int i = 0; i < c->batch; i++) c->labels[i] = (int32_t)lab[i];
    CHECK_INT(net_upload_input(c->net, img, c->batch, &e), 0);
    free(img);
    return rc;
}

static void teardown(ctx_t *c) {
    net_free(c->net);
    safetensors_close(c->gold);
    backend_free(c->be);
    free(c->hp);
    free(c->hb);
    free(c->tmp);
    free(c->ref);
}

/* One training forward + loss + backward of the mean loss. */
static double fwd_bwd(ctx_t *c, net_loss_out_t *lo) {
    err_t e = {0};
    CHECK_INT(net_zero_grads(c->net, &e), 0);
    CHECK_INT(net_forward(c->net, net_input(c->net), c->batch, true, NULL, &e), 0);
    CHECK_INT(net_loss(c->net, c->labels, 0.1f, 1.0f / (float)c->batch, lo, &e), 0);
    CHECK_INT(net_backward(c->net, NULL, &e), 0);
    return lo->loss_sum / c->batch;
}

static void test_forward_backward(void) {
    ctx_t c;
    if (setup(&c, "") < 0) { teardown(&c); return; }
    err_t e = {0};
    net_loss_out_t lo;
    double loss = fwd_bwd(&c, &lo);
    /* logits and loss: forward only, ~1e-6 */
    const st_tensor_t *lg = safetensors_find(c.gold, "logits"), *ls = safetensors_find(c.gold, "loss");
    float *logits = malloc(lg->numel * 4), *gl = malloc(lg->numel * 4), gloss;
    CHECK_INT(safetensors_read_f32(c.gold, lg, gl, &e), 0);
    CHECK_INT(safetensors_read_f32(c.gold, ls, &gloss, &e), 0);
    CHECK_INT(c.be->ops->download(c.be, logits, net_logits(c.net), lg->numel * 4), 0);
    double mx, r = rel_err(logits, gl, lg->numel, 0, &mx);
    double terr, ltol = tol_for(c.gold, "logits", 2e-5, &terr);
    printf("%s logits: relative L2 error %.3g (PyTorch fp32 %.3g), max abs %.3g; loss %.7f vs %.7f\n",
           g_model, r, terr, mx, loss, gloss);
    CHECK(r <= ltol);
    CHECK_NEAR(loss, gloss, 0, tol_for(c.gold, "loss", 1e-5, &terr));
    /* BN running stats after one forward and counters == 1 */
    CHECK_INT(net_download_buffers(c.net, c.hb, &e), 0);
    compare(&c, "fwd.", c.hp, false, true, 2e-5);
    /* gradients: through the whole BN stack */
    CHECK_INT(net_download_grads(c.net, c.tmp, &e), 0);
    compare(&c, "grad.", c.tmp, true, false, 3e-5);
    free(logits);
    free(gl);
    teardown(&c);
}

/* Loads the fixture's state after `opt` step k (prefix "<opt><k>.") into the net (params,
 * buffers, counters) and the optimizer (its buffers, step count k), as make_fixtures.py's
 * step_from starts step k + 1 from the fp64 run's state. */
static int load_state(ctx_t *c, optim_t *o, const char *opt, int k) {
    err_t e = {0};
    size_t np = net_num_params(c->net);
    float *torch = c->ref;
    for (int s = -1; s < optim_num_state(o); s++) {   /* -1: the net itself */
        char prefix[96];
        if (s < 0) snprintf(prefix, sizeof prefix, "%s%d.", opt, k);
        else snprintf(prefix, sizeof prefix, "%s%d.%s.", opt, k, optim_state_name(o, s));
        float *base = s < 0 ? c->hp : c->tmp;
        for (int i = 0; i < net_num_tensors(c->net); i++) {
            const net_tensor_t *t = net_tensor(c->net, i);
            if (s >= 0 && t->store != NET_STORE_PARAM) continue;
            char name[200];
            snprintf(name, sizeof name, "%s%s", prefix, t->name);
            const st_tensor_t *g = safetensors_find(c->gold, name);
            if (!g || g->numel != t->numel) {
                fprintf(stderr, "gold tensor %s missing or of another size\n", name);
                return -1;
            }
            if (t->store == NET_STORE_COUNTER) {
                if (safetensors_read_i64(c->gold, g, &net_counters(c->net)[t->offset], &e)) return -1;
                continue;
            }
            if (safetensors_read_f32(c->gold, g, torch, &e)) return -1;
            tensor_xfer(t, base, c->hb, torch, false);
        }
        if (s < 0) {
            if (net_upload_params(c->net, c->hp, &e) || net_upload_buffers(c->net, c->hb, &e)) return -1;
        } else if (c->be->ops->upload(c->be, optim_state(o, s), c->tmp, np * sizeof(float))) {
            return -1;
        }
    }
    return optim_set_steps(o, k, &e);
}

/* The optimizer runs of make_fixtures.py, teacher-forced: step k (1, 2, ...) starts from
 * the fp64 run's state after step k - 1 (step 1 from the init), on the fixture's steps
 * batch, and its result (params, BN buffers and counters, and the optimizer's own
 * buffers) is compared with the fp64 run's state after step k. Every step is checked on
 * its own from the same state as PyTorch's, so an error of one step cannot be amplified
 * by the next (the old free-running 3-step fixture moved by up to 1e-2 between correct
 * fp32 implementations); that the optimizer's state carries from step to step is what the
 * comparison of its buffers after each step checks. */
static void run_optimizer(optim_kind_t kind, const char *opt, double tol) {
    ctx_t c;
    if (setup(&c, "steps.") < 0) { teardown(&c); return; }
    char probe[160];
    const char *first = net_tensor(c.net, 0)->name;
    snprintf(probe, sizeof probe, "%s1.%s", opt, first);
    if (!safetensors_find(c.gold, probe)) {
        /* make_fixtures.py stores no optimizer steps for resnet50 and only SGD ones for
         * the other families (it says why) */
        printf("%s %s: not in this fixture\n", g_model, opt);
        teardown(&c);
        return;
    }
    err_t e = {0};
    optim_opts_t oo = {.kind = kind};
    double lr;
    if (kind == OPTIM_SGD) {   /* as make_fixtures.py's SGD and ADAMW */
        oo.momentum = 0.9;
        oo.weight_decay = 5e-4;
        lr = 0.1;
    } else {
        oo.beta1 = 0.9;
        oo.beta2 = 0.999;
        oo.eps = 1e-4;
        oo.weight_decay = 5e-2;
        lr = 1e-3;
    }
    optim_t *o = optim_create(c.net, &oo, &e);
    CHECK(o != NULL);
    if (!o) { teardown(&c); return; }
    size_t np = net_num_params(c.net);
    int k = 1;
    for (;; k++) {
        snprintf(probe, sizeof probe, "%s%d.%s", opt, k, first);
        if (!safetensors_find(c.gold, probe)) break;
        if (k > 1) CHECK_INT(load_state(&c, o, opt, k - 1), 0);
        net_loss_out_t lo;
        fwd_bwd(&c, &lo);
        CHECK_INT(optim_step(o, lr, &e), 0);
        int64_t taken = -1;
        CHECK_INT(optim_steps(o, &taken, &e), 0);
        CHECK_INT(taken, k);
        CHECK_INT(net_download_params(c.net, c.hp, &e), 0);
        CHECK_INT(net_download_buffers(c.net, c.hb, &e), 0);
        char prefix[96];
        snprintf(prefix, sizeof prefix, "%s%d.", opt, k);
        compare(&c, prefix, c.hp, true, true, tol);
        for (int s = 0; s < optim_num_state(o); s++) {
            CHECK_INT(c.be->ops->download(c.be, c.tmp, optim_state(o, s), np * sizeof(float)), 0);
            snprintf(prefix, sizeof prefix, "%s%d.%s.", opt, k, optim_state_name(o, s));
            compare(&c, prefix, c.tmp, true, false, tol);
        }
    }
    CHECK(k > 2);   /* at least two steps: one that creates the state, one that uses it */
    optim_free(o);
    teardown(&c);
}

static void test_sgd_steps(void) { run_optimizer(OPTIM_SGD, "sgd", 3e-5); }
static void test_adamw_steps(void) { run_optimizer(OPTIM_ADAMW, "adamw", 1e-4); }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_golden MODEL FIXTURE_DIR [cpu|cuda]\n");
        return 2;
    }
    if (argc > 3 && !strcmp(argv[3], "cpu-winograd")) g_winograd = true;
    if (argc > 3 && !strcmp(argv[3], "cuda")) {
        if (backend_cuda_device_count() < 1) test_skip("no CUDA device visible");
        g_kind = BACKEND_CUDA;
    }
    g_model = argv[1];
    g_dir = argv[2];
    snprintf(g_init, sizeof g_init, "%s/%s_init.safetensors", g_dir, g_model);
    snprintf(g_gold, sizeof g_gold, "%s/%s_golden.safetensors", g_dir, g_model);
    TEST_RUN(test_forward_backward);
    TEST_RUN(test_sgd_steps);
    TEST_RUN(test_adamw_steps);
    return test_main_end();
}
