// One size of bench/scale, run in a child process of its own so its peak RSS is its own: a Llama
// trained a few steps with parameters and optimizer state on NVMe under the CPU budget, then the
// parts of the step's bound measured alone in the same process (Note [Scale bound] in
// size_run.cc). Prints one JSON object.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "models/llama/config/llama_config.h"

namespace strata::bench {

struct ScaleOptions {
  std::string dir = "scale-swap";  // the swap directory (each size its own sub-directory)
  std::string dtype = "bf16";
  int64_t steps = 3, seq = 16, threads = 2;
  int64_t sub_group_size = 50000000;
  // What a GPU's share looks like (bench/scale's old defaults, kept): parameters gathered at
  // once, the reduce bucket, bf16 shards kept in RAM, parameter / optimizer swap buffers.
  int64_t max_live = 100000000, bucket = 20000000, max_in_cpu = 50000000;
  int64_t param_buffers = 4, opt_buffers = 8;
  // offload_param.buffer_size: the largest parameter (ScaleModel's embedding), set per size.
  int64_t param_buffer_size = 0;
  uint64_t cpu_budget = uint64_t{6} << 30;
  double link_gbps = 25.0;
  // Bytes of the swap files the aio sweep reads for the bound (and at most writes).
  uint64_t sweep_bytes = uint64_t{2} << 30;
  // strata.trace_path of the engine ("": none); the parent gives each size's child
  // <--trace>.<layers>.json.
  std::string trace;
};

// The Llama of `layers` decoder layers at bench/scale's width (TinyLlama's: hidden 2048, MLP
// 5632, 32 heads, 4 KV heads, vocab 32000; `quick`: hidden 64, MLP 128, 4 heads, vocab 512).
llama::LlamaConfig ScaleModel(int64_t layers, bool quick);

// The DeepSpeed config of a size: stage 3, params and optimizer on NVMe under `dir`.
std::string ScaleConfigJson(const ScaleOptions& o, const std::string& dir, uint64_t device_bytes);

// Runs one size in this process and returns its JSON (see size_run.cc for the keys); an engine
// that refuses the size under the budget comes back as {"refused": message}.
nlohmann::json RunScaleSize(const ScaleOptions& o, const llama::LlamaConfig& model,
                            const std::string& dir);

}  // namespace strata::bench
