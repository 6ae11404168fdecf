// OptimizerSwapper: fp32 master weights and Adam moments on NVMe (`offload_optimizer.device =
// nvme`), stepped one sub-group (`sub_group_size` elements) at a time through a bounded set of
// pinned buffers.
//
// Each sub-group's state is one swap extent [params | exp_avg | exp_avg_sq] (each part 4 KiB
// aligned), so a sub-group moves with one read and one write. With pipeline_read /
// pipeline_write the step overlaps read(i+1) || update(i) || write(i-1) using `buffer_count`
// buffers sized for the largest sub-group; without, each sub-group is read, updated and written
// in turn. The update is CpuOptimizer's SIMD kernel; its fused copy-out writes the new
// compute-dtype parameters straight to where the caller wants them (ParamSwapper buffer, device
// staging), so the master weights are never read twice.
//
// Thread safety: one Step() at a time; Step runs the optimizer on the calling thread (oneTBB
// inside) while the AioHandle's threads do the I/O.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "aio/aio_handle.h"
#include "cpu_adam/cpu_optimizer.h"
#include "offload/pinned_pool.h"
#include "offload/tier_budget.h"
#include "swap/swap_space.h"
#include "swap/swapper_options.h"

namespace strata {

// The shared fields (nvme_paths, pin_memory, checksums, rank, budget, device) come
// from SwapperOptions.
struct OptimizerSwapperOptions : SwapperOptions {
  static constexpr size_t kMaxBufferCount = 64;
  size_t buffer_count = 4;  // 1 to kMaxBufferCount
  bool pipeline_read = false;
  bool pipeline_write = false;
  // Keep each sub-group's fp32 gradient shard on NVMe too (when it does not fit in CPU memory):
  // the caller writes it with WriteGrads() as backward produces it, and Step() reads it with the
  // state (a SubGroupIo with grads == nullptr means "use the swapped gradients").
  bool swap_grads = false;
  // Threads for the update while the step is pipelined: it runs concurrently with the aio
  // threads, which need a core to keep the disk busy. 0 = all cores this process may use but one
  // (at least 1); -1 = the optimizer's own setting. The serial schedule always uses the
  // optimizer's setting, and so does an optimizer created with its own num_threads (its arena
  // wins; Create says so in one line).
  int update_threads = 0;
};

// What the step needs from the caller for one sub-group.
struct SubGroupIo {
  // numel gradients (already reduced), in grad_dtype; nullptr = the swapped fp32 gradients
  // (swap_grads).
  const void* grads = nullptr;
  DType grad_dtype = DType::kFloat32;
  // Optional: receives the updated params in param_copy_dtype (fused into the update).
  void* param_copy = nullptr;
  DType param_copy_dtype = DType::kBFloat16;
};

struct OptimizerStepStats {
  double total_ms = 0;
  double read_wait_ms = 0;   // time the update waited for reads
  double update_ms = 0;      // time in the optimizer kernel
  double write_wait_ms = 0;  // time waiting for writes (to free a buffer, or at the end)
  uint64_t bytes_read = 0, bytes_written = 0;
};

class OptimizerSwapper {
 public:
  // `optimizer` must outlive the swapper; its parameter groups give the hyperparameters.
  static Result<std::unique_ptr<OptimizerSwapper>> Create(const OptimizerSwapperOptions& options,
                                                          AioHandle* aio,
                                                          const CpuOptimizer* optimizer);
  ~OptimizerSwapper();

  // Adds a sub-group of `numel` elements stepped with optimizer group `group`; reserves its NVMe
  // space (a full disk fails here). Returns its index (0, 1, ...).
  Result<int> AddSubGroup(size_t numel, int group);
  int num_sub_groups() const { return static_cast<int>(groups_.size()); }
  size_t numel(int sub_group) const { return groups_[static_cast<size_t>(sub_group)].numel; }

  // Writes a sub-group's initial state: `params`, and zero moments (or the given ones).
  Status Initialize(int sub_group, const float* params, const float* exp_avg = nullptr,
                    const float* exp_avg_sq = nullptr);
  // swap_grads only: starts writing sub-group i's fp32 gradients (numel floats) to NVMe. `grads`
  // must stay valid until the future is waited. Step() waits for it before reading them back.
  SwapFuture WriteGrads(int sub_group, const float* grads);

  // Reads a sub-group's state back (checkpoints, tests). Null outputs are skipped.
  Status ReadState(int sub_group, float* params, float* exp_avg, float* exp_avg_sq);

  // One optimizer step over every sub-group, in order. `io(i)` gives sub-group i's gradients and
  // copy-out destination; it is called on the calling thread just before i is updated. The step
  // counter advances once per call. On error the step stops; sub-groups already written hold the
  // new state and the rest the old (the error says which). A sub-group whose write failed is
  // torn: reading it (a later Step, ReadState) is FailedPrecondition until Initialize rewrites it.
  Status Step(const std::function<SubGroupIo(int)>& io, const StepOptions& options = {});

  // Per-buffer calls, for a caller that schedules its own pipeline (engine/nvme/optimizer_nvme.h's
  // asynchronous path): buffer b in [0, num_buffers()) holds one sub-group's state at a time.
  // The caller keeps a buffer's read or write in flight apart from any other use of it, and has
  // none in flight during Initialize, ReadState and Step (they use the buffers too).
  struct StateView {
    float* params = nullptr;
    float* exp_avg = nullptr;
    float* exp_avg_sq = nullptr;
  };
  Status PrepareBuffers() { return EnsureBuffers(); }  // before the calls below
  int num_buffers() const { return static_cast<int>(buffers_.size()); }
  StateView BufferState(int sub_group, int buffer);
  // Async read of the sub-group's state into buffer b / write from it (checksums as Step's: the
  // read is verified by its Wait, the write's taken at submit).
  SwapFuture ReadAsync(int sub_group, int buffer);
  SwapFuture WriteAsync(int sub_group, int buffer);
  // The same with the checksums left to the caller (Note [Checksums by the caller] in
  // swap/swap_space.cc): a read whose Wait checks only the I/O (`deferred`; false is the call
  // above), its blocks then verified with VerifyBlocks before they are used; a write with the
  // caller's per-block sums (num_blocks(sub_group) of them, else InvalidArgument). Blocks are
  // checksum_block_bytes() of the sub-group's swap extent, params at byte 0, exp_avg at
  // part_bytes(sub_group), exp_avg_sq at twice that (a block may straddle two parts; padding
  // between them is hashed as it is).
  SwapFuture ReadAsync(int sub_group, int buffer, bool deferred);
  Status VerifyBlocks(int sub_group, int buffer, size_t first, size_t count,
                      uint64_t* sums = nullptr) const;
  SwapFuture WriteAsync(int sub_group, int buffer, std::vector<uint64_t> block_sums);

  // The buffers as one region (they are one slab, buffer b at b * buffer stride): its bytes, and
  // the calls above at a byte offset in it, for a caller that places states of different sizes
  // side by side (engine/nvme/optimizer_nvme.h). The offset is a multiple of 4 KiB and the
  // sub-group's state_bytes fit in the region from there, else InvalidArgument (StateAt: a
  // failed check). The same rules as the per-buffer calls apply to each range in use.
  size_t region_bytes() const { return region_bytes_; }
  StateView StateAt(int sub_group, size_t offset);
  SwapFuture ReadAt(int sub_group, size_t offset, bool deferred);
  Status VerifyBlocksAt(int sub_group, size_t offset, size_t first, size_t count,
                        uint64_t* sums = nullptr) const;
  SwapFuture WriteAt(int sub_group, size_t offset);
  SwapFuture WriteAt(int sub_group, size_t offset, std::vector<uint64_t> block_sums);
  bool checksums() const { return space_->checksums(); }
  size_t checksum_block_bytes() const { return space_->checksum_block_bytes(); }
  size_t num_blocks(int sub_group) const {
    return space_->num_blocks(groups_[static_cast<size_t>(sub_group)].swap_id);
  }
  // Bytes from one part of the sub-group's state to the next.
  size_t part_bytes(int sub_group) const {
    return PartBytes(groups_[static_cast<size_t>(sub_group)].numel);
  }
  // Bytes one sub-group's state moves (the three aligned parts).
  uint64_t state_bytes(int sub_group) const {
    return 3 * uint64_t{PartBytes(groups_[static_cast<size_t>(sub_group)].numel)};
  }

  // Switches the schedule between steps (benchmarks compare both on the same files).
  void set_pipelining(bool read, bool write) {
    options_.pipeline_read = read;
    options_.pipeline_write = write;
  }

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  const OptimizerStepStats& last_step() const { return last_; }
  // Pinned buffer bytes (buffer_count x largest sub-group x 12 B).
  size_t buffer_bytes() const;

 private:
  struct SubGroup {
    size_t numel = 0;
    int group = 0;
    SwapId swap_id = 0;
    SwapId grad_id = 0;  // swap_grads only
  };
  struct UpdateArena;  // a oneTBB task_arena, defined in the .cc (no TBB in this header)
  OptimizerSwapper(const OptimizerSwapperOptions& o, AioHandle* aio, const CpuOptimizer* opt);
  Status EnsureBuffers();
  // Whether [offset, offset + state_bytes(sg)) is a valid range of the region for sub-group sg.
  Status CheckRange(const char* what, int sg, size_t offset) const;
  // Bytes between the params, exp_avg and exp_avg_sq parts of a sub-group: 4 KiB aligned, and
  // kept away from multiples of 32 MiB - arrays an exact multiple of >= 128 MiB apart alias in
  // the caches and make the Adam step ~5x slower (docs/cpu_adam.md).
  static size_t PartBytes(size_t numel) {
    constexpr size_t kMiB = size_t{1} << 20;
    size_t stride = (numel * 4 + 4095) / 4096 * 4096;
    const size_t r = stride % (32 * kMiB);
    if (stride >= 32 * kMiB && (r < 4 * kMiB || r > 28 * kMiB)) stride += 8 * kMiB;
    return stride;
  }

  OptimizerSwapperOptions options_;
  AioHandle* aio_;
  const CpuOptimizer* optimizer_;
  std::unique_ptr<SwapSpace> space_;
  std::vector<SubGroup> groups_;
  // Pinned buffers, leased from their pools for the swapper's life (sized for the largest
  // sub-group; re-made when a larger one is added).
  std::unique_ptr<PinnedPool> pool_, grad_pool_;
  std::vector<PinnedBuffer> buffers_;
  std::vector<PinnedBuffer> grad_buffers_;     // swap_grads only, one per buffer
  std::unique_ptr<UpdateArena> update_arena_;  // pipelined updates (see update_threads)
  std::vector<SwapFuture> grad_writes_;        // swap_grads only: last WriteGrads per sub-group
  size_t buffer_numel_ = 0;
  uint8_t* region_ = nullptr;  // the slab's first buffer
  size_t region_bytes_ = 0, buffer_stride_ = 0;
  int64_t step_ = 0;
  OptimizerStepStats last_;
};

}  // namespace strata
