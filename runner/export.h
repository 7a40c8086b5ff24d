/* export.h: `runner export` — a run's checkpoint as torchvision-named safetensors.
 *
 * The file holds every parameter and BN buffer with torchvision's names and shapes (OIHW
 * conv weights), F32, and num_batches_tracked as I64, so that
 *   model.load_state_dict(safetensors.torch.load_file(path))
 * works on torchvision's resnet: with the ImageNet stem, torchvision.models.resnetNN(
 * num_classes=...) itself (for 1-channel data with conv1 taking 1 channel); with the
 * CIFAR stem, its variant with conv1 3x3 stride 1 and maxpool Identity.
 * Metadata records the architecture, stem, classes, run directory, step and runner commit.
 */
#ifndef RUNNER_EXPORT_H
#define RUNNER_EXPORT_H

#include <stddef.h>

#include "util/err.h"

/* which: NULL or "last", "best", or a checkpoint path. output: NULL = RUN_DIR/model.safetensors.
 * The path written is copied to out_path. */
int export_run(const char *run_dir, const char *which, const char *output, char *out_path,
               size_t len, err_t *e);

#endif
