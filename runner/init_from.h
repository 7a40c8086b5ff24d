/* init_from.h: model.init_from — a run starting from a torchvision-style state dict
 * (safetensors: `runner export` output, or scripts/torchvision_weights.py's conversion of
 * a torchvision .pth), with model.init_head deciding the classifier.
 *
 * Every parameter, BN running statistic and num_batches_tracked is loaded by name and
 * shape. The classifier is fc.* (classifier.6.* for VGG, classifier.1.* for MobileNetV2,
 * linear.* for PreAct, classifier.* for ResNeXt-29: arch_head). strict: it is loaded too,
 * so a class-count mismatch is an error naming both shapes and `model.init_head: reinit`;
 * reinit: its weight / bias keep the values net_init gave them (this run's seed, the
 * architecture's init) and the file's are ignored, whatever their shape. A file with
 * another stem or variant (conv1 7x7 into a CIFAR-stem net or the reverse; VGG's 25088-wide
 * classifier.0 into the 512-wide CIFAR head), another architecture (its metadata) or
 * other input channels is refused with a message naming the key to change. All of these
 * are ERR_INPUT.
 */
#ifndef RUNNER_INIT_FROM_H
#define RUNNER_INIT_FROM_H

#include <stdbool.h>

#include "model/net.h"
#include "model/arch/arch.h"
#include "util/err.h"

typedef struct init_from_opts {
    const char *path;           /* model.init_from */
    bool reinit_head;           /* model.init_head: reinit */
    const char *arch;           /* model.arch, for messages and the metadata check */
    arch_stem_t stem;         /* the stem the net was built with */
    const char *stem_reason;    /* why (the plan's), for the stem message; may be NULL */
} init_from_opts_t;

/* Loads o->path into the bound, initialised net n. */
int init_from_load(net_t *n, const init_from_opts_t *o, err_t *e);

/* Every check of init_from_load, on a net that need not be bound (the plan's), so that a
 * bad file stops the run before its directory is created. */
int init_from_check(const net_t *n, const init_from_opts_t *o, err_t *e);

#endif
