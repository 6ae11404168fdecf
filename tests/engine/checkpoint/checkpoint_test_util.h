// Helpers shared by the checkpoint suites: an engine of the train fixture's tiny Llama for a
// placement, and the three arrays of a saved checkpoint read back per parameter.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "tests/engine/train/engine_fixture.h"

namespace strata::testing {

struct Placement {
  int stage = 0;
  const char* offload = "none";
  DType dtype = DType::kFloat32;
};

std::string PlacementName(const Placement& p);

// Everything one engine needs, destroyed engine first.
struct EngineRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
};

// The tiny Llama on a placement, gas 2, micro batch 2, initialised by TestInit(init_seed);
// `optimizer_params` is the AdamW "params" body (MakeConfig's).
EngineRun MakeRun(Communicator& comm, const Placement& p, uint64_t init_seed, int64_t gas = 2,
                  int64_t micro_batch = 2, double clip = 0.5,
                  const std::string& optimizer_params = kDefaultAdamW);

// Every parameter's master, exp_avg and exp_avg_sq from a checkpoint (all three concatenated
// per parameter), for bitwise comparisons of whole optimizer states.
std::vector<std::vector<float>> ReadAllArrays(const std::string& dir, const std::string& tag);

}  // namespace strata::testing
