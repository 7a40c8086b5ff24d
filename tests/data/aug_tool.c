/* aug_tool.c: runs the runner's augmentation, mixup and soft-target loss code on inputs a
 * Python reference script gives it (tests/data/aug_vs_reference.py), so the script can
 * compare with torchvision and with timm's formulas on the same inputs. Not a test by
 * itself. Reads commands, one per line, from the file argv[1]; raw files are native-endian
 * arrays. Commands:
 *   mag KIND H W                         prints "op bin value" for every table value
 *   aa KIND H W C OP BIN NEG IN OUT      one resolved op on a uint8 HWC image; prints the
 *                                        signed magnitude torchvision's _apply_op gets
 *   u32 SEED EPOCH INDEX BLOCK COUNT     prints COUNT raw draws of (seed, AUGMENT, epoch,
 *                                        index) from block BLOCK
 *   erase SEED EPOCH INDEX PROB MODE COUNT H W C OUT   erases a NaN image (float32)
 *   mix MODE N H W C CLASSES SMOOTH X LABELS PARAMS OUTX OUTT
 *                                        PARAMS: a line "lam cut cy cx" per decision
 *   xent N CLASSES GRAD_SCALE LOSS_SCALE LOGITS TARGETS OUT   CPU backend soft-target CE:
 *                                        OUT = loss, top1, top5, dlogits (float32)
 * Every command prints "ok" (after its own lines) so the script can check it ran.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/autoaugment.h"
#include "data/erasing.h"
#include "data/mixup.h"
#include "model/backend.h"

static void *read_raw(const char *path, size_t n) {
    void *p = malloc(n ? n : 1);
    FILE *f = fopen(path, "rb");
    if (!p || !f || fread(p, 1, n, f) != n) {
        fprintf(stderr, "aug_tool: cannot read %zu bytes from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return p;
}

static void write_raw(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "aug_tool: cannot write %s\n", path);
        exit(1);
    }
}

static void cmd_aa(const char *args) {
    int kind, h, w, c, op, bin, neg;
    char in[512], out[512];
    if (sscanf(args, "%d %d %d %d %d %d %d %511s %511s", &kind, &h, &w, &c, &op, &bin, &neg, in, out) != 9) exit(2);
    static aa_entry_t table[AA_TABLE_SIZE];
    autoaug_build_table((autoaug_kind_t)kind, h, w, table);
    size_t n = (size_t)h * w * c;
    uint8_t *img = read_raw(in, n), *tmp = malloc(n);
    autoaug_apply_entry(&table[aa_index(op, bin, neg)], img, tmp, c, h, w);
    write_raw(out, img, n);
    double m = aa_has_bins(op) ? (double)autoaug_magnitude((autoaug_kind_t)kind, op, bin, h, w) : 0.0;
    if (neg && aa_signed(op)) m *= -1.0;
    printf("%.17g\n", m);
    free(img);
    free(tmp);
}

static void cmd_erase(const char *args) {
    unsigned long long seed;
    long long epoch, index;
    double prob;
    int mode, count, h, w, c;
    char out[512];
    if (sscanf(args, "%llu %lld %lld %lf %d %d %d %d %d %511s", &seed, &epoch, &index, &prob, &mode, &count, &h,
               &w, &c, out) != 10)
        exit(2);
    size_t n = (size_t)h * w * c;
    float *img = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) img[i] = NAN;
    erasing_opts_t o = {prob, (erase_mode_t)mode, count};
    int boxes = erasing_apply(&o, seed, epoch, index, img, c, h, w);
    write_raw(out, img, n * sizeof(float));
    printf("%d\n", boxes);
    free(img);
}

static void cmd_mix(const char *args) {
    int mode, n, h, w, c, classes;
    double smooth;
    char xp[512], lp[512], pp[512], ox[512], ot[512];
    if (sscanf(args, "%d %d %d %d %d %d %lf %511s %511s %511s %511s %511s", &mode, &n, &h, &w, &c, &classes,
               &smooth, xp, lp, pp, ox, ot) != 12)
        exit(2);
    size_t per = (size_t)h * w * c;
    float *x = read_raw(xp, (size_t)n * per * sizeof(float));
    int32_t *labels = read_raw(lp, (size_t)n * sizeof(int32_t));
    mix_sample_t *s = calloc((size_t)n, sizeof *s);
    FILE *f = fopen(pp, "r");
    if (!f) exit(2);
    double lam;
    int cut, cy, cx;
    if (mode == MIXUP_BATCH) {
        if (fscanf(f, "%lf %d %d %d", &lam, &cut, &cy, &cx) != 4) exit(2);
        mixup_set_batch(lam, cut, cy, cx, n, h, w, s);
    } else {
        int m = mode == MIXUP_PAIR ? n / 2 : n;
        for (int i = 0; i < n; i++) mixup_set_elem(i, false, 1.0f, 0, 0, 0, n, h, w, s);
        for (int i = 0; i < m; i++) {
            if (fscanf(f, "%lf %d %d %d", &lam, &cut, &cy, &cx) != 4) exit(2);
            mixup_set_elem(i, mode == MIXUP_PAIR, (float)lam, cut, cy, cx, n, h, w, s);
        }
    }
    fclose(f);
    float on, off, *t = malloc((size_t)n * classes * sizeof(float));
    mixup_on_off(smooth, classes, &on, &off);
    mixup_apply(s, n, h, w, c, x);
    mixup_targets(s, n, labels, classes, on, off, t);
    write_raw(ox, x, (size_t)n * per * sizeof(float));
    write_raw(ot, t, (size_t)n * classes * sizeof(float));
    free(x);
    free(labels);
    free(s);
    free(t);
}

static void cmd_xent(const char *args) {
    int n, classes;
    float gs, ls;
    char lp[512], tp[512], op[512];
    if (sscanf(args, "%d %d %f %f %511s %511s %511s", &n, &classes, &gs, &ls, lp, tp, op) != 7) exit(2);
    err_t e = {0};
    backend_opts_t bo = {0};
    bo.kind = BACKEND_CPU;
    bo.threads = 1;
    backend_t *be = backend_create(&bo, &e);
    if (!be) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    size_t nc = (size_t)n * classes;
    float *logits = read_raw(lp, nc * sizeof(float)), *targets = read_raw(tp, nc * sizeof(float));
    float *out = calloc(3 + nc, sizeof(float)), loss = 0;
    int32_t correct[2] = {0, 0};
    step_ctl_t ctl = {0};
    ctl.loss_scale = ls;
    if (be->ops->softmax_xent_soft(be, n, classes, DT_F32, logits, targets, gs, &ctl, out + 3, &loss, correct)) {
        fprintf(stderr, "%s\n", be->err.msg);
        exit(1);
    }
    out[0] = loss;
    out[1] = (float)correct[0];
    out[2] = (float)correct[1];
    write_raw(op, out, (3 + nc) * sizeof(float));
    free(logits);
    free(targets);
    free(out);
    backend_free(be);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: aug_tool COMMAND_FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) return 2;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        char cmd[16];
        int off = 0;
        if (sscanf(line, "%15s %n", cmd, &off) != 1) continue;
        const char *a = line + off;
        if (!strcmp(cmd, "mag")) {
            int kind, h, w;
            if (sscanf(a, "%d %d %d", &kind, &h, &w) != 3) return 2;
            for (int op = 0; op < AA_NUM_OPS; op++)
                for (int bin = 0; bin < AA_BINS && aa_has_bins(op); bin++)
                    printf("%d %d %.9g\n", op, bin, (double)autoaug_magnitude((autoaug_kind_t)kind, op, bin, h, w));
        } else if (!strcmp(cmd, "aa")) {
            cmd_aa(a);
        } else if (!strcmp(cmd, "u32")) {
            unsigned long long seed;
            long long epoch, index;
            unsigned block;
            int count;
            if (sscanf(a, "%llu %lld %lld %u %d", &seed, &epoch, &index, &block, &count) != 5) return 2;
            rng_t r = rng_make(seed, RNG_STREAM_AUGMENT, (uint64_t)epoch, (uint64_t)index);
            rng_seek(&r, block);
            for (int i = 0; i < count; i++) printf("%u%c", rng_u32(&r), i + 1 < count ? ' ' : '\n');
        } else if (!strcmp(cmd, "erase")) {
            cmd_erase(a);
        } else if (!strcmp(cmd, "mix")) {
            cmd_mix(a);
        } else if (!strcmp(cmd, "xent")) {
            cmd_xent(a);
        } else {
            fprintf(stderr, "aug_tool: unknown command %s\n", cmd);
            return 2;
        }
        printf("ok\n");
    }
    fclose(f);
    return 0;
}
