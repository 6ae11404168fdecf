// Shared set-up of the overlapped-step tests (world 1 and the mpirun suite): one engine run of the
// tiny Llama with strata.overlap_step on or off, and what it ends with.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "nn/modules/layers/module.h"
#include "tests/engine/train/engine_fixture.h"

namespace strata::testing {

struct OverlapCase {
  int stage = 2;
  const char* opt = "cpu";     // offload_optimizer.device: cpu or nvme
  const char* param = "none";  // offload_param.device (stage 3)
  DType dtype = DType::kFloat32;
  double clip = 0;  // gradient_clipping (0: none)
  bool overlap_comm = false;
  int64_t gas = 2;
  uint64_t chunk_bytes = 0;  // strata.swap_chunk_bytes (0: the key is absent)
  bool deferred = true;      // strata.deferred_updates (with overlap_step)
  // stage3_param_persistence_threshold: 200 keeps the norms persistent; DeepSpeed's default 1e5
  // makes every parameter of the tiny model persistent, the embedding among them.
  int64_t persistence = 200;
};

std::string OverlapCaseName(const OverlapCase& c);

// gradient_clipping values of the cases: far below the tiny model's gradient norm (the clip
// triggers every step) and far above it (it never does).
inline constexpr double kClipTriggers = 1e-4;
inline constexpr double kClipIdle = 1e4;
// The clip cases are what their names say: each norm above kClipTriggers / below kClipIdle.
void ExpectClipAsNamed(const OverlapCase& c, const std::vector<double>& norms);
inline void PrintTo(const OverlapCase& c, std::ostream* os) { *os << OverlapCaseName(c); }

struct OverlapRun {
  std::vector<std::vector<float>> masters;
  std::vector<float> losses;
  std::vector<double> norms;      // last_grad_norm after each step
  int64_t overlapped = 0;         // Engine::overlapped_sub_groups()
  int64_t param_write_backs = 0;  // Engine::early_param_write_backs()
  int64_t deferred = 0;           // Engine::deferred_sub_groups()
  int64_t skipped = 0;
  int64_t sub_groups = 0;  // how many sub-groups the partition has
};

// Trains `steps` steps of `c` on `comm` (rank r takes micro-batches r, r + world, ...) with
// strata.overlap_step = `overlap`. NVMe state goes under `nvme_dir`. `hooks` (optional) is added
// to `hook_module(model)` for the run. Failures are reported through gtest.
using ModulePicker = nn::Module* (*)(llama::LlamaForCausalLM& model);
struct OverlapRunOptions {
  int steps = 3;
  std::string nvme_dir;
  nn::ModuleHooks* hooks = nullptr;
  ModulePicker hook_module = nullptr;
  // Called between steps (e.g. to arm an injector for step s).
  void (*before_step)(int step, void* arg) = nullptr;
  void* arg = nullptr;
  // False: the masters are gathered once, after the last step (a gather of the master waits for
  // deferred updates, so gathering after every step would run them before each forward).
  bool gather_each_step = true;
};
OverlapRun RunOverlapCase(Communicator& comm, const OverlapCase& c, bool overlap,
                          const OverlapRunOptions& options);

}  // namespace strata::testing
