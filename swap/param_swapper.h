// ParamSwapper: compute-dtype parameter shards kept on NVMe (`offload_param.device = nvme`) and
// brought into a fixed set of pinned buffers just in time.
//
// `buffer_count` x `buffer_size` elements of pinned memory are allocated once; a swapped-in
// parameter takes a 4 KiB-aligned range of it (small ones share a buffer; a parameter larger than
// one buffer may span several). The first `max_in_cpu` elements registered stay in CPU memory and
// never touch NVMe. A buffer range is reused only when no I/O on it is in flight: Release()
// waits for the parameter's outstanding read or write first.
//
// Thread safety: all methods may be called concurrently (e.g. a prefetch thread swapping in while
// the compute thread releases); operations on the same parameter are ordered by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "aio/aio_handle.h"
#include "offload/pinned_pool.h"
#include "offload/tier_budget.h"
#include "swap/buffer_arena.h"
#include "swap/swap_space.h"
#include "swap/swapper_options.h"

namespace strata {

// The shared fields (nvme_paths, pin_memory, checksums, rank, budget, device) come
// from SwapperOptions.
struct ParamSwapperOptions : SwapperOptions {
  size_t element_bytes = 2;  // compute dtype: 2 (fp16/bf16) or 4
  size_t buffer_count = 5;
  size_t buffer_size = 100'000'000;   // elements per buffer
  size_t max_in_cpu = 1'000'000'000;  // elements kept in CPU memory instead of NVMe
};

using ParamId = int64_t;

struct ParamSwapperStats {
  uint64_t bytes_read = 0, bytes_written = 0;
  size_t buffer_bytes_used = 0, buffer_bytes_peak = 0, buffer_bytes_capacity = 0;
  size_t params_on_nvme = 0, params_in_cpu = 0;
};

class ParamSwapper {
 public:
  static Result<std::unique_ptr<ParamSwapper>> Create(const ParamSwapperOptions& options,
                                                      AioHandle* aio);
  ~ParamSwapper();

  // Declares a parameter shard of `numel` elements. It lives in CPU memory while the running
  // total stays within max_in_cpu, else on NVMe (space reserved now: a full disk fails here).
  Status Register(ParamId id, size_t numel);
  bool on_nvme(ParamId id) const;

  // Gives `id` a buffer without reading it (its first contents come from the caller).
  Result<std::span<uint8_t>> Allocate(ParamId id);
  // Starts reading the given NVMe parameters into buffers; returns at once. Already resident or
  // CPU-kept parameters are skipped. OutOfMemory when the buffers cannot hold them (nothing is
  // started then).
  Status SwapIn(std::span<const ParamId> ids);
  // Waits until the given parameters are in their buffers (checksums verified).
  Status WaitIn(std::span<const ParamId> ids);
  // Waits for the given parameters' writes in flight (SwapOut); their buffers stay allocated and
  // hold what was written, so Data() serves them without a read. The first error of those writes
  // is returned; a parameter whose write failed keeps its buffer (the only copy), as in Release.
  Status WaitOut(std::span<const ParamId> ids);
  // The parameter's bytes: resident NVMe parameters (after WaitIn) or CPU-kept ones.
  Result<std::span<uint8_t>> Data(ParamId id);
  // Moves CPU-kept parameter `id` into `storage` (numel x element_bytes, the caller's, alive and
  // unmoved while the swapper lives) and frees the swapper's own copy: a caller whose flat array
  // holds the parameters anyway stops keeping them twice. FailedPrecondition if `id` is on NVMe.
  Status AdoptCpuStorage(ParamId id, uint8_t* storage);
  // Reads what NVMe holds of parameter `id` (its last completed write, checksums verified) into
  // `dst` (the caller's: 4 KiB aligned, numel x element_bytes rounded up to 4 KiB), whatever its
  // buffer holds now: a caller that rewrote part of the buffer takes the rest from there.
  // FailedPrecondition for a CPU-kept parameter or one never written.
  Status ReadNvmeCopy(ParamId id, uint8_t* dst);
  // Starts writing the given resident parameters back to NVMe; buffers stay allocated.
  Status SwapOut(std::span<const ParamId> ids);
  // Waits for each parameter's outstanding I/O, then frees its buffer (without writing it: use
  // SwapOut first to keep changes). The first error of that I/O is returned. If a parameter's
  // last swap-out failed, its buffer is kept (it holds the only copy) and Release returns
  // FailedPrecondition until a SwapOut succeeds.
  Status Release(std::span<const ParamId> ids);

  ParamSwapperStats stats() const;

 private:
  enum class State { kCpu, kOnNvme, kReading, kResident, kWriting };
  struct Param {
    size_t numel = 0;
    State state = State::kOnNvme;
    SwapId swap_id = 0;
    uint8_t* buf = nullptr;  // swap buffer range, or CPU storage for kCpu
    SwapFuture io;
    uint64_t io_gen = 0;       // bumped per I/O issued, so a waiter knows whose I/O it finished
    bool unsaved = false;      // the last swap-out failed: the buffer holds the only copy
    std::vector<uint8_t> cpu;  // kCpu storage
  };

  ParamSwapper(const ParamSwapperOptions& o) : options_(o) {}
  Result<Param*> Find(ParamId id);
  Status FinishIo(ParamId id, Param& p, std::unique_lock<std::mutex>& lock);
  // WaitIn / WaitOut: finishes the I/O of each id in state `io`; `need_swapped_in`: an id still
  // only on NVMe is FailedPrecondition.
  Status WaitFor(std::span<const ParamId> ids, State io, bool need_swapped_in);

  ParamSwapperOptions options_;
  std::unique_ptr<SwapSpace> space_;
  std::unique_ptr<PinnedPool> pool_;
  std::vector<PinnedBuffer> leases_;  // every buffer of the pool, held for the swapper's life
  std::unique_ptr<BufferArena> arena_;
  mutable std::mutex mu_;
  std::unordered_map<ParamId, Param> params_;
  size_t cpu_elements_ = 0;
  ParamSwapperStats stats_;
};

}  // namespace strata
