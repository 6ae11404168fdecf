// ParamCoordinator: stage 3's prefetching. It records the order in which modules run their hooks
// during the first forward+backward pass, checks that every rank saw the same order, and from
// the next pass on replays that trace to gather parameters ahead of their modules.
//
// A pass is one forward+backward (a micro-step): it begins with the first hook after the
// previous pass ended and ends at ZeroHooks::FinishBackward. The trace is the sequence of
// (module, hook point) of modules that use parameters. In replay:
//   - before a module's gathers, the next entries of the trace (their not yet live parameters)
//     are gathered ahead while the elements held ahead stay within stage3_prefetch_bucket_size
//     and everything gathered within stage3_max_live_parameters (a module's own gathers may pass
//     it by that module: the bound the hooks' peak keeps is max_live + one module);
//   - with the NVMe tier, ParamStore::Prefetch (the read) is issued further ahead: as far as the
//     measured read bandwidth and module durations say a read needs to start now to be ready
//     when its module runs (and not stopping at the first NVMe-resident parameter);
//   - at a module's release, a parameter used again within stage3_max_reuse_distance elements of
//     trace is kept gathered instead of released and gathered again, while the live elements
//     leave room for a full prefetch bucket within stage3_max_live_parameters (prefetch first:
//     Note [Room for the bucket]).
// Gathers go through the hooks (the Gatherer below), so they keep the hooks' nesting, memory
// throttle and stream order; every decision depends only on the trace and element counts, so
// all ranks issue the same collectives in the same order. A departure from the trace
// invalidates it: the holds taken ahead are released, nothing more is prefetched in this pass,
// the next pass records again, and the first time it says
//   "stage 3: module order changed at step N (expected X, got Y); re-recording".
// stage3_prefetch_bucket_size 0 turns prefetching off (the trace is still recorded and checked).
//
// Thread safety: driven by the engine's thread, through the hooks.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/comm/communicator.h"
#include "engine/zero/store/param_store.h"
#include "nn/modules/layers/module.h"
#include "offload/device/api/device.h"

namespace strata {

// What the coordinator drives: ZeroHooks' nested gather and release of one parameter.
class Gatherer {
 public:
  virtual ~Gatherer() = default;
  virtual Status GatherParam(size_t param) = 0;   // one more hold (gathers if not live)
  virtual Status ReleaseParam(size_t param) = 0;  // one hold less (frees at the last)
  virtual bool IsLive(size_t param) const = 0;    // gathered now (or persistent)
  virtual bool IsPersistent(size_t param) const = 0;
  virtual uint64_t live_numel() const = 0;  // non-persistent elements gathered now
};

struct ParamCoordinatorOptions {
  Communicator* comm = nullptr;  // for the cross-rank trace check
  Device* device = nullptr;
  Stream compute;                        // where the check's collective runs
  ParamStore* store = nullptr;           // Prefetch (NVMe reads); not owned
  std::vector<size_t> numel;             // per parameter (full elements)
  std::vector<size_t> shard_bytes;       // per parameter: this rank's shard, for read estimates
  size_t dtype_bytes = 4;                // compute dtype
  int64_t prefetch_bucket_numel = 0;     // stage3_prefetch_bucket_size (0: no prefetch)
  int64_t max_live_numel = 0;            // stage3_max_live_parameters
  int64_t max_reuse_distance_numel = 0;  // stage3_max_reuse_distance
  // Forward-only passes (ZeRO-Inference): NVMe reads are issued as far ahead as
  // stage3_max_live_parameters allows, not just in time (Note [Read-ahead]).
  bool eager_read_ahead = false;
  // NVMe: the shard bytes the read-ahead keeps issued ahead of the gathers at least, the aio
  // queue's (queue_depth x block_size x threads; Note [A full queue ahead]). 0: none.
  uint64_t min_read_ahead_bytes = 0;
};

struct CoordinatorStats {
  uint64_t hits = 0;              // a module found its parameter gathered ahead (or kept)
  uint64_t misses = 0;            // in replay, a module had to gather a parameter itself
  uint64_t prefetched_bytes = 0;  // gathered ahead (full compute-dtype bytes)
  uint64_t read_ahead_bytes = 0;  // shard bytes handed to ParamStore::Prefetch
  uint64_t kept = 0;              // releases skipped by the reuse distance
  uint64_t invalidations = 0;
  uint64_t passes = 0;     // forward+backward passes ended
  bool replaying = false;  // a checked trace is being replayed
};

class ParamCoordinator {
 public:
  ParamCoordinator(const ParamCoordinatorOptions& o, Gatherer* gatherer);

  // Before `module` gathers `params` at a pre hook (kPreForward / kPreBackward), and after.
  Status BeforeGather(nn::HookPoint point, const nn::Module& module,
                      std::span<const size_t> params);
  Status AfterGather(std::span<const size_t> params);
  // Before `module` releases `params` at a post hook: keeps the ones used again soon.
  Status BeforeRelease(nn::HookPoint point, const nn::Module& module,
                       std::span<const size_t> params);
  // End of a pass (FinishBackward): releases what is still held; after the recording pass,
  // checks the trace across ranks (FailedPrecondition naming the first rank that differs).
  Status EndPass();
  // Releases every hold (invalidation, shutdown).
  Status ReleaseAll();

  const CoordinatorStats& stats() const { return stats_; }
  size_t trace_size() const { return trace_.size(); }

 private:
  enum class Mode { kRecord, kReplay, kInvalid };
  struct Entry {
    const nn::Module* module = nullptr;
    nn::HookPoint point = nn::HookPoint::kPreForward;
    std::vector<size_t> params;
    uint64_t numel = 0;  // non-persistent elements of params
  };
  Status Step(nn::HookPoint point, const nn::Module& module, std::span<const size_t> params);
  Status Invalidate(const std::string& expected, const std::string& got);
  Status CheckAcrossRanks();
  void Finalize();  // trace recorded: cumulative counts and per-parameter uses
  Status PrefetchAhead();
  // Hands the NVMe reads of the entries PrefetchAhead is about to gather (from entry `from`) to
  // the store in one batch (Note [A bucket's reads together] in param_coordinator.cc).
  void ReadBucket(size_t from, uint64_t bucket, uint64_t max_live);
  void ReadAhead();
  // The next pre entry after `pos` using `param` (trace_.size() if none).
  size_t NextUse(size_t param, size_t pos) const;
  // Every entry in [pos_, next) uses only live or persistent parameters (Note [Next fresh gather]).
  bool NothingFreshBefore(size_t next) const;
  static bool IsPre(nn::HookPoint p) {
    return p == nn::HookPoint::kPreForward || p == nn::HookPoint::kPreBackward;
  }
  static std::string Describe(const nn::Module* m, nn::HookPoint p);

  ParamCoordinatorOptions o_;
  Gatherer* g_;
  Mode mode_ = Mode::kRecord;
  bool in_pass_ = false;
  std::vector<Entry> trace_;
  std::vector<uint64_t> cum_;              // elements of pre entries before entry k
  std::vector<std::vector<size_t>> uses_;  // per parameter: pre entries using it, ascending
  size_t pos_ = 0;                         // the entry being run
  size_t next_prefetch_ = 0;               // first entry not gathered ahead yet
  size_t next_read_ = 0;                   // first entry not read ahead yet
  std::vector<uint8_t> prefetched_;        // per entry: its parameters are held ahead
  uint64_t ahead_numel_ = 0;               // elements of entries held ahead
  std::vector<uint8_t> kept_;              // per parameter: held by the reuse distance
  std::vector<size_t> read_batch_;         // ReadBucket's / ReadAhead's: no allocation a hook
  // Running estimates for the read-ahead: host milliseconds per trace entry, read bytes/ms.
  std::vector<double> entry_ms_;
  double last_hook_ms_ = -1;
  double read_bytes_per_ms_ = 1e6;  // 1 GB/s until measured
  uint64_t last_read_bytes_ = 0;
  double pass_begin_ms_ = 0;
  CoordinatorStats stats_;
  std::atomic<bool> logged_{false};
};

}  // namespace strata
