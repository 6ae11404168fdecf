// ParamStore: where ZeRO stage 3's compute-dtype parameter shards live between uses, and how a
// gather reaches them.
//
//   Tier::kDevice  one flat device array (zero_optimization.offload_param.device = none)
//   Tier::kCpu     one flat pinned host array (offload_param.device = cpu)
//   Tier::kNvme    offload_param.device = nvme: one shard per parameter on NVMe through
//                  swap/ParamSwapper, read into `buffer_count` x `buffer_size` pinned buffers
//                  just in time (`max_in_cpu` elements stay in CPU memory); param_store_nvme.cc
//
// A gather of parameter i (ZeroHooks, the ParamCoordinator) follows one protocol on every tier:
//   Prefetch({i, ...})   optional, early: starts NVMe reads and returns at once (no-op in memory)
//   Acquire(i)           the shard's bytes (slices()[i].shard_numel elements of dtype), waiting
//                        for its read (started here if no Prefetch did); on_host() says whether
//                        a copy from it is host-to-device or device-to-device
//   ... the copy / all-gather that reads it is enqueued on `stream` ...
//   Done(i, stream)      the shard's buffer may be reused once `stream` passes this point
// Acquire/Done nest like a count: a shard acquired twice is done after two Done calls.
//
// With a fence set (set_fence: deferred updates), Prefetch skips the shards still pending and
// Acquire of one fails with Internal: the caller waits for it (ParamFence::Await) first.
//
// Writes — the optimizer's updated compute-dtype values after a step, the rounded master after
// initialisation or a checkpoint load — go through Write (a flat range from host memory). The
// in-memory tiers also expose flat(), so an optimizer can write them in place.
//
// Thread safety: one thread (the engine's) drives it; the NVMe tier's reads run on the aio
// threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "aio/aio_handle.h"
#include "core/dtype.h"
#include "core/status.h"
#include "engine/base/partition.h"
#include "engine/base/step_breakdown.h"
#include "engine/config/config.h"
#include "engine/zero/store/param_fence.h"
#include "offload/device/api/device.h"
#include "offload/pinned_pool.h"
#include "offload/tier.h"
#include "offload/tier_budget.h"
#include "swap/param_swapper.h"

namespace strata {

struct ParamStoreOptions {
  Tier tier = Tier::kDevice;
  Device* device = nullptr;                 // the engine's device (kDevice memory, DMA pinning)
  const PartitionLayout* layout = nullptr;  // must outlive the store
  DType dtype = DType::kFloat32;            // compute dtype
  bool pin_memory = true;                   // kCpu / kNvme buffers
  TierBudget* budget = nullptr;             // optional: charged per tier
  // kNvme: offload_param's nvme_path (one or several, striped), buffer_count, buffer_size,
  // max_in_cpu, plus strata.swap_checksums and the rank.
  ParamSwapperOptions swapper;
  AioHandle* aio = nullptr;  // kNvme: optional shared handle (must outlive the store)
  AioOptions aio_options;    // kNvme: the handle made when `aio` is null
};

// What Acquire hands a gather.
struct ShardView {
  const void* data = nullptr;  // shard_numel elements of the compute dtype
  bool on_host = false;        // true: host memory (copy H2D); false: device memory
};

class ParamStore {
 public:
  // Allocates the tier's storage, zeroed. OutOfMemory naming the tier and bytes; kNvme reserves
  // the swap space (a full disk fails here).
  static Result<std::unique_ptr<ParamStore>> Create(const ParamStoreOptions& options);
  virtual ~ParamStore() = default;

  Tier tier() const { return options_.tier; }
  const ParamStoreOptions& options() const { return options_; }
  // kDevice / kCpu: the flat partition array (layout order, partition_numel elements), device
  // or pinned host memory. kNvme: nullptr (shards are reached only through Acquire).
  virtual void* flat() const = 0;
  bool on_host() const { return options_.tier != Tier::kDevice; }

  Status Prefetch(std::span<const size_t> params);
  Result<ShardView> Acquire(size_t param);
  virtual Status Done(size_t param, const Stream& stream) = 0;
  // Not owned; null (the default) when every shard is final.
  void set_fence(ParamFence* fence) { fence_ = fence; }
  ParamFence* fence() const { return fence_; }

  // Shards [flat_begin, flat_begin + numel) of the flat partition = src (host memory, compute
  // dtype); `src` may change once Write returns. kDevice copies H2D on `stream` and waits for it;
  // kNvme copies every parameter the range touches into its swap buffer (a parameter partly
  // covered keeps its other elements), starts the writes and returns: a later Acquire of a shard
  // waits for its write, and a write that failed fails the call that waits for it (Drain, an
  // Acquire, a Write) naming the swap file and offset. No shard may be acquired while it is
  // written.
  virtual Status Write(size_t flat_begin, const void* src, size_t numel, const Stream& stream) = 0;
  // The shards kept in CPU memory move into `flat` (the rank's flat partition in the compute
  // dtype, the caller's, alive as long as the store) at their flat offsets, so a Write whose
  // source is that same range of `flat` copies nothing (Note [Shared CPU shards] in
  // param_store_nvme.cc). Only the NVMe store keeps shards of its own: elsewhere a no-op.
  virtual Status ShareCpuFlat(void* flat) {
    (void)flat;
    return Status::Ok();
  }
  // Waits for every write Write started (checkpoint save and load call it); the first error of
  // those writes. The destructor drains too (dropping errors).
  virtual Status Drain() { return Status::Ok(); }

  // Bytes held per tier: device (kDevice's array), pinned CPU (kCpu's array, kNvme's buffers
  // and CPU-kept shards) and NVMe (the swap file).
  virtual uint64_t device_bytes() const = 0;
  virtual uint64_t cpu_bytes() const = 0;
  virtual uint64_t nvme_bytes() const = 0;
  // Bytes read from / written to NVMe so far (0 in memory).
  virtual uint64_t nvme_read_bytes() const { return 0; }
  virtual uint64_t nvme_write_bytes() const { return 0; }
  // Adds what happened since the last call to `b`: NVMe bytes read and written, time a gather
  // waited for reads (io_wait_ms). Nothing for the in-memory tiers.
  virtual void AddTo(StepBreakdown* b) { (void)b; }

 protected:
  explicit ParamStore(const ParamStoreOptions& o) : options_(o) {}
  // The tier's Prefetch / Acquire, for shards the fence does not hold back.
  virtual Status DoPrefetch(std::span<const size_t> params) = 0;
  virtual Result<ShardView> DoAcquire(size_t param) = 0;
  ParamStoreOptions options_;

 private:
  ParamFence* fence_ = nullptr;
};

// The options from a resolved config (zero_optimization.offload_param): the tier, pin_memory, and
// for nvme the paths (relative ones from the working directory, made if missing; a list
// stripes), buffer_count, buffer_size, max_in_cpu, the `aio` section and strata.swap_checksums.
// device, layout, dtype and budget are the caller's. InvalidArgument naming the key when a value
// cannot work (nvme without nvme_path, a path that cannot be made, buffer_count < 1).
Result<ParamStoreOptions> ParamStoreOptionsFromConfig(const Config& config, int rank);

// The kNvme implementation (param_store_nvme.cc; its write path in param_store_nvme_write.cc).
Result<std::unique_ptr<ParamStore>> CreateNvmeParamStore(const ParamStoreOptions& options);

}  // namespace strata
