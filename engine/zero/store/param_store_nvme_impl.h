// NvmeParamStore: the ParamStore of offload_param.device = nvme (param_store.h), declared here so
// that its parts can live in files of their own: its setup, reads and lazy release in
// param_store_nvme.cc, its write-back in param_store_nvme_write.cc. Private to those two files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/zero/store/param_store.h"

namespace strata::internal {

class NvmeParamStore final : public ParamStore {
 public:
  explicit NvmeParamStore(const ParamStoreOptions& o) : ParamStore(o) {}
  ~NvmeParamStore() override;

  // param_store_nvme.cc
  Status Init();
  Status KeepCpuShards();
  void* flat() const override { return nullptr; }
  Status ShareCpuFlat(void* flat) override;
  Status DoPrefetch(std::span<const size_t> params) override;
  Result<ShardView> DoAcquire(size_t param) override;
  Status Done(size_t param, const Stream& stream) override;
  // param_store_nvme_write.cc
  Status Write(size_t flat_begin, const void* src, size_t numel, const Stream&) override;
  Status Drain() override;

  uint64_t device_bytes() const override { return 0; }
  uint64_t cpu_bytes() const override {
    return swapper_->stats().buffer_bytes_capacity + cpu_kept_bytes_;
  }
  uint64_t nvme_bytes() const override { return nvme_bytes_; }
  uint64_t nvme_read_bytes() const override { return swapper_->stats().bytes_read; }
  uint64_t nvme_write_bytes() const override { return swapper_->stats().bytes_written; }
  void AddTo(StepBreakdown* b) override;

 private:
  static constexpr uint64_t kSwapAlign = 4096;  // SwapSpace extents

  // kIdle: on NVMe only (or CPU-kept, not acquired). kPrefetched: a read issued, not acquired.
  // kAcquired: in use by gathers. kDone: in its buffer, waiting for its event (done_).
  // kWriting: a swap-out in flight (writing_). kFilling: partly written since its buffer was
  // taken, its write not started (filling_; Note [Filling a shard]).
  enum class State { kIdle, kPrefetched, kAcquired, kDone, kWriting, kFilling };
  struct Slot {
    bool registered = false;  // shard_numel > 0
    bool in_cpu = false;      // within max_in_cpu: kept in CPU memory by the swapper
    bool written = false;     // NVMe holds its bytes (an unwritten shard reads as zeros)
    State state = State::kIdle;
    int acquired = 0;
    uint64_t seq = 0;  // bumped on every kDone entry and re-acquire: stale done_ entries
    const uint8_t* data = nullptr;
    // kFilling: the element ranges written so far (sorted, disjoint), and whether the rest of the
    // buffer already holds the shard's current bytes.
    std::vector<std::pair<size_t, size_t>> filled;
    bool base_valid = false;
  };
  struct DoneEntry {
    size_t param;
    uint64_t seq;
    Event event;
  };

  // param_store_nvme.cc
  Status Check(size_t param) const;
  std::string Where(size_t param, const char* what) const;
  Status AllocateZeroed(size_t param);
  void Unprefetch(size_t param);
  Status ReleaseDone(DoneEntry& d);
  void DropDoneEntry(size_t param, bool wait = false);
  bool Live(const DoneEntry& d) const;
  bool ReclaimCompleted();
  Result<bool> MakeRoom(size_t keep);

  // Runs `fn` (a swapper call that needs buffer room) until it does not fail for lack of room.
  template <typename Fn>
  Status WithRoom(size_t param, Fn fn) {
    for (;;) {
      Status st = fn();
      if (st.code() != StatusCode::kOutOfMemory) return st;
      STRATA_ASSIGN_OR_RETURN(bool freed, MakeRoom(param));
      if (!freed) {
        return st.WithContext(
            Where(param, "buffer") +
            ": every offload_param swap buffer holds an acquired shard (raise "
            "offload_param.buffer_count or buffer_size, or lower stage3_max_live_parameters)");
      }
    }
  }

  // param_store_nvme_write.cc
  Status WriteOne(size_t param, size_t offset, size_t count, const uint8_t* src);
  Status BeginFill(size_t param, size_t offset, size_t count, bool base_valid);
  Status AddFilled(size_t param, size_t offset, size_t count);
  Status FinishFill(size_t param);
  Status FinishFills();
  Status WriteInto(size_t param, size_t offset, size_t count, const uint8_t* src);
  Status StartWrite(size_t param);
  Status FlushOne(size_t param, bool keep_buffer = false);
  Status FlushWrites();

  size_t ebytes_ = 4;
  uint64_t cpu_kept_bytes_ = 0;
  uint64_t nvme_bytes_ = 0;
  uint64_t reported_read_ = 0, reported_written_ = 0;  // swapper stats at the last AddTo
  double read_wait_ms_ = 0;                            // Acquire waiting for reads since then
  uint8_t zero_ = 0;                                   // what a zero-sized shard's view points at
  std::unique_ptr<AioHandle> own_aio_;
  std::unique_ptr<ParamSwapper> swapper_;
  // The CPU-kept shards' storage (KeepCpuShards); released by ShareCpuFlat.
  std::unique_ptr<PinnedPool> cpu_pool_;
  PinnedBuffer cpu_storage_;
  std::mutex mu_;  // one thread drives the store; the lock makes a stray second one safe
  std::vector<Slot> slots_;
  std::deque<DoneEntry> done_;      // kDone shards, oldest first (entries may be stale)
  std::vector<size_t> prefetched_;  // kPrefetched shards, oldest first
  std::deque<size_t> writing_;      // kWriting shards, oldest first
  std::vector<size_t> filling_;     // kFilling shards, oldest first
  std::vector<Event> free_events_;  // recycled: Done does not create one per gather
};

}  // namespace strata::internal
