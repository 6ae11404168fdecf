// One size of bench/overlap: the overlapped and the serial schedule of the same Llama, state on
// NVMe, and the bound's parts, all measured interleaved in one run (main.cc has the whole story).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "models/llama/config/llama_config.h"

namespace strata::bench {

struct SizeOptions {
  std::string name;  // "balanced", "io", "compute"
  llama::LlamaConfig model;
  int64_t batch = 1, seq = 64;
  int64_t rounds = 3;
  int64_t steps = 2;  // timed consecutive steps per engine per round, after an untimed one
  double link_gbps = 3.0;
  double state_over_device = 10.0;   // params + optimizer state over the emulated device memory
  int64_t sub_group_size = 4000000;  // elements
  // gradient_clipping (0: none). A clip that triggers makes the overlapped step speculative: it
  // rolls back and runs serially (engine/overlap/step_overlap.h), so the default measures the exact
  // case.
  double clip = 0.0;
  // strata.swap_checksums (XXH3 per block on every swap write and read; costs CPU the bound's
  // CPU term does not count). Off only to measure that cost.
  bool checksums = true;
  // strata.deferred_updates of the overlapped schedule (false only to measure what it buys).
  bool deferred_updates = true;
  // strata.nvme_grad_chunk (bytes; 0: no NVMe gradient region); < 0: the engine's default.
  int64_t nvme_grad_chunk = -1;
  // strata.swap_chunk_bytes (bytes of state per swap unit); < 0: the engine's default.
  int64_t swap_chunk_bytes = -1;
  std::string dir;           // swap files go under dir/<name>/{overlapped,serial}
  double memcpy_gbps = 0;    // measured once by the caller
  double checksum_gbps = 0;  // the swap checksum's speed, measured once by the caller
  bool verbose = true;       // progress lines on stderr
  std::string trace;         // strata.trace_path of the overlapped engine ("" = none)
  int64_t buffer_count = 4;  // offload_optimizer.buffer_count (pinned sub-group buffers)
  // offload_param.max_in_cpu (elements of parameters kept in CPU memory; the rest are read from
  // NVMe at each use); < 0: DeepSpeed's default (1e9: every parameter of this model).
  int64_t max_in_cpu = -1;
  // offload_param.buffer_size (elements per pinned read buffer; at least the largest parameter);
  // < 0: DeepSpeed's default (1e8, 400 MB of fp32 per buffer, page-locked at start).
  int64_t param_buffer_size = -1;
  // Bytes the bound's aio sweep writes (twice: an untimed pass, then the timed overwrite), at
  // most the bytes of the swap files it reads.
  uint64_t sweep_write_bytes = uint64_t{1} << 30;
  int64_t aio_queue_depth = 8, aio_block_size = 1 << 20;  // the `aio` section
};

// Runs the size; the JSON has the step times (every round and the medians), the bound and its
// parts, the ratios, each schedule's last breakdown and what ran (param tier, configs).
Result<nlohmann::json> RunSize(const SizeOptions& options);

}  // namespace strata::bench
