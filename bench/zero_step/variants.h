// zero_step's contestants: one training step of the same Llama on the same batch, either as a
// bare loop over nn/ (forward, backward, CPU AdamW over fp32 master weights, no engine) or
// through strata::Engine under a DeepSpeed config. Each owns its model and buffers on a shared
// device, runs one step per RunStep call and reports what it could time of the step's parts.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench/zero_step/counting_device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "engine/comm/communicator.h"
#include "engine/engine.h"
#include "models/llama/config/llama_config.h"
#include "nn/modules/lm/causal_lm.h"
#include "offload/device/api/device.h"

namespace strata::bench {

// Wall times of one step, in seconds. What a part covers depends on the variant (see main.cc's
// table notes); -1 = not measured separately for this variant.
struct StepTimes {
  double total_s = 0;
  double forward_backward_s = 0;  // Forward + Backward + stream sync (engine: + its hooks)
  double step_s = 0;              // after backward: Adam (bare) / Engine::Step (engine)
  double adam_s = -1;             // the CpuOptimizer call alone (bare only)
  double ops_s = 0;               // nn op time inside forward + backward (nn::OpTimes)
  double collectives_s = 0;       // time the communicator's calls took on their stream
  int64_t collective_calls = 0;
  CopyCounts copies;  // the step's copies (filled by the caller that owns the CountingDevice)
  float loss = 0;
};

// Initial fp32 values of a parameter: normal(0, 0.02) seeded by (seed, parameter index), norms 1
// — the same for every variant, whatever the placement.
ParamInitFn BenchInit(uint64_t seed);

class Variant {
 public:
  virtual ~Variant() = default;
  virtual const std::string& name() const = 0;
  // One optimizer step on `batch` (forward, backward, update), synchronous.
  virtual Result<StepTimes> RunStep(const nn::TokenBatch& batch) = 0;
  // Every parameter's fp32 master value, in NamedParameters order.
  virtual Result<std::vector<std::vector<float>>> MasterParameters() = 0;
};

struct BareOptions {
  llama::LlamaConfig model;
  DType dtype = DType::kFloat32;  // parameter (compute) dtype; fp32 gradients and master
  Hyperparams adam;               // AdamW, constant LR
  uint64_t seed = 1;
};
Result<std::unique_ptr<Variant>> CreateBareLoop(Device& device, const BareOptions& options);

struct EngineVariantOptions {
  std::string name;
  llama::LlamaConfig model;
  DType dtype = DType::kFloat32;  // must match the config's bf16/fp16
  std::string config_json;        // a DeepSpeed config
  uint64_t seed = 1;
};
// The error of Engine::Initialize is returned as is (e.g. Unimplemented for stage 3 until it
// is built), so the caller can fall back.
Result<std::unique_ptr<Variant>> CreateEngineVariant(Device& device,
                                                     const EngineVariantOptions& options);

}  // namespace strata::bench
