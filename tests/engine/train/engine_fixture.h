// Shared set-up for engine tests: a tiny Llama built without storage (the engine places it), a
// deterministic per-parameter initialiser, random token batches and configs from JSON text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "models/llama/model/llama_model.h"
#include "offload/device/api/device.h"

namespace strata::testing {

// normal(0, 0.02) seeded by (seed, parameter index); norms = 1. Independent of placement and
// rank, as the engine requires.
ParamInitFn TestInit(uint64_t seed);

// `batches` micro-batches of [batch, seq_len] random tokens below `vocab` (labels = inputs: the
// model shifts them).
struct TokenData {
  int64_t batch = 0, seq_len = 0;
  std::vector<std::vector<int32_t>> ids;
  nn::TokenBatch Batch(size_t i) const { return {ids[i], ids[i], batch, seq_len}; }
};
TokenData RandomTokens(uint64_t seed, size_t batches, int64_t batch, int64_t seq_len,
                       int64_t vocab);

// A DeepSpeed config: `zero` is the zero_optimization object's JSON body, `extra` more
// top-level keys (each with a trailing comma), e.g. "\"bf16\": {\"enabled\": true},".
// `optimizer_params` is the AdamW "params" object's body.
inline constexpr const char* kDefaultAdamW = "\"lr\": 0.01, \"weight_decay\": 0.1";
Config MakeConfig(int64_t micro_batch, int64_t gas, const std::string& zero,
                  const std::string& extra = "", int world_size = 1, double clip = 0.5,
                  const std::string& optimizer_params = kDefaultAdamW);

// World 1 (the local backend).
std::unique_ptr<Communicator> MakeLocalComm();

std::unique_ptr<Device> MakeHostDevice(uint64_t memory_bytes = uint64_t{512} << 20);

// A tiny Llama in `dtype` with no storage, for the engine.
// `checkpointing`: activation checkpointing (layers recompute their forward in backward).
std::unique_ptr<llama::LlamaForCausalLM> MakeTinyModel(Device* device, DType dtype,
                                                       bool tied = false,
                                                       bool checkpointing = false);

// Trains `steps` optimizer steps (gas micro-batches each) and returns every parameter's full
// fp32 master, in NamedParameters order.
std::vector<std::vector<float>> TrainAndGather(Engine& engine, const TokenData& data, int steps,
                                               int64_t gas, std::vector<float>* losses = nullptr,
                                               size_t first_batch = 0, size_t batch_stride = 1);

// True if both hold the same arrays with the same bits (per-parameter values of two runs).
bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b);

}  // namespace strata::testing
