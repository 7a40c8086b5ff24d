/* resnet.h: building an architecture by name with every option but the stem at its
 * default: the shorthand tests, benchmarks and tools use (arch_build in arch.h is the
 * whole interface). The ResNet builders themselves (arch_build_resnet,
 * arch_build_resnet_cifar) are declared in arch.h and live in resnet.c:
 *
 * resnet18/34/50/101/152, wide_resnet50_2/101_2, resnext50_32x4d, resnext101_32x8d/64x4d:
 * torchvision's ResNet class, BasicBlock/Bottleneck (v1.5: stride on the 3x3 conv; a
 * Bottleneck's 3x3 conv is int(planes x width_per_group / 64) x groups wide and has
 * `groups` groups: model.width and model.groups) with one of two stems: the CIFAR stem,
 * conv1 3x3 stride 1 pad 1 (no bias), bn1, relu, NO max-pool; or torchvision's ImageNet
 * stem, conv1 7x7 stride 2 pad 3 (no bias), bn1, relu, max-pool 3x3 stride 2 pad 1
 * (tensors and shapes then are exactly those of torchvision.models.<arch>(num_classes));
 * layer1..4 of widths 64/128/256/512 (x4 for Bottleneck), strides 1/2/2/2; a 1x1 conv + BN
 * downsample (downsample.0 / downsample.1) where the shape changes; global average pool; fc.
 * resnet20/32/44/56/110: He et al. (2016) CIFAR ResNets: conv1 3x3 16, bn1, relu, three
 * stages (layer1..3) of n = (depth - 2) / 6 BasicBlocks of widths 16/32/64, strides
 * 1/2/2, a 1x1 conv + BN projection shortcut (downsample.0/.1) where the shape changes
 * (option B), global average pool, fc.
 * Any input size at least 8x8 works (28x28 Fashion-MNIST, 32x32 CIFAR).
 * Nodes: conv -> bn_relu -> conv -> [conv -> bn_relu ->] conv, shortcut
 * [conv -> bn], then bn_add_relu(last conv, shortcut).
 * Initialisation (net_init) follows torchvision: kaiming_normal_(fan_out, relu) for
 * convs, BN weight 1 / bias 0 (last BN of each block 0 with zero_init_residual), Linear
 * default U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
 */
#ifndef RUNNER_MODEL_RESNET_H
#define RUNNER_MODEL_RESNET_H

#include <stdbool.h>

#include "model/arch/arch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* arch_build of arch with the CIFAR stem (variant) and the architecture's own width,
 * groups and dropout. Unknown arch or bad sizes: NULL with ERR_INPUT naming the valid
 * architectures. The net is unbound; see net_bind / net_init. */
net_t *resnet_build(const char *arch, int in_channels, int num_classes, bool zero_init_residual,
                    err_t *e);

/* resnet_build with a choice of stem (variant). ARCH_STEM_IMAGENET for an architecture
 * without one (resnet20..110, ...) is ERR_INPUT naming model.stem. */
net_t *resnet_build_stem(const char *arch, arch_stem_t stem, int in_channels, int num_classes,
                         bool zero_init_residual, err_t *e);

#ifdef __cplusplus
}
#endif
#endif
