// `strata generate`'s placement of the weights: the config (--config, DeepSpeed JSON; none: the
// defaults) makes the device (strata.device_memory / link speed for the emulated one) and says
// where the weights live — zero_optimization.offload_param none with stage < 3: the model's own
// device arrays; otherwise ZeRO-Inference (engine/zero_inference.h) on the device, pinned CPU or
// NVMe, streamed to the device module by module. Weights are stored in bf16/fp16 when the config
// enables them, else fp32.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "engine/config/config.h"
#include "engine/zero_inference.h"
#include "models/infer/cached_lm.h"
#include "models/llama/model/llama_model.h"
#include "offload/device/api/device.h"
#include "tools/strata/generate/generate_weights.h"

namespace strata::cli {

struct GeneratePlacement {
  Config config;
  std::unique_ptr<Device> device;
  Stream stream;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<ZeroInference> zero;  // null: the model holds its weights
  std::string where;                    // "on the device (fp32, 12.3 MiB)", ...
  ~GeneratePlacement();
  // Connects `lm`'s passes to ZeRO-Inference (no-op when the model holds its weights).
  void Attach(infer::CachedLm& lm);
};

// `config_path` empty: the defaults. `plan` is checked against the device's memory before any
// weight moves (OutOfMemory naming the tier and what to change). On failure *exit_code is 2 for
// bad input, 1 otherwise.
Result<std::unique_ptr<GeneratePlacement>> PlaceForGenerate(const GenerateWeights& weights,
                                                            const std::string& config_path,
                                                            const infer::KvCachePlan& plan,
                                                            int* exit_code);

}  // namespace strata::cli
