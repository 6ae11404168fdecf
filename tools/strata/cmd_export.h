// `strata export`'s work as a function, so `strata train --export` runs the same code: a
// checkpoint consolidated into a Hugging Face Llama directory (config.json + safetensors).
#pragma once

#include <string>

#include "core/status.h"
#include "engine/checkpoint/checkpoint.h"

namespace strata::cli {

// Checks that the checkpoint's config.json is a Llama config whose parameter count matches the
// manifest's (InvalidArgument naming both counts), then ExportCheckpoint. Returns a one-line
// summary ("exported global_step6 (step 6, 1.0M params) to OUT as fp32: model.safetensors").
Result<std::string> ExportLlamaCheckpoint(const std::string& ckpt_dir, const std::string& out_dir,
                                          const CheckpointExportOptions& options);

}  // namespace strata::cli
