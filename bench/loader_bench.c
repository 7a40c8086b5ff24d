/* loader_bench.c: images/s of the data loader on CIFAR-shaped data (32x32x3, synthetic
 * pixels) with random crop (32, padding 4) + horizontal flip + rotation (15 degrees) +
 * normalisation, float32 NHWC output, batch 128, for 0, 1 and 2 worker threads, and
 * for 1 worker without the rotation; then issue 17's recipe on crop + flip (1 worker):
 * RandAugment(2, 9), + random erasing (0.25, pixel), + mixup/cutmix (batch mode), and
 * TrivialAugmentWide (bench/loader_recipe_torch.py is torchvision's side).
 *
 * Usage: bench_loader_bench [images (default 20000)] [epochs (default 2)]
 * Prints one line per configuration: wall-clock images/s, and images per CPU-second (which
 * is what a loaded machine still measures reliably); consumer does nothing with the batches (the upper
 * bound the loader can feed). Not a training benchmark.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "util/clock.h"

/* CPU seconds used by the whole process (all threads). */
static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000;
    int epochs = argc > 2 ? atoi(argv[2]) : 2;
    err_t e = {0};
    dataset_opts_t dopt = {0};
    dopt.name = "synthetic";
    dopt.split = DATA_SPLIT_TRAIN;
    dopt.seed = 1;
    dopt.synthetic = (data_synthetic_opts_t){n, 16, 3, 32, 32, 10};
    dataset_t *ds = NULL;
    if (dataset_open(&dopt, &ds, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    /* rows: worker count, rotation on/off, recipe (0 none, 1 RandAugment, 2 + erasing,
     * 3 + mixup/cutmix, 4 TrivialAugmentWide) */
    enum { ROWS = 8 };
    int workers[ROWS] = {0, 1, 2, 1, 1, 1, 1, 1}, recipe[ROWS] = {0, 0, 0, 0, 1, 2, 3, 4};
    double rotation[ROWS] = {15.0, 15.0, 15.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    const char *what[5] = {"", " + RandAugment(2, 9)", " + RandAugment(2, 9) + erasing(0.25, pixel)",
                           " + RandAugment + erasing + mixup 0.8/cutmix 1.0 (batch)", " + TrivialAugmentWide"};
    printf("loader: %ld images 32x32x3, batch 128, crop 32/4 + flip + rotation 15 + normalise, fp32\n", n);
    for (int wi = 0; wi < ROWS; wi++) {
        loader_opts_t o = {0};
        o.batch_size = 128;
        o.workers = workers[wi];
        o.shuffle = true;
        o.world_size = 1;
        o.seed = 1;
        o.augment = (augment_opts_t){true, 32, 4, true, rotation[wi]};
        o.n_norm = 3;
        for (int k = 0; k < 3; k++) { o.mean[k] = 0.5f; o.std[k] = 0.25f; }
        if (recipe[wi]) o.autoaug = (autoaug_opts_t){recipe[wi] == 4 ? AUTOAUG_TRIVIAL : AUTOAUG_RAND, 2, 9};
        if (recipe[wi] == 2 || recipe[wi] == 3) o.erasing = (erasing_opts_t){0.25, ERASE_PIXEL, 1};
        if (recipe[wi] == 3) o.mixup = (mixup_opts_t){0.8, 1.0, 1.0, 0.5, MIXUP_BATCH, 0.1, 10};
        loader_t *l = NULL;
        if (loader_create(ds, &o, &l, &e)) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
        double t0 = now_s(), c0 = cpu_s(), wait = 0;
        long images = 0;
        for (int ep = 0; ep < epochs; ep++) {
            loader_start_epoch(l, ep, 0, &e);
            loader_batch_t *b;
            while (loader_next(l, &b, &e) == 1) {
                images += b->n;
                wait += b->data_wait_s;
            }
        }
        double dt = now_s() - t0, dc = cpu_s() - c0;
        printf("workers=%d rotation=%g%s: %.0f images/s wall (%ld images in %.2f s, consumer "
               "waited %.2f s), %.0f images per CPU-second\n", workers[wi], rotation[wi], what[recipe[wi]],
               images / dt, images, dt, wait, images / dc);
        loader_free(l);
    }
    dataset_free(ds);
    return 0;
}
