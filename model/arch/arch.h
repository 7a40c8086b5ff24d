/* arch.h: building any architecture of model.arch by name: ONE entry point over the table
 * of model/arch/arch_table.h, which maps every name to its family's builder:
 *
 *   family          names                                     builder       reference
 *   ResNet          resnet18..152, wide_resnet50_2/101_2,     resnet.c      torchvision 0.14
 *                   resnext50_32x4d, resnext101_32x8d/64x4d
 *   CIFAR ResNet    resnet20/32/44/56/110                     resnet.c      He et al. 2016
 *   Wide ResNet     wrn16_8, wrn28_10                         wrn.c         xternalz/WideResNet-pytorch
 *   PreAct ResNet   preact_resnet18                           preact.c      kuangliu/pytorch-cifar + final BN-ReLU
 *   ResNeXt-29      resnext29_8x64d                           resnext.c     prlz77/ResNeXt.pytorch
 *   VGG-BN          vgg11_bn, vgg13_bn, vgg16_bn, vgg19_bn    vgg.c         torchvision / chenyaofo (CIFAR)
 *   MobileNetV2     mobilenet_v2                              mobilenet.c   torchvision / chenyaofo (CIFAR)
 *
 * Every builder emits the tensor names of its reference definition (written out in
 * PyTorch in scripts/torchvision_model.py), so runner export and model.init_from speak
 * torchvision's names where torchvision has the model, and the reference's elsewhere.
 *
 * The variant (arch_stem_t, model.stem): ARCH_STEM_IMAGENET is torchvision's model as it
 * is (ResNets: 7x7/2 conv + max-pool; VGG: the 7x7 adaptive average pool and the
 * 4096-wide classifier; MobileNetV2: stride-2 conv1 and second stage); ARCH_STEM_CIFAR is
 * the small-input variant (ResNets: 3x3/1 conv1 and no max-pool; VGG: a 512-wide
 * classifier after a global average pool; MobileNetV2: stride 1 in conv1 and the second
 * stage). Architectures without an ImageNet variant (CIFAR ResNets, WRN, PreAct, ResNeXt-29)
 * refuse ARCH_STEM_IMAGENET with ERR_INPUT naming model.stem.
 */
#ifndef RUNNER_MODEL_ARCH_H
#define RUNNER_MODEL_ARCH_H

#include <stdbool.h>

#include "model/arch/arch_table.h"
#include "model/net.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ARCH_STEM_CIFAR = 0, ARCH_STEM_IMAGENET = 1 } arch_stem_t;
/* "cifar" | "imagenet" */
const char *arch_stem_name(arch_stem_t stem);
/* What the variant is for arch, for the plan: "cifar: conv 3x3/1, no max-pool". */
const char *arch_stem_text(const char *arch, arch_stem_t stem);

/* What to build. width, groups, dropout: 0, 0, < 0 take the architecture's own (the row's
 * defaults); arch_resolve fills them in. */
typedef struct arch_opts {
    arch_stem_t stem;
    int in_channels;
    int num_classes;
    bool zero_init_residual;   /* ResNet families: the last BN of each residual branch at 0 */
    double width;              /* model.width */
    int groups;                /* model.groups */
    double dropout;            /* model.dropout */
} arch_opts_t;

/* The module name of arch's classifier, the layer model.init_head: reinit starts afresh:
 * "fc" (ResNets, WRN), "linear" (PreAct), "classifier" (ResNeXt-29), "classifier.6" (VGG),
 * "classifier.1" (MobileNetV2); "fc" for an unknown arch. */
const char *arch_head(const char *arch);

/* True if arch is a name of the table. */
bool arch_valid(const char *arch);
/* Every name, comma-separated ("resnet18, resnet34, ..."). */
const char *arch_list(void);

/* Checks o against arch and writes into out the options with the architecture's defaults
 * filled in (width, groups, dropout as the builder uses them; 0, 0 and -1 where the
 * architecture has no such setting, so that resolving twice changes nothing). ERR_INPUT naming the key: an unknown arch (listing the
 * known ones), a key the architecture lacks or a value it cannot take, the ImageNet
 * variant of an architecture without one, a class count out of range. */
int arch_resolve(const char *arch, const arch_opts_t *o, arch_opts_t *out, err_t *e);

/* Builds arch with options o (arch_resolve'd here). The net is unbound; see net_bind /
 * net_init. NULL with e set on bad options. */
net_t *arch_build(const char *arch, const arch_opts_t *o, err_t *e);

/* The smallest square input (px, at most 1024) that the built net n takes, or 0 if none
 * up to 1024 does: for "inputs too small" messages. */
int arch_min_input(const net_t *n);

/* ---- the family builders (one file each), called by arch_build with resolved options ---- */
net_t *arch_build_resnet(const arch_info_t *a, const arch_opts_t *o, err_t *e);        /* resnet.c */
net_t *arch_build_resnet_cifar(const arch_info_t *a, const arch_opts_t *o, err_t *e);  /* resnet.c */
net_t *arch_build_wrn(const arch_info_t *a, const arch_opts_t *o, err_t *e);           /* wrn.c */
net_t *arch_build_preact(const arch_info_t *a, const arch_opts_t *o, err_t *e);        /* preact.c */
net_t *arch_build_resnext_cifar(const arch_info_t *a, const arch_opts_t *o, err_t *e); /* resnext.c */
net_t *arch_build_vgg(const arch_info_t *a, const arch_opts_t *o, err_t *e);           /* vgg.c */
net_t *arch_build_mobilenet_v2(const arch_info_t *a, const arch_opts_t *o, err_t *e);  /* mobilenet.c */

#ifdef __cplusplus
}
#endif
#endif
