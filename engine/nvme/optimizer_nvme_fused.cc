// NvmeOptimizerState's fused update (engine/nvme/optimizer_nvme.h): Adam over a sub-group's slot
// tile by tile, with the swap checksums verified and computed while the bytes are in cache.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include "engine/nvme/optimizer_nvme.h"
#include "offload/device/optim/optimizer_kernel_args.h"

namespace strata {
// Note [Fused checksums]
// A sub-group's state in a slot is [params | exp_avg | exp_avg_sq], each part part_bytes apart
// (OptimizerSwapper::PartBytes: 4 KiB aligned, not block aligned), hashed per checksum block
// (swap/, 1 MiB) over the whole extent, padding included. Hashing it after the read and again
// before the write costs two passes from DRAM on the cores that run Adam. Here the update runs
// over the optimizer's tiles (tile_numel elements in all three parts at once) in one parallel
// loop, as CpuOptimizer::StepAt does, and per block:
// - before a tile touches a block whose read is not verified yet, the block is hashed and
//   compared with the last write's checksum (SwapSpace::VerifyBlocks: the same DataLoss naming
//   tensor, file and offset) by the first tile to need it, while tiles of the other thread that
//   need it wait; the bytes are then in cache for Adam. A block straddling two parts is verified
//   before the first tile of either part touches it.
// - a count of the (tile, part) pairs that touch it; the tile that brings it to zero hashes it
//   for the write (its last bytes just written, in cache), so a straddling block is hashed once
//   both parts are done. Blocks with no element (padding only) are verified with their hash kept
//   (their bytes do not change), or hashed, before the loop.
// No barrier per piece: a thread only waits for a block another one is verifying. CpuOptimizer
// computes every element by the same instruction sequence whatever the range
// (cpu_adam/cpu_optimizer.h), so the tiles give the bits of one call over the sub-group
// (tests/engine/nvme/optimizer_nvme_fused_test.cc). A mismatch stops every tile not started,
// drops the slot (its buffer is part-updated) and writes nothing. With grad_checks the tile also
// takes the gradient norm's chunk sums of its gradients while they are in cache: the tiles lie on
// the partition's multiples of tile_numel (a multiple of the norm's chunk by default), so each
// holds whole chunks; the chunks across the sub-group's edges are left to the step's norm.
// Note [Sums for the writes to come]
// The fused update hashed every block it had just updated for the write to follow, while the
// bytes were in cache. But write-back (Note [Write-back] in optimizer_nvme_async.cc) writes a
// state only when its room is needed or on a drain: with the buffers holding every state
// (bench/overlap with 6 buffers) no state is written between two of its updates, and with 4 (five
// of its eight states resident) most are not, so those sums were dropped unused by the next
// update (12 bytes a parameter, 404 MB a step in bench/overlap with every state resident, hashed
// on the cores the backward runs on). Now an update hashes for the write only when its state was
// written to NVMe since its last update (or was never updated: a first step hashes everything):
// each step updates every sub-group in the same order, so the buffers tend to keep through the next
// cycle the states they kept through the last. A state written without the update's sums is hashed
// by StartWrite, on the thread that starts the write, from memory: the prediction moves the
// hashing, it never drops a checksum (tests/engine/nvme/optimizer_nvme_fused_test.cc).
Status NvmeOptimizerState::UpdateFused(int i, size_t k, int64_t step, const Hyperparams& hp,
                                       float grad_scale, const GradView& grads, uint8_t* copy,
                                       DType copy_dtype, bool grad_checks) {
  Slot& slot = slots_[k];
  const SubGroup& g = groups_[static_cast<size_t>(i)];
  const size_t n = g.numel();
  const int idx = swap_index_[static_cast<size_t>(i)];
  const size_t at = slot.offset;
  const size_t blk = swapper_->checksum_block_bytes();
  const size_t part = swapper_->part_bytes(idx);
  const size_t total = 3 * part;
  const size_t blocks = swapper_->num_blocks(idx);
  // Tiles on the partition's multiples of the tile size (a multiple of the norm's chunk when
  // tile_numel is, as by default), so a tile holds whole chunks but at the sub-group's edges.
  const size_t tile = std::max<size_t>(optimizer_.options().tile_numel, 64);
  const size_t lead = g.flat_begin % tile;  // elements of the first tile before the sub-group
  const size_t tiles = (lead + n + tile - 1) / tile;
  // Note [Sums for the writes to come]
  const bool for_write = written_since_update_[static_cast<size_t>(i)] != 0;
  written_since_update_[static_cast<size_t>(i)] = 0;
  auto tile_range = [&](size_t t) {
    return std::pair<size_t, size_t>(t == 0 ? 0 : t * tile - lead,
                                     std::min(n, (t + 1) * tile - lead));
  };
  const OptimizerSwapper::StateView v = SlotState(k);
  const auto* bytes = reinterpret_cast<const uint8_t*>(v.params);
  // Blocks [first, last] of part j that elements [e0, e1) touch.
  auto block_range = [&](size_t j, size_t e0, size_t e1) {
    const size_t base = j * part;
    return std::pair<size_t, size_t>((base + e0 * sizeof(float)) / blk,
                                     (base + e1 * sizeof(float) - 1) / blk);
  };
  auto hash = [&](size_t b) {
    return SwapSpace::BlockChecksum(bytes + b * blk, std::min(blk, total - b * blk));
  };

  // Per block: the (tile, part) pairs still to update it, and its verification state.
  enum : int { kUnverified = 0, kVerifying = 1, kVerified = 2, kBad = 3 };
  std::vector<std::atomic<uint32_t>> pending(blocks);
  std::vector<std::atomic<int>> state(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    pending[b].store(0, std::memory_order_relaxed);
    const bool todo = slot.deferred && (slot.verified.empty() || !slot.verified[b]);
    state[b].store(todo ? kUnverified : kVerified, std::memory_order_relaxed);
  }
  for (size_t t = 0; t < tiles; ++t) {
    const auto [e0, e1] = tile_range(t);
    for (size_t j = 0; j < 3; ++j) {
      const auto [first, last] = block_range(j, e0, e1);
      for (size_t b = first; b <= last; ++b) pending[b].fetch_add(1, std::memory_order_relaxed);
    }
  }
  std::vector<uint64_t> sums(blocks, 0);
  auto read_context = [i] { return "offload_optimizer nvme: read sub-group " + std::to_string(i); };
  std::mutex error_mu;
  Status error;
  std::atomic<bool> failed{false};
  auto fail = [&](Status s) {
    std::lock_guard lock(error_mu);
    if (error.ok()) error = std::move(s);
    failed.store(true, std::memory_order_relaxed);
  };
  // Padding-only blocks, before the loop: verified (the hash kept) or hashed.
  for (size_t b = 0; b < blocks; ++b) {
    if (pending[b].load(std::memory_order_relaxed) != 0) continue;
    if (state[b].load(std::memory_order_relaxed) == kUnverified) {
      Status s = swapper_->VerifyBlocksAt(idx, at, b, 1, &sums[b]);
      if (!s.ok()) {
        fail(s.WithContext(read_context()));
        break;
      }
      state[b].store(kVerified, std::memory_order_relaxed);
    } else if (for_write) {
      sums[b] = hash(b);
    }
  }
  // Blocks the tile's elements touch, verified (by this thread, or waited for); false on error.
  auto verify = [&](size_t b) {
    int st = state[b].load(std::memory_order_acquire);
    if (st == kUnverified && state[b].compare_exchange_strong(st, kVerifying)) {
      Status s = swapper_->VerifyBlocksAt(idx, at, b, 1);
      if (!s.ok()) {
        state[b].store(kBad, std::memory_order_release);
        fail(s.WithContext(read_context()));
        return false;
      }
      state[b].store(kVerified, std::memory_order_release);
      return true;
    }
    while ((st = state[b].load(std::memory_order_acquire)) == kVerifying) {
      std::this_thread::yield();  // another tile hashes it (one block: tens of microseconds)
    }
    return st == kVerified;
  };

  const size_t cbytes = DTypeBytes(copy_dtype);
  StepOptions so;
  so.grad_scale = grad_scale;
  auto run_tile = [&](size_t t) {
    if (failed.load(std::memory_order_relaxed)) return;
    const auto [e0, e1] = tile_range(t);
    for (size_t j = 0; j < 3; ++j) {
      const auto [first, last] = block_range(j, e0, e1);
      for (size_t b = first; b <= last; ++b) {
        if (!verify(b)) return;
      }
    }
    // One tile, run here; in two pieces where a lent gradient's chunk edge crosses it (Note
    // [Gradients read in place] in grad_region_lend.cc: the same bits).
    for (size_t a = e0; a < e1;) {
      const size_t b = a + std::min(e1 - a, grads.Run(g.flat_begin + a));
      StepTensors st;
      st.numel = b - a;
      st.params = v.params + a;
      st.exp_avg = v.exp_avg + a;
      st.exp_avg_sq = v.exp_avg_sq + a;
      st.grads = grads.At(g.flat_begin + a);
      st.grad_dtype = DType::kFloat32;
      st.param_copy = copy == nullptr ? nullptr : copy + a * cbytes;
      st.param_copy_dtype = copy_dtype;
      Status u = optimizer_.StepAt(hp, step, st, so);
      if (!u.ok()) {
        fail(u.WithContext("offload_optimizer nvme: update sub-group " + std::to_string(i)));
        return;
      }
      a = b;
    }
    // The tile's gradients were just read: their norm chunks, while in cache.
    if (grad_checks) {
      const auto [c0, c1] = WholeChunks(g.flat_begin + e0, g.flat_begin + e1);
      SumNormChunksHere(c0, c1);
    }
    for (size_t j = 0; j < 3; ++j) {
      const auto [first, last] = block_range(j, e0, e1);
      for (size_t b = first; b <= last; ++b) {
        if (pending[b].fetch_sub(1, std::memory_order_acq_rel) == 1 && for_write) sums[b] = hash(b);
      }
    }
  };
  if (!failed.load()) {
    // As StepAt: simple_partitioner with grain 1, so each thread walks a contiguous run of tiles.
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, tiles, 1),
        [&](const tbb::blocked_range<size_t>& r) {
          for (size_t t = r.begin(); t != r.end(); ++t) run_tile(t);
        },
        tbb::simple_partitioner());
  }
  if (failed.load()) {
    FreeSlot(k);  // the buffer is part-updated: not a valid copy of anything
    return error;
  }
  // A tile size that is not a multiple of the norm's chunk leaves chunks across tiles: summed here.
  if (grad_checks && tile % kSquaredNormChunk != 0) PrecomputeGradChecks(g.flat_begin, g.flat_end);
  slot.deferred = false;
  slot.verified.clear();
  if (for_write) {
    slot.write_sums = std::move(sums);
    slot.sums_ready = true;
    async_stats_.bytes_hashed_at_update += total;
  } else {
    slot.write_sums.clear();
    slot.sums_ready = false;
  }
  return Status::Ok();
}

Status NvmeOptimizerState::VerifyRest(size_t k) {
  Slot& slot = slots_[k];
  if (!slot.deferred) return Status::Ok();
  const int idx = swap_index_[static_cast<size_t>(slot.sg)];
  const size_t blocks = swapper_->num_blocks(idx);
  if (slot.verified.size() != blocks) slot.verified.assign(blocks, 0);
  for (size_t b = 0; b < blocks; ++b) {
    if (slot.verified[b]) continue;
    STRATA_RETURN_IF_ERROR(swapper_->VerifyBlocksAt(idx, slot.offset, b, 1));
    slot.verified[b] = 1;
  }
  slot.deferred = false;
  slot.verified.clear();
  return Status::Ok();
}

}  // namespace strata
