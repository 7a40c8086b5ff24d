/* arch_dump.c: what the runner builds for one architecture, for tests/model/arch_vs_torch.py
 * to compare with PyTorch: the parameter count, the forward FLOPs per sample at a given
 * input size (net_forward_flops, what `runner plan` prints), and every tensor of the table
 * with its torchvision shape, one line each:
 *
 *   params N
 *   buffers N
 *   flops F
 *   tensor NAME D0,D1,...        (shape as torchvision's state_dict has it; "" for a scalar)
 *
 * usage: arch_dump ARCH STEM(cifar|imagenet) IN_CHANNELS CLASSES SIZE [WIDTH GROUPS DROPOUT]
 * (WIDTH, GROUPS 0 and DROPOUT -1: the architecture's own). Exit 2 with the builder's
 * message on bad options, 0 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/arch/arch.h"

int main(int argc, char **argv) {
    if (argc != 6 && argc != 9) {
        fprintf(stderr, "usage: arch_dump ARCH cifar|imagenet IN_CHANNELS CLASSES SIZE [WIDTH GROUPS DROPOUT]\n");
        return 2;
    }
    arch_opts_t o = {.stem = !strcmp(argv[2], "imagenet") ? ARCH_STEM_IMAGENET : ARCH_STEM_CIFAR,
                     .in_channels = atoi(argv[3]), .num_classes = atoi(argv[4]), .dropout = -1};
    int size = atoi(argv[5]);
    if (argc == 9) {
        o.width = atof(argv[6]);
        o.groups = atoi(argv[7]);
        o.dropout = atof(argv[8]);
    }
    err_t e = {0};
    net_t *n = arch_build(argv[1], &o, &e);
    if (!n) {
        fprintf(stderr, "arch_dump: %s\n", e.msg);
        return 2;
    }
    printf("params %zu\nbuffers %zu\nflops %.17g\n", net_num_params(n), net_num_buffers(n),
           net_forward_flops(n, size, size));
    for (int i = 0; i < net_num_tensors(n); i++) {
        const net_tensor_t *t = net_tensor(n, i);
        printf("tensor %s ", t->name);
        for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? "," : "", (long long)t->shape[d]);
        printf("\n");
    }
    net_free(n);
    return 0;
}
