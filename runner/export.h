/* export.h: `runner export` — a run's checkpoint as torchvision-named safetensors.
 *
 * The file holds every parameter and BN buffer with torchvision's names and shapes (OIHW
 * conv weights), F32, and num_batches_tracked as I64, so that
 *   model.load_state_dict(safetensors.torch.load_file(path))
 * works on torchvision's resnet (CIFAR variant: conv1 3x3 stride 1, maxpool Identity).
 * Metadata records the architecture, classes, run directory, step, runner commit and
 * which weights ("weights": "trained" or "ema").
 */
#ifndef RUNNER_EXPORT_H
#define RUNNER_EXPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

/* which: NULL or "last", "best", or a checkpoint path. output: NULL = RUN_DIR/model.safetensors
 * (RUN_DIR/model_ema.safetensors with ema). ema: the EMA weights (train.ema) instead of the
 * trained ones (sections ema.params / ema.buffers; a checkpoint without them is ERR_INPUT
 * naming the key to set). The path written is copied to out_path. */
int export_run(const char *run_dir, const char *which, const char *output, bool ema, char *out_path,
               size_t len, err_t *e);

#endif
