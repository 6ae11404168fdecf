// NvmeOptimizerState: `offload_optimizer.device = nvme` — ZeRO-Infinity's optimizer placement, the
// NVMe counterpart of OptimizerState (engine/optim/optimizer_state.h). The fp32 master weights and
// the Adam moments of one rank's flat partition live on NVMe, one swap extent per sub-group
// (`sub_group_size`, cut by the engine into swap chunks of at most strata.swap_chunk_bytes:
// engine/nvme/swap_chunks.h; here a "sub-group" is one such chunk, so every pinned buffer and
// the stage below are bounded by the chunk, not by sub_group_size), and are stepped through the
// pipelined OptimizerSwapper (swap/): read(i+1) ||
// CPU Adam(i) || write(i-1) with `pipeline_read` / `pipeline_write` and `buffer_count` pinned
// buffers. The fp32 gradient partition stays in pinned CPU memory (PinnedPool, charged to the
// TierBudget), where the engine accumulates it — or, with grad_chunk_numel set, on NVMe in a
// GradRegion (engine/nvme/grad_region.h; grad() is then null): the step reads each sub-group's
// gradients from it into one sub-group-sized buffer just before its update, and the norm and
// overflow check are the region's (taken as the gradients were written).
//
// Same names as OptimizerState where the meaning is the same (grad(), GradSquaredNorm,
// GradHasNonFinite, ZeroGrad), and the same bits: a step here gives exactly the master, moments
// and compute-dtype copy-out that OptimizerState on Tier::kCpu gives (tests/engine/nvme).
// Differences: the step is whole (Step over all sub-groups, so the swapper can pipeline), and the
// master/moments are not addressable: WriteState / ReadState stream them per sub-group (for
// initialisation, GatherMasterParameter and checkpoints) through one sub-group-sized stage, so
// the state is never copied whole into RAM.
//
// Errors from the swap path name the swap file and offset (EIO, short reads, ENOSPC: from aio/;
// a corrupted block: DataLoss by its checksum, from swap/), with the sub-group added here.
//
// The asynchronous path (optimizer_nvme_async.cc; the overlapped step's worker and StepExcept):
// sub-group states move through the swapper's pinned buffers with reads issued ahead and updated
// states written back lazily (below). The buffers are used as one region (`buffer_count` x the
// largest state) in which each state takes its own size ("slots", Note [Slots by size]), so
// sub-groups smaller than the largest leave room for more of them in flight. A slot holds one
// sub-group: a read in flight, a valid copy (what NVMe holds, or newer once updated in place), or a
// write in flight (its buffer still holds what is being written, so reading that sub-group again
// waits for the write and takes the buffer as is). An updated state is written back lazily
// (write-back): its slot stays valid and dirty, and its write starts only when its room is needed
// for another sub-group or on a drain, so a state that stays in the buffers from one step to the
// next costs no NVMe bytes (Note [Write-back] in optimizer_nvme_async.cc). A dirty slot or deferred
// write is written out before its slot is reused, and by every direct call (ReadState, WriteState,
// ReadSubGroup, WriteSubGroup, Flush, Step) and the destructor; a write's error fails the call
// that waits for it, naming the sub-group, the swap file and offset.
//
// Thread safety: one thread drives it at a time (the engine's, or the overlapped step's worker
// between its read-ahead start and the step); Step runs Adam on the oneTBB workers while the
// AioHandle's threads do the I/O.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "aio/aio_handle.h"
#include "aio/aio_options.h"
#include "core/dtype.h"
#include "core/status.h"
#include "cpu_adam/cpu_optimizer.h"
#include "engine/base/partition.h"
#include "engine/base/step_breakdown.h"
#include "engine/config/config.h"
#include "engine/nvme/grad_region.h"
#include "engine/optim/param_copy_target.h"
#include "offload/device/api/device.h"
#include "offload/pinned_pool.h"
#include "offload/tier_budget.h"
#include "swap/optimizer_swapper.h"

namespace strata {

class Tracer;

struct NvmeOptimizerStateOptions {
  OptimizerKind kind = OptimizerKind::kAdam;  // Adam/AdamW only (the swapper's limit)
  Hyperparams hyperparams;
  // Absolute (or working-directory-relative) existing directories; several stripe.
  std::vector<std::string> nvme_paths;
  bool pin_memory = true;  // swap buffers and the gradient partition
  size_t buffer_count = 4;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool checksums = true;  // strata.swap_checksums
  // The asynchronous path keeps updated states in the buffers and writes one only when its room
  // is needed or on a drain (Note [Write-back] in optimizer_nvme_async.cc); false writes each
  // at once (write-through).
  bool write_back = true;
  int rank = 0;
  int num_threads = 0;  // CpuOptimizerOptions::num_threads
  // The AioHandle made when Create is given none (the `aio` section).
  AioOptions aio;
  // > 0: the gradients live in a GradRegion of chunks of this many elements (a multiple of
  // kSquaredNormChunk) with grad_buffer_count pinned chunk buffers; 0: a pinned partition.
  size_t grad_chunk_numel = 0;
  size_t grad_buffer_count = kGradRegionBuffers;
};

// The options from a resolved config: offload_optimizer's nvme_path (a relative path is taken
// from the working directory and created if missing; a list stripes), pin_memory, buffer_count,
// pipeline_read/_write, the `aio` section and strata.swap_checksums. kind and hyperparams are
// the caller's (the engine maps the `optimizer` section). InvalidArgument naming
// zero_optimization.offload_optimizer.nvme_path when it is missing or cannot be made.
Result<NvmeOptimizerStateOptions> NvmeOptimizerStateOptionsFromConfig(const Config& config,
                                                                      int rank);

class NvmeOptimizerState {
 public:
  // Reserves the swap space of every sub-group (a full disk fails here) and allocates the pinned
  // gradient partition (zeroed). `sub_groups` are layout.SubGroups(sub_group_size): in order,
  // covering [0, partition_numel). The master and moments start as zeros. `aio` (optional, must
  // outlive this) is shared with other swappers; null makes one from options.aio. `device` (for
  // DMA registration) and `budget` (kCpu: buffers and gradients, kNvme: swap) may be null.
  static Result<std::unique_ptr<NvmeOptimizerState>> Create(
      const PartitionLayout& layout, const std::vector<SubGroup>& sub_groups,
      const NvmeOptimizerStateOptions& options, Device* device, TierBudget* budget,
      AioHandle* aio = nullptr);
  ~NvmeOptimizerState();

  size_t numel() const { return numel_; }
  int num_sub_groups() const { return static_cast<int>(groups_.size()); }
  const SubGroup& sub_group(int i) const { return groups_[static_cast<size_t>(i)]; }
  // The fp32 gradient partition (pinned host memory, numel() floats); null with a gradient region.
  float* grad() const { return grad_; }
  // The gradient region (options.grad_chunk_numel > 0), or null. The reducer adds into it.
  GradRegion* grad_region() const { return region_.get(); }
  // Note [Gradients of resident states] (grad_region.cc). While on (the overlapped step, armed
  // with final updates), the region holds the finished gradient chunks whose sub-groups all have
  // their states in the swap buffers, for their updates to read from memory; off (the default),
  // it holds none. Any thread.
  void set_hold_grads(bool on) { hold_grads_.store(on, std::memory_order_relaxed); }
  // Sub-group i's update is final and has read its gradients: a gradient region lets the chunks
  // every update of this step has read leave its buffers unwritten. No-op without a region.
  Status ConsumeGrads(int i);
  // State bytes on NVMe (master + moments, 12 B per element, before alignment) and pinned CPU
  // bytes (swap buffers once made, the gradient partition).
  uint64_t nvme_bytes() const { return 3 * uint64_t{numel_} * sizeof(float); }
  uint64_t cpu_bytes() const;

  // As OptimizerState's (same order of summation, so the same bits). Over the whole partition
  // (begin 0, end numel(): the step's calls) they start from the chunk sums
  // PrecomputeGradChecks took; GradSquaredNorm then forgets them. The overflow check reads the
  // chunk sums too: a float's square is finite in double, so a chunk's sum is finite exactly
  // when its elements are (and the norm then reuses them).
  // With a gradient region only the whole partition is asked (its sums are the region's).
  double GradSquaredNorm(size_t begin, size_t end) const;
  bool GradHasNonFinite(size_t begin, size_t end) const;
  // Forgets the chunk sums; with `memory`, grad()[0, numel) = 0 (else the gradient reducer
  // overwrites it: Note [Copy first] in engine/zero/grad/grad_reducer.cc).
  void ZeroGrad(bool memory = true) const;
  // The overlapped step's worker, once the gradients of [begin, end) are final for the step:
  // sums the norm's chunks (Note [Squared-norm order]) that lie inside the range, so the step
  // only sums the rest. Not concurrent with the calls above, ZeroGrad or another
  // PrecomputeGradChecks (the worker owns the state between the step's Begin and Finish).
  void PrecomputeGradChecks(size_t begin, size_t end) const;
  // Forgets the chunk sums taken so far (a step that failed before its norm left them).
  void ForgetGradChecks() const { std::fill(norm_ready_.begin(), norm_ready_.end(), 0); }

  // One optimizer update of every sub-group at step number `step` (>= 1) with `hp`, the
  // gradients multiplied by grad_scale first. If param_copy is set (a partition-sized
  // host-addressable array), the updated weights are written to it as copy_dtype (fp16/bf16
  // fused into the update; fp32 a copy). Pipelined per the options. On error the step stops
  // naming the sub-group and the swap file/offset; sub-groups already written hold the new state.
  Status Step(int64_t step, const Hyperparams& hp, float grad_scale, void* param_copy,
              DType copy_dtype);
  // The same with the copy-out going to `copy` sub-group by sub-group (engine/optim/
  // param_copy_target.h; null: none): each sub-group is committed once its update is done, before
  // the next one begins, so one destination buffer serves them all. A sub-group whose update
  // failed is not committed.
  Status Step(int64_t step, const Hyperparams& hp, float grad_scale, ParamCopyTarget* copy);

  // As Step, but sub-groups with skip[i] != 0 are left alone (the overlapped step updated them:
  // engine/overlap/step_overlap.h). With none skipped and nothing in the slots this is Step;
  // otherwise the rest go through the asynchronous path: the states already read ahead first, the
  // next reads in flight during each update, the updated states left dirty in the buffers. `skip`
  // has num_sub_groups() entries.
  Status StepExcept(int64_t step, const Hyperparams& hp, float grad_scale, void* param_copy,
                    DType copy_dtype, const std::vector<char>& skip);
  Status StepExcept(int64_t step, const Hyperparams& hp, float grad_scale, ParamCopyTarget* copy,
                    const std::vector<char>& skip);

  // Per sub-group steps (the overlapped step: engine/overlap/step_overlap.h). PrepareSubGroupSteps
  // (the engine's thread) writes the stage and zeros for sub-groups never written (nothing, and no
  // drain, when there are none); then, from one thread at a time, each sub-group's state is
  // acquired in a slot (AcquireState, below), updated in place (UpdateSubGroup: the same kernel,
  // step number and hyperparameters as Step, so the same bits) and written back (WriteBack).
  // WriteSubGroup is the direct, synchronous write (it drains the slots first).
  Status PrepareSubGroupSteps();
  // When master/exp_avg/exp_avg_sq are sub-group i's slot (AcquireState) and checksums are on,
  // the update is fused with the swap checksums (optimizer_nvme_fused.cc): the read's blocks are
  // verified just before Adam first touches them and the write's hashed right after (WriteBack
  // then submits with those sums); a mismatch is DataLoss and drops the slot, nothing is written.
  // With grad_checks (the overlapped step's worker, once the sub-group's gradients are final),
  // the update also takes PrecomputeGradChecks' chunk sums of its range; fused, each tile sums its
  // chunks right after Adam has read its gradients (they are in cache), else they are summed after
  // the update. fuses_updates(): the worker's updates are fused (swap checksums on).
  Status UpdateSubGroup(int i, int64_t step, const Hyperparams& hp, float grad_scale, float* master,
                        float* exp_avg, float* exp_avg_sq, void* param_copy, DType copy_dtype,
                        bool grad_checks = false);
  // The same with `copy` the sub-group's own destination (its numel elements of copy_dtype, e.g.
  // from ParamCopyTarget::Begin), not a partition-sized array.
  Status UpdateSubGroupInto(int i, int64_t step, const Hyperparams& hp, float grad_scale,
                            float* master, float* exp_avg, float* exp_avg_sq, uint8_t* copy,
                            DType copy_dtype, bool grad_checks = false);
  Status WriteSubGroup(int i, const float* master, const float* exp_avg, const float* exp_avg_sq);

  // --- The asynchronous path (see the top of this file) ---
  // Non-blocking: records the I/O that completed, then issues reads of `wanted` (sub-groups in
  // the order they will be needed; only Window(wanted)) into free room or room held by valid
  // copies of sub-groups not among them. *waiting_helps: some of them wait for I/O in flight (a
  // read, or a write whose slot is needed). The first error of a completed read or write.
  Status ReadAhead(std::span<const int> wanted, bool* waiting_helps);
  // Blocks until the oldest read or write in flight completes (false: none was). With `block`
  // false it does not wait: true when that I/O had completed (recorded now) or none was in flight,
  // false while it is still in flight.
  Result<bool> WaitOldestIo(bool block = true);
  // Sub-group i's state is in a slot with no read still in flight (valid, dirty, being written,
  // or read and not yet recorded): AcquireState would not wait for a read.
  bool Resident(int i) const;
  // Blocks until sub-group i's state is valid in a slot and returns where (valid until its
  // WriteBack, the next drain, or a later ReadAhead / AcquireState whose keep leaves i out and
  // needs its room): read from NVMe if needed (need_contents), else the caller overwrites it
  // all. `keep` (the sub-groups needed next, first needed first) are evicted for it only when
  // nothing is in flight and no gap fits otherwise, those needed last first. A read's
  // checksums are left to UpdateSubGroup, which verifies each block before Adam touches it (a
  // WriteBack without that update verifies what is left first).
  Result<OptimizerSwapper::StateView> AcquireState(int i, std::span<const int> keep,
                                                   bool need_contents);
  // Hands back sub-group i's slot after AcquireState and an update in place: the slot turns
  // dirty (write-back; options.write_back false: its write is submitted at once).
  Status WriteBack(int i);
  // Writes every dirty slot, waits for every write in flight (the first error), drops every read
  // and valid copy. Calls the drain hook first.
  Status DrainAsync();
  // Waits for every write in flight (the first error) and keeps the buffers' contents valid,
  // dirty slots included (they are the newest state; not written here): the next step takes those
  // states from the buffers, as it would have without the wait. Calls the drain hook first.
  Status SettleWrites();
  // The bytes of state held only by dirty slots (written by the next drain or eviction).
  uint64_t dirty_bytes() const;
  // Whether any slot holds a sub-group (a read, a copy or a write).
  bool async_busy() const;
  // The sub-groups of `wanted` (in the order they will be needed) the read-ahead keeps, in that
  // order: those whose states are in the buffers already, and the first of the others whose
  // states fit in the room those leave (Note [Resident states stay] in
  // optimizer_nvme_read_ahead.cc). With keep_first where it applies, the first sub-groups (flat
  // order) of `wanted`, then the first others that fit in the rest (Note [The forward's states
  // stay]). Empty until the buffers are made (the first ReadAhead or AcquireState).
  std::vector<int> Window(std::span<const int> wanted) const;
  // Note [The forward's states stay] (optimizer_nvme_read_ahead.cc): with `on` (the engine's
  // deferred updates), where the buffers hold more than a quarter of the state but not all of it,
  // Window always keeps the first sub-groups' states (flat order) and streams the others.
  void set_keep_first(bool on) { keep_first_ = on; }
  // Whether sub-group i's state has a slot (a read in flight, a copy, or a write in flight). Any
  // thread may ask (the gradient region's adds do: Note [Gradients of resident states]); the
  // answer may be out of date by the time it is used.
  bool InBuffers(int i) const {
    return i >= 0 && static_cast<size_t>(i) < groups_.size() &&
           in_buffers_[static_cast<size_t>(i)].load(std::memory_order_relaxed) != 0;
  }
  bool fuses_updates() const { return swapper_->checksums(); }
  struct AsyncStats {
    uint64_t bytes_read = 0, bytes_written = 0;
    double wait_ms = 0;  // blocked on a read or a write
    // Bytes of state hashed for their write by the fused update, and by the write itself
    // (Note [Sums for the writes to come] in optimizer_nvme_fused.cc).
    uint64_t bytes_hashed_at_update = 0, bytes_hashed_at_write = 0;
  };
  // The figures since the last call.
  AsyncStats TakeAsyncStats();
  // Called by DrainAsync before it touches the slots (the overlapped step stops its worker's
  // read-ahead there). Must stay valid until replaced (null clears it).
  void set_drain_hook(std::function<void()> hook) { drain_hook_ = std::move(hook); }

  // Writes elements [flat_begin, flat_begin + master.size()) of the master weights and, when
  // given (same length), of the moments (else those keep their values: zeros at first). The
  // range may cross sub-groups. Staged per sub-group: a sub-group goes to NVMe when a write or
  // read moves to another one, or at Flush / Step.
  Status WriteState(size_t flat_begin, std::span<const float> master,
                    std::span<const float> exp_avg = {}, std::span<const float> exp_avg_sq = {});
  Status WriteMaster(size_t flat_begin, std::span<const float> master) {
    return WriteState(flat_begin, master);
  }
  // Reads [flat_begin, flat_begin + numel) into the non-null outputs, one sub-group at a time
  // (the last sub-group read is kept, so per-parameter reads in order read each sub-group once).
  Status ReadState(size_t flat_begin, size_t numel, float* master, float* exp_avg,
                   float* exp_avg_sq);
  // One whole sub-group (sub_group(i).flat_end - flat_begin elements each): checkpoints.
  Status ReadSubGroup(int i, float* master, float* exp_avg, float* exp_avg_sq);
  // Writes the staged sub-group, if any, and frees the stage.
  Status Flush();

  // The last Step's swapper figures (read wait, update, bytes) and this step's breakdown parts.
  const OptimizerStepStats& last_step() const { return swapper_->last_step(); }
  // Adds the last Step's parts to `b`: io_wait_ms (read + write waits), cpu_adam_ms, NVMe bytes
  // read and written. step_ms is the engine's (it spans the norm and write-back too).
  void AddTo(StepBreakdown* b) const;
  // Optional: Step records a span "optimizer step (nvme)" (args: read wait, update, bytes) and
  // one "sub-group" span per sub-group (from just before its update to just before the next
  // one's: update, checksum + write submit, and the wait for the next read). Must outlive this.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  // Benchmarks and tests switch the schedule between steps.
  void set_pipelining(bool read, bool write) { swapper_->set_pipelining(read, write); }

 private:
  // Window under Note [The forward's states stay]; empty when it does not apply.
  std::vector<int> FirstStatesWindow(std::span<const int> wanted) const;
  // Whether sub-group x is in v (a keep set or a window: a few sub-groups).
  static bool InSet(std::span<const int> v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  }
  NvmeOptimizerState(const NvmeOptimizerStateOptions& options, CpuOptimizer optimizer)
      : options_(options), optimizer_(std::move(optimizer)) {}
  // Index of the sub-group holding flat element `e` (numel() for the end).
  int SubGroupOf(size_t e) const;
  // Makes sub-group i the staged one (writing the previous if dirty); with need_contents its
  // values are read (zeros if never written), else the caller overwrites all of them.
  Status Stage(int i, bool need_contents);
  // Writes the staged sub-group if dirty (keeps the stage).
  Status WriteStage();
  // Writes zeros to every sub-group never written (before a step or a read of it).
  Status WriteUnwritten();

  // The asynchronous path's slots: a sub-group's state at a range of the swapper's region.
  struct Slot {
    enum class State : uint8_t { kFree, kReading, kValid, kWriting };
    State state = State::kFree;
    int sg = -1;
    size_t offset = 0, bytes = 0;  // its range in the region (not kFree)
    SwapFuture io;
    uint64_t seq = 0;  // issue order of the I/O in flight
    // A read with its checksums left to the update (Note [Fused checksums]): blocks not yet
    // verified (verified[b] == 0; empty: none verified).
    bool deferred = false;
    std::vector<char> verified;
    // The fused update's per-block sums of the buffer, for its write.
    std::vector<uint64_t> write_sums;
    bool sums_ready = false;
    // kValid and newer than NVMe, its write not started (Note [Write-back]).
    bool dirty = false;
    // When its state was last handed back updated (WriteBack's count; 0: not since it came).
    uint64_t updated = 0;
  };
  Status EnsureSlots();
  void FreeSlot(size_t k);
  // Settles slot k's I/O if done (or, with block, once done): a read becomes valid, a write too.
  Status Settle(size_t k, bool block);
  // Room for sub-group i's state: a free slot record placed at a free range of the region, valid
  // copies of sub-groups not in `keep` dropped to make it if needed; -1 if none (I/O or kept
  // copies in the way).
  int Place(int i, std::span<const int> keep);
  // Places slot record k's state for sub-group i at `offset`.
  void Claim(size_t k, int i, size_t offset);
  void StartRead(int i, size_t k);
  // Starts the write of slot k (valid and dirty, or just updated): it becomes kWriting.
  void StartWrite(size_t k);
  // Starts the writes of the dirty copies in the cheapest range of need_bytes that holds no copy
  // in `keep` and no read in flight (Note [Room for a state]); whether that range has a write in
  // flight now (waiting for the oldest I/O then helps). False when there is no such range.
  // With `taken`, the ranges in it (offset, bytes: rooms made for earlier states of the same
  // read-ahead) are not chosen again, and the chosen one is added to it.
  bool MakeRoom(size_t need_bytes, std::span<const int> keep,
                std::vector<std::pair<size_t, size_t>>* taken = nullptr);
  // Starts the write of every dirty copy (the drain).
  void WriteOutAllDirty();
  // Waits for every I/O in flight (the first error).
  Status WaitAllIo();
  OptimizerSwapper::StateView SlotState(size_t k) const;
  // UpdateSubGroup on slot k with the checksums fused in (optimizer_nvme_fused.cc).
  Status UpdateFused(int i, size_t k, int64_t step, const Hyperparams& hp, float grad_scale,
                     const GradView& grads, uint8_t* copy, DType copy_dtype, bool grad_checks);
  // Verifies the blocks of slot k's deferred read not verified yet (all at once, from memory).
  Status VerifyRest(size_t k);
  // The async path of StepExcept.
  Status StepAsync(int64_t step, const Hyperparams& hp, float grad_scale, ParamCopyTarget* copy,
                   const std::vector<char>& skip);

  NvmeOptimizerStateOptions options_;
  CpuOptimizer optimizer_;
  std::unique_ptr<AioHandle> own_aio_;
  std::unique_ptr<OptimizerSwapper> swapper_;
  std::vector<SubGroup> groups_;
  std::vector<int> swap_index_;     // sub-group -> swapper sub-group (-1: empty)
  std::vector<int> swap_to_group_;  // swapper sub-group -> sub-group
  std::vector<bool> written_;       // on NVMe at least once
  // Per sub-group: written to NVMe since its last update in a slot (1 until its first): whether
  // the next fused update hashes for a write (Note [Sums for the writes to come]).
  std::vector<char> written_since_update_;
  size_t numel_ = 0;
  TierBudget* budget_ = nullptr;
  std::unique_ptr<PinnedPool> grad_pool_;
  PinnedBuffer grad_slab_;
  float* grad_ = nullptr;
  // With a gradient region: it, and the sub-group gradients read from it (grad_slab_, sized by
  // the largest sub-group; which sub-group it holds, -1: none).
  // The gradient region's own queue (Note [A queue for the gradients] in optimizer_nvme.cc):
  // before region_, which uses it until destroyed.
  std::unique_ptr<AioHandle> region_aio_;
  std::unique_ptr<GradRegion> region_;
  int region_grads_of_ = -1;
  // Sub-group i's gradients: grad_ + its begin; with a region, its add buffers lent when `lend`
  // and they hold them all (Note [Gradients read in place] in grad_region_lend.cc), else read
  // into grad_slab_.
  Result<GradView> SubGroupGrads(int i, bool lend);
  // The stage: one sub-group's master | exp_avg | exp_avg_sq (3 x its numel floats).
  std::vector<float> stage_;
  int staged_ = -1;
  bool stage_dirty_ = false;
  uint64_t stage_budget_bytes_ = 0;
  Tracer* tracer_ = nullptr;
  // The whole partition's norm chunk sums (kept: no allocation per step) and which of them are
  // this step's (PrecomputeGradChecks, GradHasNonFinite); SumNormChunks fills the rest.
  mutable std::vector<double> norm_sums_;
  mutable std::vector<char> norm_ready_;
  void SumNormChunks(size_t first, size_t last) const;      // chunk indices [first, last)
  void SumNormChunksHere(size_t first, size_t last) const;  // the same on the calling thread
  // The chunk indices wholly inside elements [begin, end).
  std::pair<size_t, size_t> WholeChunks(size_t begin, size_t end) const;
  // StepExcept's per-sub-group NVMe bytes, and whether the last step went through the swapper
  // (AddTo then adds its figures).
  uint64_t sg_bytes_read_ = 0, sg_bytes_written_ = 0;
  bool swapper_stepped_ = false;
  double sg_wait_ms_ = 0, sg_update_ms_ = 0;
  std::vector<Slot> slots_;   // one record per non-empty sub-group at most
  std::vector<int> slot_of_;  // sub-group -> slot, or -1
  // slot_of_[i] >= 0, readable from any thread (InBuffers).
  std::unique_ptr<std::atomic<uint8_t>[]> in_buffers_;
  std::atomic<bool> hold_grads_{false};
  // Whether every sub-group holding an element of [flat_begin, flat_end) has its state in the
  // buffers (the region's hold, with hold_grads_ on).
  bool HoldsGrads(size_t flat_begin, size_t flat_end) const;
  size_t region_bytes_ = 0;       // the swapper's region
  uint64_t all_state_bytes_ = 0;  // every sub-group's state (set with the slots)
  // Note [The forward's states stay]: the leading sub-groups Window keeps with keep_first (0: the
  // rule does not apply to these sizes) and their states' bytes (set with the slots).
  size_t first_kept_ = 0;
  uint64_t first_kept_bytes_ = 0;
  uint64_t io_seq_ = 0;
  uint64_t update_seq_ = 0;  // WriteBacks so far (Slot::updated)
  AsyncStats async_stats_;
  std::function<void()> drain_hook_;
  bool keep_first_ = false;  // set_keep_first
};

}  // namespace strata
