/* export.h: `runner export` — a run's checkpoint as torchvision-named safetensors.
 *
 * The file holds every parameter and BN buffer with torchvision's names and shapes (OIHW
 * conv weights), F32, and num_batches_tracked as I64, so that
 *   model.load_state_dict(safetensors.torch.load_file(path))
 * works on torchvision's model: with the ImageNet stem (variant), torchvision.models.<arch>(
 * num_classes=...) itself (resnet*, wide_resnet*, resnext*, vgg*_bn, mobilenet_v2; for
 * 1-channel data with the first conv taking 1 channel); a ResNet with the CIFAR stem, its
 * variant with conv1 3x3 stride 1 and maxpool Identity; the other architectures and CIFAR
 * variants, the reference definitions scripts/torchvision_model.py writes out.
 * Metadata records the architecture, stem, classes, run directory, step, runner commit and
 * which weights ("weights": "trained" or "ema").
 */
#ifndef RUNNER_EXPORT_H
#define RUNNER_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "util/err.h"

/* What was exported, for the command's output: the facts a user needs to build the
 * matching model (also in the file's __metadata__, see export_run). */
typedef struct export_info {
    char arch[32];
    char stem[16];           /* "cifar" (3x3 conv, no max-pool) until model.stem exists */
    char checkpoint[64];     /* the file exported, e.g. "best.ckpt" */
    int in_channels, num_classes, in_h, in_w;
    double width;            /* model.width / groups / dropout as built (arch_resolve'd) */
    int groups;
    double dropout;
    long long step;
    int n_norm;              /* entries of mean/std (0: not recorded) */
    double mean[4], std[4];
} export_info_t;

/* which: NULL or "last", "best", or a checkpoint path. output: NULL = RUN_DIR/model.safetensors
 * (RUN_DIR/model_ema.safetensors with ema); an existing directory gets that name inside it;
 * a file in a folder that does not exist is ERR_INPUT naming the folder (checked before
 * anything is read: the folder is not created, so a mistyped path fails loudly). ema: the EMA weights (train.ema) instead of the
 * trained ones (sections ema.params / ema.buffers; a checkpoint without them is ERR_INPUT
 * naming the key to set). The path written is copied to out_path and what it holds to info
 * (may be NULL).
 * __metadata__ (all strings, as safetensors wants): format "pt", arch, stem,
 * in_channels, num_classes, input_size ("HxW"), mean and std (JSON lists, the
 * normalisation the model was trained with), class_names (a JSON list), dataset, step,
 * run_dir, runner_commit, weights ("trained" | "ema"); and width, groups, dropout where the
 * architecture has them (model.width / model.groups / model.dropout as built). */
int export_run(const char *run_dir, const char *which, const char *output, bool ema, char *out_path,
               size_t len, export_info_t *info, err_t *e);

/* Prints how to build the matching torchvision model and load path into it: Python that
 * uses the safetensors package when it is importable and else the standard-library reader
 * of scripts/torchvision_model.py (absolute path of the source tree the binary was built
 * from), then the same through torchvision_model.load (the only form for what
 * torchvision's constructors do not build as exported: the He et al. CIFAR ResNets, WRN,
 * PreAct, ResNeXt-29, the CIFAR variants of VGG and MobileNetV2, a non-default width).
 * For a model with other than 3 input channels it says first that the first conv must
 * have that many. */
void export_print_usage(const export_info_t *info, const char *path, FILE *f);

#endif
