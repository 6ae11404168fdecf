// GradRegion: one rank's fp32 gradient partition on NVMe (issue #36, "gradients off the CPU tier")
// — the ZeRO-Infinity counterpart of the pinned gradient partition, so with
// `offload_optimizer.device = nvme` the CPU memory the gradients take is `buffer_count` chunks,
// whatever the model.
//
// Layout. The partition [0, numel) is cut into fixed chunks of `chunk_numel` elements (a multiple
// of kSquaredNormChunk; the last chunk may be short), each one tensor of a SwapSpace named "grad":
// the file `<nvme_path>/strata-grad-rank<R>.swap` next to the optimizer's, flock'ed and
// checksummed per block like every swap file (swap/swap_space.h). All chunks are reserved at
// Create, so a full disk fails there.
//
// It is the gradient reducer's host target (engine/zero/grad/grad_target.h): BeginPass, Add,
// EndPass.
//
// Accumulation (Note [Read-add-write] in grad_region.cc). Reduced gradients arrive as Add(flat,
// src, n) (+=, fp32, element by element in arrival order: the same bits as the host partition's
// adds). A chunk being written lives in one of `buffer_count` pinned chunk buffers; when its room
// is needed it is written to NVMe (asynchronously; the buffer is reused once the write is done).
// A chunk that already holds part of this step's gradient (an earlier micro-batch, or the same
// pass after an eviction) is read back and added into (read-add-write); a chunk no pass of this
// step touched yet starts from zeros without I/O, and one no pass touched at all reads as zeros.
//
// Norm and overflow (Note [Norm as reduced]). On the step's last pass (BeginPass(first, last=true))
// each chunk's norm partial sums (SquaredNormChunkSums, the same chunking and order every backend
// uses) are taken when its values are final: when it leaves its buffer or at EndPass. SquaredNorm()
// adds them in chunk order and HasNonFinite() reads them, so both are bitwise what the in-memory
// NvmeOptimizerState::GradSquaredNorm / GradHasNonFinite give for the same gradients, and nothing
// reads the gradients again before the step.
//
// The step reads a range with Read (from a buffer when the chunk is resident, else from NVMe,
// checksums verified). Errors name the chunk, the swap file and the offset (aio/ and swap/:
// EIO, ENOSPC, short transfers, a checksum mismatch as DataLoss).
//
// Lending (Note [Gradients read in place] in grad_region_lend.cc). An update whose gradients are
// all in add buffers reads them there (Lend: a GradView of the buffers, which stay put until it is
// destroyed) instead of copying them out (Read).
//
// Thread safety: every method may be called from any thread; one mutex serializes them (the
// reducer's add stream adds while the overlapped step's worker reads a finished sub-group's range).
// A lent buffer is read without the mutex: the adds then go to other elements and buffers.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "aio/aio_handle.h"
#include "core/status.h"
#include "engine/zero/grad/grad_target.h"
#include "offload/device/api/device.h"
#include "offload/pinned_pool.h"
#include "offload/tier_budget.h"
#include "swap/swap_space.h"

namespace strata {

// Chunk buffers the engine gives a region to add into: four, so that the writes of the chunks the
// backward has finished (Note [Write-behind] in grad_region.cc) are done by the time their
// buffers are needed again. bench/scale 1b: backward 4.6 s with two, 3.9 s with four (the adds
// waited for each evicted chunk's write).
inline constexpr size_t kGradRegionBuffers = 4;

struct GradRegionOptions {
  std::vector<std::string> nvme_paths;  // offload_optimizer.nvme_path (absolute, existing)
  int rank = 0;
  bool checksums = true;  // strata.swap_checksums
  // Elements per chunk: a positive multiple of kSquaredNormChunk (the norm's chunking).
  size_t chunk_numel = size_t{4} << 20;      // 16 MiB
  size_t buffer_count = kGradRegionBuffers;  // pinned chunk buffers, >= 1
  bool pin_memory = true;
  Device* device = nullptr;      // DMA registration of the buffers (may be null)
  TierBudget* budget = nullptr;  // kCpu: the buffers; kNvme: the region (may be null)
};

// Pinned bytes GradRegion takes for `options` (the memory plan uses it), and the bytes its
// region reserves on NVMe for a partition of `numel`.
uint64_t GradRegionCpuBytes(const GradRegionOptions& options, size_t numel);
// The chunk buffers it makes: buffer_count, but no more than there are chunks, and one more to
// read through when the chunks do not all fit (Note [A buffer to read through]).
size_t GradRegionBufferCount(const GradRegionOptions& options, size_t numel);
uint64_t GradRegionNvmeBytes(size_t chunk_numel, size_t numel);

class GradRegion;

// A range's gradients for an update: one array (a copy, or the host partition: Array), or a
// region's chunk buffers lent in place (GradRegion::Lend), given back when this is destroyed.
class GradView {
 public:
  GradView() = default;
  // data[0, ...) are the gradients of elements flat_begin, flat_begin + 1, ...
  static GradView Array(const float* data, size_t flat_begin);
  GradView(GradView&& o) noexcept { *this = std::move(o); }
  GradView& operator=(GradView&& o) noexcept;
  GradView(const GradView&) = delete;
  GradView& operator=(const GradView&) = delete;
  ~GradView() { GiveBack(); }

  bool empty() const { return data_ == nullptr && region_ == nullptr; }
  bool lent() const { return region_ != nullptr; }
  // Element `flat`'s gradient (in the range), and how many elements from it are contiguous.
  const float* At(size_t flat) const;
  size_t Run(size_t flat) const;

 private:
  friend class GradRegion;
  void GiveBack();
  const float* data_ = nullptr;
  size_t flat_begin_ = 0;
  GradRegion* region_ = nullptr;  // lent: bases_[c - first_chunk_] is chunk c's buffer
  size_t chunk_numel_ = 0, first_chunk_ = 0;
  std::vector<const float*> bases_;
};

class GradRegion final : public GradTarget {
 public:
  // Opens the swap file and reserves every chunk. InvalidArgument for a bad chunk_numel or
  // buffer_count; IoError (ENOSPC) naming the directory; FailedPrecondition when a live process
  // holds the file.
  static Result<std::unique_ptr<GradRegion>> Create(size_t numel, const GradRegionOptions& options,
                                                    AioHandle* aio);
  ~GradRegion() override;  // waits for the writes in flight; the swap file is removed
  GradRegion(const GradRegion&) = delete;
  GradRegion& operator=(const GradRegion&) = delete;

  size_t numel() const { return numel_; }
  size_t chunk_numel() const { return options_.chunk_numel; }
  size_t num_chunks() const { return chunk_ids_.size(); }
  const std::vector<std::string>& files() const { return space_->files(); }
  // Pinned bytes of the chunk buffers; bytes reserved on NVMe.
  uint64_t cpu_bytes() const;
  uint64_t nvme_bytes() const { return space_->reserved_bytes(); }

  // A backward pass (micro-batch) starts. `first`: the step's first pass (every chunk starts from
  // zero); `last`: the step's last one (its final values feed the norm and overflow check).
  // A first pass drops the previous step's gradient (waiting for its writes in flight).
  Status BeginPass(bool first, bool last) override;
  // Elements [flat_begin, flat_begin + n) += src[0, n) (host memory). IoError / DataLoss from a
  // write-out or read-back, naming the chunk, file and offset.
  Status Add(size_t flat_begin, const float* src, size_t n) override;
  // Elements [flat_begin, flat_begin + n) are zero this pass and were not written before in the
  // step (GradTarget::AddZeros): counted as added (Note [A chunk is done when its adds are]), no
  // value changes and no chunk is loaded for them.
  Status AddZeros(size_t flat_begin, size_t n) override;
  // Ends the pass: the last pass takes the resident chunks' norm sums. The chunks stay in their
  // buffers (dirty: written when their room is needed, or by Flush).
  Status EndPass() override;
  // Writes every dirty buffer and waits for every write in flight (the first error).
  Status Flush();

  // out[0, n) = elements [flat_begin, flat_begin + n) of the step's gradient (zeros where no pass
  // added). After EndPass of the last pass.
  Status Read(size_t flat_begin, size_t n, float* out);

  // Note [Gradients of resident states] (grad_region.cc). `hold(flat_begin, flat_end)`: whether
  // the last pass's gradients of those elements will be read (Read) and consumed (Consume) soon,
  // from memory, by updates that are final (the overlapped step's, with their states in the
  // optimizer's buffers). A finished chunk it holds is not written behind: it waits in its buffer,
  // dirty, for its updates (written only if its buffer is needed first). Called under the
  // region's lock from the thread that adds; null (the default) holds nothing.
  void set_hold(std::function<bool(size_t, size_t)> hold) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = std::move(hold);
  }
  // Note [Gradients read in place]. After EndPass of the last pass: when every chunk elements
  // [flat_begin, flat_begin + n) touch is in an add buffer, those buffers lent as a view (they stay
  // until it is destroyed: an add that needs a buffer then waits for one not lent); else an empty
  // view (Read copies them). InvalidArgument / FailedPrecondition as Read.
  Result<GradView> Lend(size_t flat_begin, size_t n);

  // The step is done with elements [flat_begin, flat_begin + n) of the last pass's gradient (their
  // updates are final and have read them). A chunk every element of which is consumed leaves its
  // buffer without a write (its norm sums taken first); reading it again this step is
  // FailedPrecondition, as is consuming a chunk still lent. Chunks not in a buffer are left as
  // they are.
  Status Consume(size_t flat_begin, size_t n);

  // After EndPass of the last pass: the squared norm of the whole gradient (the chunk sums in
  // order), and whether any element is Inf or NaN.
  double SquaredNorm() const;
  bool HasNonFinite() const;

  // Figures since the last call.
  struct Stats {
    uint64_t bytes_written = 0, bytes_read = 0;
  };
  Stats TakeStats() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(stats_, {});
  }

 private:
  struct Buffer {
    PinnedBuffer mem;
    int chunk = -1;  // the chunk it holds, or -1
    bool dirty = false;
    SwapFuture write;  // its last write (waited before the buffer is reused)
    bool writing = false;
    int write_chunk = -1;  // the chunk that write is of
    uint64_t used = 0;     // LRU stamp
    // Note [Copy into a fresh chunk]: elements [0, fresh) of a chunk loaded as zeros are not
    // written yet (they are zero); 0 once the buffer holds every value.
    size_t fresh = 0;
    int lent = 0;  // views reading it (Note [Gradients read in place]): not reused until 0
  };
  GradRegion(size_t numel, const GradRegionOptions& o) : numel_(numel), options_(o) {}
  size_t ChunkNumel(size_t c) const;
  std::string Where(size_t c) const;
  // InvalidArgument unless [flat_begin, flat_begin + n) is in the partition; FailedPrecondition
  // if chunk c was consumed this step (Note [Gradients of resident states]). `what` names the call.
  Status InPartition(const char* what, size_t flat_begin, size_t n) const;
  Status NotConsumed(const char* what, size_t c) const;
  // The buffer holding chunk c, loaded (read back or zeroed) if needed.
  Result<Buffer*> Load(size_t c, bool for_add);
  // Chunk c's current values to read: its add buffer if resident, else the read buffer (Note [A
  // buffer to read through]).
  Result<const float*> ReadView(size_t c);
  // Writes the zeros of b's fresh part (Note [Copy into a fresh chunk]).
  void Materialize(Buffer& b);
  // After an add into chunk c (in buffer b): starts the writes of the chunks this pass has finished
  // (Note [Write-behind] and Note [A chunk is done when its adds are] in grad_region.cc).
  Status WriteBehind(size_t c, Buffer& b);
  // Starts b's write if dirty (taking the norm sums first on the last pass).
  Status WriteOut(Buffer& b);
  Status WaitWrite(Buffer& b);
  void TakeNormSums(size_t c, const float* data);
  friend class GradView;
  void GiveBack(size_t first_chunk, size_t chunks);

  size_t numel_;
  GradRegionOptions options_;
  mutable std::mutex mu_;
  std::condition_variable_any given_back_;  // a lent buffer was given back
  std::unique_ptr<SwapSpace> space_;
  std::unique_ptr<PinnedPool> pool_;
  std::vector<SwapId> chunk_ids_;
  std::vector<Buffer> buffers_;  // the chunks being added into
  PinnedBuffer read_buf_;        // Note [A buffer to read through] (empty: every chunk fits)
  int read_chunk_ = -1;          // the chunk read_buf_ holds, or -1
  std::vector<char> has_data_;   // per chunk: this step wrote it (on NVMe or in a buffer)
  std::vector<char> touched_;    // per chunk: this pass wrote it
  // Note [A chunk is done when its adds are]: per chunk, the elements this pass added, and those
  // the last pass that ended added (empty until one has).
  std::vector<size_t> added_;
  std::vector<size_t> expected_;
  std::vector<double> norm_sums_;
  // Note [Gradients of resident states]: per chunk, the elements Consume has had this step, and
  // whether it left its buffer unwritten that way (not to be read again).
  std::vector<size_t> consumed_;
  std::vector<char> dropped_;
  std::function<bool(size_t, size_t)> hold_;
  // Whether the last pass's finished chunk c is held (hold_).
  bool Held(size_t c) const;
  uint64_t clock_ = 0;
  bool last_pass_ = false;
  bool sums_final_ = false;  // Note [Sums taken once]: the last pass has ended
  Stats stats_;
};

}  // namespace strata
