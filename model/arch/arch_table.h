/* arch_table.h: THE table of the architectures `model.arch` accepts: one row per name with
 * its family (which builder in model/arch/ makes it), whether it has torchvision's ImageNet
 * variant, its depth, and the defaults of the keys model.width / model.groups /
 * model.dropout where the architecture has them.
 *
 * Pure data plus two inline checks, header-only, so that the config layer (which links no
 * model code) accepts and checks exactly the rows that model/arch/arch.c builds from.
 *
 * The keys, per family (docs/experiment-files.md):
 *   model.width   torchvision ResNets (wide_resnet*, resnext*): torchvision's width_per_group
 *                 (wide_resnet50_2: 128 = 2 x 64; resnext50_32x4d: 4); WRN: the widen factor
 *                 k; ResNeXt-29: the base width per group (64 in 8x64d); MobileNetV2: the
 *                 width multiplier (width_mult, channels rounded to multiples of 8 as
 *                 torchvision's _make_divisible). Whole numbers except MobileNetV2's.
 *   model.groups  the cardinality of ResNeXt (torchvision's groups).
 *   model.dropout WRN: between the two convs of each block (0 by default; the CIFAR recipe
 *                 uses 0.3); VGG: the two of the classifier (0.5); MobileNetV2: before the
 *                 classifier (0.2).
 * Channel counts are products width x groups by construction (torchvision's and the
 * references' parametrisation), so every group count divides the channels it splits.
 */
#ifndef RUNNER_MODEL_ARCH_TABLE_H
#define RUNNER_MODEL_ARCH_TABLE_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef enum {
    ARCH_FAM_RESNET = 0,    /* torchvision's ResNet class: arch/resnet.c */
    ARCH_FAM_RESNET_CIFAR,  /* He et al. (2016) CIFAR ResNets: arch/resnet.c */
    ARCH_FAM_WRN,           /* Wide ResNet (Zagoruyko & Komodakis), CIFAR: arch/wrn.c */
    ARCH_FAM_PREACT,        /* pre-activation ResNet (He et al. 2016b), CIFAR: arch/preact.c */
    ARCH_FAM_RESNEXT_CIFAR, /* ResNeXt-29 (Xie et al.), CIFAR: arch/resnext.c */
    ARCH_FAM_VGG,           /* VGG with batch norm: arch/vgg.c */
    ARCH_FAM_MOBILENET_V2,  /* MobileNetV2: arch/mobilenet.c */
    ARCH_FAM_COUNT
} arch_family_t;

typedef struct arch_info {
    const char *name;
    arch_family_t family;
    bool imagenet;       /* has torchvision's ImageNet variant (model.stem: imagenet, or auto
                            above 64 px); the others have only the CIFAR one */
    bool bottleneck;     /* ResNet family: Bottleneck blocks (else BasicBlock) */
    int depth;           /* the depth in the name (wrn28_10: 28) */
    int blocks[5];       /* blocks per stage (ResNets); VGG: 3x3 convs per stage */
    double width;        /* model.width's default; 0: the architecture has no such key */
    int groups;          /* model.groups' default; 0: none */
    double dropout;      /* model.dropout's default; < 0: the architecture has no dropout */
} arch_info_t;

/* name, family, imagenet, bottleneck, depth, blocks, width, groups, dropout */
#define ARCH_ROWS(X)                                                                          \
    X("resnet18", ARCH_FAM_RESNET, true, false, 18, {2, 2, 2, 2}, 0, 0, -1)                  \
    X("resnet34", ARCH_FAM_RESNET, true, false, 34, {3, 4, 6, 3}, 0, 0, -1)                  \
    X("resnet50", ARCH_FAM_RESNET, true, true, 50, {3, 4, 6, 3}, 0, 0, -1)                   \
    X("resnet101", ARCH_FAM_RESNET, true, true, 101, {3, 4, 23, 3}, 0, 0, -1)                \
    X("resnet152", ARCH_FAM_RESNET, true, true, 152, {3, 8, 36, 3}, 0, 0, -1)                \
    X("resnet20", ARCH_FAM_RESNET_CIFAR, false, false, 20, {3, 3, 3}, 0, 0, -1)              \
    X("resnet32", ARCH_FAM_RESNET_CIFAR, false, false, 32, {5, 5, 5}, 0, 0, -1)              \
    X("resnet44", ARCH_FAM_RESNET_CIFAR, false, false, 44, {7, 7, 7}, 0, 0, -1)              \
    X("resnet56", ARCH_FAM_RESNET_CIFAR, false, false, 56, {9, 9, 9}, 0, 0, -1)              \
    X("resnet110", ARCH_FAM_RESNET_CIFAR, false, false, 110, {18, 18, 18}, 0, 0, -1)         \
    X("wide_resnet50_2", ARCH_FAM_RESNET, true, true, 50, {3, 4, 6, 3}, 128, 0, -1)          \
    X("wide_resnet101_2", ARCH_FAM_RESNET, true, true, 101, {3, 4, 23, 3}, 128, 0, -1)       \
    X("resnext50_32x4d", ARCH_FAM_RESNET, true, true, 50, {3, 4, 6, 3}, 4, 32, -1)           \
    X("resnext101_32x8d", ARCH_FAM_RESNET, true, true, 101, {3, 4, 23, 3}, 8, 32, -1)        \
    X("resnext101_64x4d", ARCH_FAM_RESNET, true, true, 101, {3, 4, 23, 3}, 4, 64, -1)        \
    X("wrn16_8", ARCH_FAM_WRN, false, false, 16, {2, 2, 2}, 8, 0, 0)                         \
    X("wrn28_10", ARCH_FAM_WRN, false, false, 28, {4, 4, 4}, 10, 0, 0)                       \
    X("preact_resnet18", ARCH_FAM_PREACT, false, false, 18, {2, 2, 2, 2}, 0, 0, -1)          \
    X("resnext29_8x64d", ARCH_FAM_RESNEXT_CIFAR, false, true, 29, {3, 3, 3}, 64, 8, -1)      \
    X("vgg11_bn", ARCH_FAM_VGG, true, false, 11, {1, 1, 2, 2, 2}, 0, 0, 0.5)                 \
    X("vgg13_bn", ARCH_FAM_VGG, true, false, 13, {2, 2, 2, 2, 2}, 0, 0, 0.5)                 \
    X("vgg16_bn", ARCH_FAM_VGG, true, false, 16, {2, 2, 3, 3, 3}, 0, 0, 0.5)                 \
    X("vgg19_bn", ARCH_FAM_VGG, true, false, 19, {2, 2, 4, 4, 4}, 0, 0, 0.5)                 \
    X("mobilenet_v2", ARCH_FAM_MOBILENET_V2, true, false, 0, {0}, 1.0, 0, 0.2)

#define ARCH_ROW_INFO(...) {__VA_ARGS__},
#define ARCH_ROW_NAME(nm, ...) nm,
#define ARCH_ROW_LIST(nm, ...) ", " nm

static const arch_info_t ARCH_TABLE[] = {ARCH_ROWS(ARCH_ROW_INFO)};
enum { ARCH_COUNT = sizeof ARCH_TABLE / sizeof ARCH_TABLE[0] };
/* The names alone, for the config schema's model.arch row. */
static const char *const ARCH_NAMES[] = {ARCH_ROWS(ARCH_ROW_NAME)};
/* "resnet18, resnet34, ..., mobilenet_v2" (the literal starts with ", ": skip 2). */
#define ARCH_NAME_LIST ((ARCH_ROWS(ARCH_ROW_LIST)) + 2)

/* The row of name, or NULL. */
static inline const arch_info_t *arch_info(const char *name) {
    for (int i = 0; name && i < ARCH_COUNT; i++)
        if (!strcmp(name, ARCH_TABLE[i].name)) return &ARCH_TABLE[i];
    return NULL;
}

/* What model.width means for a (for messages). */
static inline const char *arch_width_meaning(const arch_info_t *a) {
    switch (a->family) {
    case ARCH_FAM_RESNET: return "torchvision's width_per_group";
    case ARCH_FAM_WRN: return "the widen factor k";
    case ARCH_FAM_RESNEXT_CIFAR: return "the base width of each group";
    case ARCH_FAM_MOBILENET_V2: return "the width multiplier";
    default: return "no width";
    }
}

/* The widest layer (channels) of a with width w and groups g resolved. */
static inline double arch_widest(const arch_info_t *a, double w, int g) {
    switch (a->family) {
    case ARCH_FAM_RESNET: return 8 * w * g > 2048 ? 8 * w * g : 2048;   /* layer4's 3x3 conv */
    case ARCH_FAM_WRN: return 64 * w;
    case ARCH_FAM_RESNEXT_CIFAR: return 4 * w * g > 1024 ? 4 * w * g : 1024;
    case ARCH_FAM_MOBILENET_V2: return 1280 * (w > 1 ? w : 1);          /* features.18 */
    default: return 512;
    }
}

enum { ARCH_MAX_CHANNELS = 16384 };

/* NULL when model.width / model.groups / model.dropout (0, 0, < 0: not given) suit
 * architecture a; else writes the problem, naming the key and the fix, to buf and returns
 * it. Bounds keep the network buildable (at most ARCH_MAX_CHANNELS channels a layer). */
static inline const char *arch_keys_problem(const arch_info_t *a, double width, int groups,
                                            double dropout, char *buf, size_t cap) {
    bool mobile = a->family == ARCH_FAM_MOBILENET_V2;
    double w = width != 0 ? width : a->width;
    int g = groups != 0 ? groups : (a->groups ? a->groups : 1);
    if (width != 0 && a->width == 0)
        snprintf(buf, cap, "model.width: %s has no width setting (model.width applies to "
                 "wrn*, wide_resnet*, resnext* and mobilenet_v2); remove the key", a->name);
    else if (width != 0 && !mobile && (width != floor(width) || width < 1))
        snprintf(buf, cap, "model.width: %g: %s's width is %s, a whole number >= 1 (default %g)",
                 width, a->name, arch_width_meaning(a), a->width);
    else if (width != 0 && mobile && (width < 0.05 || width > 4))
        snprintf(buf, cap, "model.width: %g: mobilenet_v2's width multiplier must be in "
                 "[0.05, 4] (torchvision's pretrained ones: 0.35 .. 1.4; default 1.0)", width);
    else if (groups != 0 && a->groups == 0)
        snprintf(buf, cap, "model.groups: %s has no grouped convolutions (model.groups is the "
                 "cardinality of resnext*); remove the key, or use a resnext arch", a->name);
    else if (arch_widest(a, w, g) > ARCH_MAX_CHANNELS)
        snprintf(buf, cap, "model.width %g%s makes %s's widest layer %.0f channels; at most %d "
                 "(lower model.width%s)", w, a->groups ? " x model.groups" : "", a->name,
                 arch_widest(a, w, g), ARCH_MAX_CHANNELS, a->groups ? " or model.groups" : "");
    else if (dropout >= 0 && a->dropout < 0)
        snprintf(buf, cap, "model.dropout: %s has no dropout layer (model.dropout applies to "
                 "wrn*, vgg*_bn and mobilenet_v2); remove the key", a->name);
    else
        return NULL;
    return buf;
}

#endif
