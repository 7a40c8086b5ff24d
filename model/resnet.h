/* resnet.h: ResNet builders (torchvision naming) for CIFAR-sized, Fashion-MNIST and
 * ImageNet-sized inputs.
 *
 * resnet18/34/50/101/152: torchvision BasicBlock/Bottleneck (v1.5: stride on the 3x3
 * conv) with one of two stems: the CIFAR stem, conv1 3x3 stride 1 pad 1 (no bias), bn1,
 * relu, NO max-pool; or torchvision's ImageNet stem, conv1 7x7 stride 2 pad 3 (no bias),
 * bn1, relu, max-pool 3x3 stride 2 pad 1 (tensors and shapes then are exactly those of
 * torchvision.models.resnetNN(num_classes)); layer1..4 of widths 64/128/256/512 (x4 for Bottleneck), strides 1/2/2/2; a 1x1
 * conv + BN downsample (downsample.0 / downsample.1) where the shape changes; global
 * average pool; fc.
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

#include "model/net.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds arch ("resnet18" ... "resnet152", "resnet20" ... "resnet110") with the CIFAR
 * stem for in_channels input channels and num_classes outputs. Unknown arch or bad sizes: NULL with ERR_INPUT
 * naming the valid architectures. The net is unbound; see net_bind / net_init. */
net_t *resnet_build(const char *arch, int in_channels, int num_classes, bool zero_init_residual,
                    err_t *e);

/* The stem of resnet18..152 (resnet20..110 have only the CIFAR one). */
typedef enum { RESNET_STEM_CIFAR = 0, RESNET_STEM_IMAGENET = 1 } resnet_stem_t;
/* "cifar" | "imagenet" */
const char *resnet_stem_name(resnet_stem_t stem);

/* resnet_build with a choice of stem. RESNET_STEM_IMAGENET for an architecture without
 * one (resnet20..110) is ERR_INPUT naming model.stem. */
net_t *resnet_build_stem(const char *arch, resnet_stem_t stem, int in_channels, int num_classes,
                         bool zero_init_residual, err_t *e);

/* True for the architectures that have the ImageNet stem (resnet18..152). */
bool resnet_has_imagenet_stem(const char *arch);

/* True if arch is one resnet_build accepts. */
bool resnet_arch_valid(const char *arch);
/* "resnet18, resnet34, resnet50, resnet101, resnet152, resnet20, resnet32, resnet44,
 * resnet56, resnet110" */
const char *resnet_arch_list(void);

#ifdef __cplusplus
}
#endif
#endif
