// Strata's own `strata` section (engine choice, emulated device, trace output, checksums...) and
// DeepSpeed's top-level `aio` section. Both aio parts are read by aio/aio_config.h (one parser for
// the aio keys); this file adds DeepSpeed's string coercions, positions and all-errors-at-once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "aio/aio_options.h"
#include "engine/comm/registry.h"  // CommBackend
#include "engine/config/reader/section_reader.h"

namespace strata {

enum class DeviceChoice { kAuto, kHost, kCuda };

std::string_view DeviceChoiceName(DeviceChoice d);  // "auto", "host", "cuda"

struct StrataConfig {
  // Checksum swapped tensors and verify them on read (a mismatch is DataLoss).
  bool swap_checksums = true;
  // Top-level keys that are not DeepSpeed keys: a warning ("warn") or an error ("error").
  bool unknown_keys_error = false;
  // auto: nccl with CUDA devices and more than one rank, mpi for several host ranks, else local.
  CommBackend comm_backend = CommBackend::kAuto;
  // A collective that takes longer fails with Aborted.
  double comm_timeout_s = 300.0;
  // auto: cuda when built and a GPU is present, else the host-emulated device.
  DeviceChoice device = DeviceChoice::kAuto;
  // Capacity of the host-emulated device (HostDeviceOptions::memory_bytes' default).
  uint64_t device_memory_bytes = uint64_t{1} << 30;
  // Emulated host<->device link speed in GB/s; 0 = unthrottled.
  double link_gbps = 0.0;
  // Chrome trace of the run's spans; "" = off.
  std::string trace_path;
  // Start offloaded sub-groups' optimizer steps during the boundary backward
  // (engine/overlap/step_overlap.h).
  bool overlap_step = true;
  // Stage 3 with overlap_step and the shards in CPU memory or on NVMe: the sub-groups the step
  // has left after the backward are updated during the next forward, each gather waiting for its
  // own (Note [Deferred updates] in engine/overlap/step_overlap_defer.cc).
  bool deferred_updates = true;
  // offload_optimizer nvme at stages 2-3: the fp32 gradients go to an NVMe region in chunks of
  // this many bytes (engine/nvme/grad_region.h; a multiple of 16 KiB); 0 keeps the whole
  // gradient partition in pinned CPU memory.
  uint64_t nvme_grad_chunk_bytes = uint64_t{16} << 20;
  // Cap on page-locked host memory in bytes; 0 = unlimited.
  uint64_t pinned_memory_limit_bytes = 0;
  // strata.cpu_memory: the CPU memory (pinned + pageable) one rank plans within; 0 = no budget.
  // "auto" is resolved when the config is read (engine/config/strata/cpu_memory.h).
  uint64_t cpu_memory_bytes = 0;
  // Not a key: set once the planner chose the "auto" sizing keys within cpu_memory
  // (engine/plan/cpu_budget.h), so a second pass (the engine after `strata train`) keeps them.
  bool sizes_within_budget = false;
  // Tokens per chunk of the LM head + loss (nn/modules/lm/lm_head_loss.h): 0 = all tokens at once,
  // kLmHeadChunkAuto = "auto" (whole while the logits are at most 64 MiB, else chunks whose
  // logits are about the size of the hidden states, at least 256 tokens).
  static constexpr int64_t kLmHeadChunkAuto = -1;
  int64_t lm_head_chunk = kLmHeadChunkAuto;
  // Bytes of fp32 master + exp_avg + exp_avg_sq (12 B an element) the NVMe optimizer moves per
  // swap unit (engine/nvme/optimizer_nvme.h: Note [Chunks]): a sub-group larger than this is
  // stepped in chunks of this size, so the pinned swap buffers are buffer_count x this whatever
  // sub_group_size is. "auto" (swap_chunk_auto, the default): the engine chooses, 32 MiB chunks
  // in the pinned bytes of buffer_count 64 MiB ones (engine/nvme/swap_chunks.h: Note [Auto swap
  // chunks]); swap_chunk_bytes is then unused.
  static constexpr uint64_t kSwapChunkMin = uint64_t{4} << 10;
  uint64_t swap_chunk_bytes = 0;
  bool swap_chunk_auto = true;
};

namespace internal {
// Reads `strata` into `out` and the strata.aio_* keys plus the top-level `aio` section into `aio`.
void ReadStrataSection(const Section& top, StrataConfig* out, AioOptions* aio);
}  // namespace internal
}  // namespace strata
