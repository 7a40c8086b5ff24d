/* arch.c: model.arch name -> family builder (arch.h), option defaults and checks, the
 * variant's description for the plan. The architectures themselves are rows of
 * arch_table.h; the builders live one family per file beside this one. */
#include "model/arch/arch.h"

#include <stdio.h>
#include <string.h>

typedef net_t *(*arch_builder_t)(const arch_info_t *a, const arch_opts_t *o, err_t *e);

/* One builder per family, indexed by arch_family_t. */
static const arch_builder_t BUILDERS[ARCH_FAM_COUNT] = {
    [ARCH_FAM_RESNET] = arch_build_resnet,
    [ARCH_FAM_RESNET_CIFAR] = arch_build_resnet_cifar,
    [ARCH_FAM_WRN] = arch_build_wrn,
    [ARCH_FAM_PREACT] = arch_build_preact,
    [ARCH_FAM_RESNEXT_CIFAR] = arch_build_resnext_cifar,
    [ARCH_FAM_VGG] = arch_build_vgg,
    [ARCH_FAM_MOBILENET_V2] = arch_build_mobilenet_v2,
};
_Static_assert(ARCH_FAM_COUNT == 7, "one builder per family");

const char *arch_stem_name(arch_stem_t stem) { return stem == ARCH_STEM_IMAGENET ? "imagenet" : "cifar"; }

const char *arch_stem_text(const char *arch, arch_stem_t stem) {
    const arch_info_t *a = arch_info(arch);
    bool imagenet = stem == ARCH_STEM_IMAGENET;
    switch (a ? a->family : ARCH_FAM_RESNET) {
    case ARCH_FAM_VGG:
        return imagenet ? "imagenet: torchvision's 7x7 adaptive average pool + 4096-wide classifier"
                        : "cifar: global average pool + 512-wide classifier";
    case ARCH_FAM_MOBILENET_V2:
        return imagenet ? "imagenet: torchvision's, stride-2 conv1 and second stage (output stride 32)"
                        : "cifar: stride-1 conv1 and second stage (output stride 8)";
    default:
        return imagenet ? "imagenet: conv 7x7/2 + max-pool 3x3/2" : "cifar: conv 3x3/1, no max-pool";
    }
}

const char *arch_head(const char *arch) {
    const arch_info_t *a = arch_info(arch);
    switch (a ? a->family : ARCH_FAM_RESNET) {
    case ARCH_FAM_PREACT: return "linear";
    case ARCH_FAM_RESNEXT_CIFAR: return "classifier";
    case ARCH_FAM_VGG: return "classifier.6";
    case ARCH_FAM_MOBILENET_V2: return "classifier.1";
    default: return "fc";
    }
}

bool arch_valid(const char *arch) { return arch_info(arch) != NULL; }

const char *arch_list(void) { return ARCH_NAME_LIST; }

int arch_resolve(const char *arch, const arch_opts_t *o, arch_opts_t *out, err_t *e) {
    const arch_info_t *a = arch_info(arch);
    if (!a)
        return err_set(e, ERR_INPUT, "model.arch: unknown architecture '%s'; valid: %s", arch ? arch : "",
                       arch_list());
    if (o->num_classes < 1 || o->num_classes > 1000000)
        return err_set(e, ERR_INPUT, "model.num_classes: %d out of range [1, 1000000]", o->num_classes);
    if (o->stem == ARCH_STEM_IMAGENET && !a->imagenet)
        return err_set(e, ERR_INPUT, "model.stem: imagenet: %s has only the CIFAR variant (torchvision "
                       "does not ship it); use model.stem: cifar (or auto)", a->name);
    if (o->dropout >= 1)
        return err_set(e, ERR_INPUT, "model.dropout: %g: a probability below 1", o->dropout);
    char why[400];
    if (arch_keys_problem(a, o->width, o->groups, o->dropout, why, sizeof why))
        return err_set(e, ERR_INPUT, "%s", why);
    *out = *o;
    out->width = o->width != 0 ? o->width : a->width;
    out->groups = o->groups != 0 ? o->groups : a->groups;
    out->dropout = a->dropout < 0 ? -1 : (o->dropout >= 0 ? o->dropout : a->dropout);
    return 0;
}

net_t *arch_build(const char *arch, const arch_opts_t *o, err_t *e) {
    arch_opts_t r;
    if (arch_resolve(arch, o, &r, e)) return NULL;
    const arch_info_t *a = arch_info(arch);
    return BUILDERS[a->family](a, &r, e);
}

int arch_min_input(const net_t *n) {
    for (int s = 1; s <= 1024; s++)
        if (net_activation_bytes(n, 1, s, s, 4) > 0) return s;
    return 0;
}
