#include "engine/nvme/grad_region.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "aio/direct/aligned_buffer.h"
#include "core/units.h"
#include "offload/device/optim/optimizer_kernel_args.h"
#include "offload/device/optim/optimizer_kernels.h"

namespace strata {

// Note [Read-add-write]
// With gradient accumulation the second micro-batch's gradient is added into the stored one. Two
// ways keep that bounded: read each chunk back, add, write it again (read-add-write), or keep the
// whole step's sum in memory until the last micro-batch. The second is the partition in RAM again
// (what this region exists to remove), so the region reads back: a chunk costs one read and one
// write per extra micro-batch, and only when its room in the buffers was needed in between
// (backward reduces a model's parameters in the same order each micro-batch, so with one chunk of
// room the chunks cycle through the buffers once per pass). The adds are element by element in
// arrival order, as the host partition's, so the stored sum has the same bits.

// Note [Norm as reduced]
// The global norm (clipping) and the overflow check need every element of the step's final
// gradient. Taking them as the gradients are written (the last pass: a chunk's values are final
// once that pass is done with it) saves a pass over the whole region before the step. Chunks are a
// multiple of kSquaredNormChunk and start on one, so each chunk's SquaredNormChunkSums are exactly
// the norm chunks the in-memory path sums (the same elements in the same order); SquaredNorm adds
// them in chunk order as NvmeOptimizerState::GradSquaredNorm does. A chunk evicted and touched
// again in the same pass has its sums taken again; one with data from an earlier micro-batch only
// is read back at EndPass for its sums; one never written sums to 0 (as zeros would).

// Note [Sums taken once]
// Once the last pass has ended (EndPass) every chunk's sums are taken from its final values, and
// nothing adds to it until the next step's first pass. So a chunk that leaves its buffer after
// that, consumed by a deferred update or written out to make room, keeps its sums: taking them
// again was a pass over the chunk (16 MiB by default: 1-3 ms from DRAM) under the region's lock,
// on the worker's path between two updates, for the same bits. Before EndPass (an update
// final during the backward) the sums are still taken as the chunk leaves.

// Note [A buffer to read through]
// The overlapped step reads a finished sub-group's gradients while the backward still adds into
// later chunks. Read through the add buffers' LRU, each such read evicted a chunk being added into
// (written, then read back at its next add): measured in bench/overlap's io size with parameters
// on NVMe, 401 MB written and 290 MB read per step for a 135 MB gradient. So a read of a chunk
// that is not in an add buffer goes through a buffer of its own (clean: never written back),
// valid until an add touches its chunk; the add buffers then hold only what is being added.

uint64_t GradRegionCpuBytes(const GradRegionOptions& options, size_t numel) {
  // As PinnedPool rounds its buffers: to 2 MiB from 2 MiB on, else to 4 KiB.
  const size_t n = std::max<size_t>(std::min(options.chunk_numel, numel), 1);
  const size_t bytes = n * sizeof(float);
  const size_t align =
      bytes >= AlignedBuffer::kHugePageBytes ? AlignedBuffer::kHugePageBytes : size_t{4096};
  return uint64_t{(bytes + align - 1) / align * align} * GradRegionBufferCount(options, numel);
}

size_t GradRegionBufferCount(const GradRegionOptions& options, size_t numel) {
  if (options.chunk_numel == 0) return options.buffer_count;
  const size_t chunks =
      std::max<size_t>((numel + options.chunk_numel - 1) / options.chunk_numel, 1);
  return chunks > options.buffer_count ? options.buffer_count + 1 : chunks;
}

uint64_t GradRegionNvmeBytes(size_t chunk_numel, size_t numel) {
  // SwapSpace's extents: one per chunk, 4 KiB aligned.
  if (chunk_numel == 0) return 0;
  const uint64_t full = numel / chunk_numel, rest = numel % chunk_numel;
  auto extent = [](uint64_t n) { return (n * sizeof(float) + 4095) / 4096 * 4096; };
  return full * extent(chunk_numel) + (rest > 0 ? extent(rest) : 0);
}

Result<std::unique_ptr<GradRegion>> GradRegion::Create(size_t numel,
                                                       const GradRegionOptions& options,
                                                       AioHandle* aio) {
  if (options.chunk_numel == 0 || options.chunk_numel % kSquaredNormChunk != 0) {
    return InvalidArgumentError("gradient region: chunk of " + std::to_string(options.chunk_numel) +
                                " elements must be a positive multiple of " +
                                std::to_string(kSquaredNormChunk));
  }
  if (options.buffer_count < 1) {
    return InvalidArgumentError("gradient region: buffer_count must be at least 1");
  }
  if (numel == 0) return InvalidArgumentError("gradient region: empty partition");
  std::unique_ptr<GradRegion> r(new GradRegion(numel, options));
  SwapSpaceOptions so;
  so.dirs = options.nvme_paths;
  so.name = "grad";
  so.rank = options.rank;
  so.checksums = options.checksums;
  so.budget = options.budget;
  auto space = SwapSpace::Create(so, aio);
  if (!space.ok()) return space.status().WithContext("gradient region");
  r->space_ = std::move(space).value();
  const size_t chunks = (numel + options.chunk_numel - 1) / options.chunk_numel;
  for (size_t c = 0; c < chunks; ++c) {
    auto id = r->space_->Reserve(r->ChunkNumel(c) * sizeof(float));
    if (!id.ok()) {
      return id.status().WithContext("gradient region: reserving chunk " + std::to_string(c) +
                                     " of " + std::to_string(chunks) + " (" +
                                     FormatBytes(numel * sizeof(float)) + " in all)");
    }
    r->chunk_ids_.push_back(*id);
  }
  PinnedPoolOptions po;
  po.buffer_bytes = std::min(options.chunk_numel, numel) * sizeof(float);
  po.buffer_count = GradRegionBufferCount(options, numel);
  po.lock = options.pin_memory;
  po.device = options.device;
  po.budget = options.budget;
  po.name = "gradient region buffers (offload_optimizer nvme)";
  STRATA_ASSIGN_OR_RETURN(r->pool_, PinnedPool::Create(po));
  r->buffers_.resize(std::min(options.buffer_count, chunks));
  for (Buffer& b : r->buffers_) b.mem = r->pool_->Acquire();
  if (po.buffer_count > r->buffers_.size()) r->read_buf_ = r->pool_->Acquire();
  r->has_data_.assign(chunks, 0);
  r->touched_.assign(chunks, 0);
  r->added_.assign(chunks, 0);
  r->consumed_.assign(chunks, 0);
  r->dropped_.assign(chunks, 0);
  r->norm_sums_.assign(SquaredNormChunks(numel), 0.0);
  return r;
}

GradRegion::~GradRegion() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Buffer& b : buffers_) WaitWrite(b).IgnoreError();
}

uint64_t GradRegion::cpu_bytes() const { return pool_->buffer_bytes() * pool_->buffer_count(); }

size_t GradRegion::ChunkNumel(size_t c) const {
  return std::min(options_.chunk_numel, numel_ - c * options_.chunk_numel);
}

std::string GradRegion::Where(size_t c) const {
  const size_t b = c * options_.chunk_numel;
  return "gradient region chunk " + std::to_string(c) + " (elements [" + std::to_string(b) + ", " +
         std::to_string(b + ChunkNumel(c)) + "))";
}

void GradRegion::TakeNormSums(size_t c, const float* data) {
  SquaredNormChunkSums(data, ChunkNumel(c),
                       norm_sums_.data() + c * (options_.chunk_numel / kSquaredNormChunk));
}

Status GradRegion::WaitWrite(Buffer& b) {
  if (!b.writing) return Status::Ok();
  b.writing = false;
  Status s = b.write.Wait();
  if (!s.ok()) return s.WithContext("write of " + Where(static_cast<size_t>(b.write_chunk)));
  return Status::Ok();
}

Status GradRegion::WriteOut(Buffer& b) {
  if (!b.dirty) return Status::Ok();
  STRATA_RETURN_IF_ERROR(WaitWrite(b));  // one write of a buffer at a time
  const size_t c = static_cast<size_t>(b.chunk);
  Materialize(b);
  if (last_pass_ && !sums_final_) TakeNormSums(c, static_cast<const float*>(b.mem.data()));
  b.write = space_->Write(chunk_ids_[c], b.mem.data());
  b.writing = true;
  b.write_chunk = b.chunk;
  b.dirty = false;
  stats_.bytes_written += ChunkNumel(c) * sizeof(float);
  return Status::Ok();
}

Result<GradRegion::Buffer*> GradRegion::Load(size_t c, bool for_add) {
  for (Buffer& b : buffers_) {
    if (b.chunk != static_cast<int>(c)) continue;
    // Its write (if any) reads the buffer: an add waits for it, and a later write needs it done.
    if (for_add) STRATA_RETURN_IF_ERROR(WaitWrite(b));
    b.used = ++clock_;
    return &b;
  }
  // Room: an empty buffer, else the least recently used of those whose chunk is written (or
  // being written: Note [A chunk is done when its adds are]), else the least recently used; never
  // one lent to an update (Note [Gradients read in place] in grad_region_lend.cc: waited for, it
  // is given back without this lock).
  Buffer* v = nullptr;
  for (;;) {
    for (Buffer& b : buffers_) {
      if (b.lent > 0) continue;
      if (b.chunk < 0) {
        v = &b;
        break;
      }
      if (v == nullptr || (b.dirty != v->dirty ? !b.dirty : b.used < v->used)) v = &b;
    }
    if (v != nullptr) break;
    given_back_.wait(mu_);  // the caller holds mu_
  }
  STRATA_RETURN_IF_ERROR(WriteOut(*v));
  STRATA_RETURN_IF_ERROR(WaitWrite(*v));
  v->chunk = -1;
  const size_t n = ChunkNumel(c);
  if (has_data_[c] != 0) {  // its values are on NVMe (it left a buffer only through a write)
    Status s = space_->Read(chunk_ids_[c], v->mem.data()).Wait();
    if (!s.ok()) return s.WithContext("read of " + Where(c));
    stats_.bytes_read += n * sizeof(float);
    v->fresh = 0;
  } else {
    v->fresh = n;  // zeros, written as they are needed (Note [Copy into a fresh chunk])
  }
  v->chunk = static_cast<int>(c);
  v->dirty = false;
  v->used = ++clock_;
  return v;
}

Result<const float*> GradRegion::ReadView(size_t c) {
  for (Buffer& b : buffers_) {
    if (b.chunk == static_cast<int>(c)) {
      Materialize(b);
      return static_cast<const float*>(b.mem.data());
    }
  }
  if (read_buf_.data() == nullptr) {  // every chunk has an add buffer: none is ever evicted
    STRATA_ASSIGN_OR_RETURN(Buffer * b, Load(c, false));
    Materialize(*b);
    return static_cast<const float*>(b->mem.data());
  }
  if (read_chunk_ != static_cast<int>(c)) {
    // Not in an add buffer: it left one through a write, waited for then (Load's eviction).
    read_chunk_ = -1;
    Status s = space_->Read(chunk_ids_[c], read_buf_.data()).Wait();
    if (!s.ok()) return s.WithContext("read of " + Where(c));
    stats_.bytes_read += ChunkNumel(c) * sizeof(float);
    read_chunk_ = static_cast<int>(c);
  }
  return static_cast<const float*>(read_buf_.data());
}

Status GradRegion::BeginPass(bool first, bool last) {
  std::lock_guard<std::mutex> lock(mu_);
  if (first) {  // the previous step's values are dropped; no write of them may be in flight
    for (const Buffer& b : buffers_) {
      if (b.lent > 0) {
        return FailedPreconditionError("gradient region: a new step began while " +
                                       Where(static_cast<size_t>(b.chunk)) +
                                       " is lent to an update");
      }
    }
    for (Buffer& b : buffers_) {
      Status s = WaitWrite(b);
      b.chunk = -1;
      b.dirty = false;
      if (!s.ok()) return s;
    }
    std::fill(has_data_.begin(), has_data_.end(), 0);
    std::fill(consumed_.begin(), consumed_.end(), 0);
    std::fill(dropped_.begin(), dropped_.end(), 0);
    read_chunk_ = -1;
  }
  std::fill(touched_.begin(), touched_.end(), 0);
  std::fill(added_.begin(), added_.end(), 0);
  last_pass_ = last;
  sums_final_ = false;
  if (last) std::fill(norm_sums_.begin(), norm_sums_.end(), 0.0);
  return Status::Ok();
}

Status GradRegion::InPartition(const char* what, size_t flat_begin, size_t n) const {
  if (flat_begin <= numel_ && n <= numel_ - flat_begin) return Status::Ok();
  return InvalidArgumentError(std::string("gradient region: ") + what + " [" +
                              std::to_string(flat_begin) + ", " + std::to_string(flat_begin + n) +
                              ") outside the partition of " + std::to_string(numel_));
}

Status GradRegion::NotConsumed(const char* what, size_t c) const {
  if (dropped_[c] == 0) return Status::Ok();
  return FailedPreconditionError(std::string("gradient region: ") + what + " " + Where(c) +
                                 " after this step's updates consumed it");
}

Status GradRegion::Add(size_t flat_begin, const float* src, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(InPartition("add to", flat_begin, n));
  // Note [Write-behind]: the chunks last to first, as the backward reaches them.
  const size_t cn = options_.chunk_numel;
  for (size_t end = flat_begin + n; end > flat_begin;) {
    const size_t c = (end - 1) / cn;
    const size_t start = std::max(flat_begin, c * cn);
    // Its values left unwritten: an add now would start from stale ones.
    STRATA_RETURN_IF_ERROR(NotConsumed("add to", c));
    STRATA_ASSIGN_OR_RETURN(Buffer * b, Load(c, true));
    if (read_chunk_ == static_cast<int>(c)) read_chunk_ = -1;  // its copy is out of date now
    // Note [Copy into a fresh chunk]: [lo, hi) in the chunk; below b->fresh it is zeros not
    // written yet, so those elements are copied (the gap up to the fresh part zeroed first).
    const size_t lo = start - c * cn, hi = end - c * cn;
    float* __restrict dst = static_cast<float*>(b->mem.data());
    const float* __restrict s = src + (start - flat_begin) - lo;
    if (lo < b->fresh) {
      if (hi < b->fresh) std::memset(dst + hi, 0, (b->fresh - hi) * sizeof(float));
      const size_t copy_end = std::min(hi, b->fresh);
      std::memcpy(dst + lo, s + lo, (copy_end - lo) * sizeof(float));
      for (size_t i = copy_end; i < hi; ++i) dst[i] += s[i];
      b->fresh = lo;
    } else {
      for (size_t i = lo; i < hi; ++i) dst[i] += s[i];
    }
    b->dirty = true;
    has_data_[c] = 1;
    touched_[c] = 1;
    added_[c] += hi - lo;
    STRATA_RETURN_IF_ERROR(WriteBehind(c, *b));
    end = start;
  }
  return Status::Ok();
}

Status GradRegion::AddZeros(size_t flat_begin, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(InPartition("zeros for", flat_begin, n));
  const size_t cn = options_.chunk_numel;
  for (size_t end = flat_begin + n; end > flat_begin;) {
    const size_t c = (end - 1) / cn;
    const size_t start = std::max(flat_begin, c * cn);
    STRATA_RETURN_IF_ERROR(NotConsumed("zeros for", c));
    // The elements are +0.0 wherever the chunk is (fresh, in a buffer or on NVMe): only the count
    // moves, and a chunk in a buffer that it completes is written behind as after an add.
    added_[c] += end - start;
    for (Buffer& b : buffers_) {
      if (b.chunk == static_cast<int>(c)) STRATA_RETURN_IF_ERROR(WriteBehind(c, b));
    }
    end = start;
  }
  return Status::Ok();
}

// Note [Copy into a fresh chunk]
// A chunk no pass has written yet is zeros. Zeroing its buffer and adding into it is two passes
// over memory and a read of the zeros; instead the buffer remembers the part not yet written
// (Buffer::fresh: elements [0, fresh), the backward fills from the top down), an add into it
// copies (0 + x is x for every x but -0.0, which becomes +0.0: the host partition's first write,
// Note [Copy first] in engine/zero/grad/grad_reducer.cc, copies too, so the two placements keep the
// same bits), and whatever reads the whole buffer (its write, a read, the norm) zeroes what is
// still fresh first (Materialize). bench/scale 1b: the backward's adds (4.4 GB of fp32 a step)
// were bound by the zeroing and the extra read.
void GradRegion::Materialize(Buffer& b) {
  if (b.fresh == 0) return;
  std::memset(b.mem.data(), 0, b.fresh * sizeof(float));
  b.fresh = 0;
}

// Note [Write-behind]
// The backward reduces the gradients from the last parameter to the first, so the region fills
// from its last chunk down. A chunk this pass has finished is written at once, in the background,
// instead of when its buffer is next needed: an eviction then finds its write done or nearly (it
// waited for a whole 16 MiB write before, one chunk at a time: bench/scale's backward was bound
// by that). Which chunks are finished: Note [A chunk is done when its adds are]. Out-of-order adds
// stay correct: an add into a chunk whose write is in flight waits for it (Load), and the chunk is
// written again later. Nothing is written behind when every chunk has a buffer of its own (then
// none is ever evicted).
//
// Note [A chunk is done when its adds are]
// "Done" is not "below the add": a layer's norms come last in its flat range but their gradients
// after the attention's, so a chunk holding them receives a late add after the backward moved
// below it. Written behind as soon as the add moved below, such a chunk was read back, added into
// and written again: bench/scale 3.3B wrote 20.2 GB of gradients per backward for a 13.2 GB
// region and read 4.8 GB back. The adds are the same every pass (the same parameters, reduced in
// the same order), so the region counts the elements each pass adds to each chunk, and from the
// second pass on a chunk is done when it has received as many as the last pass gave it. Until a
// pass has ended (no counts yet) the chunks above the one being added into are taken as done. A
// count that is wrong (the adds changed) costs I/O, not values: a late add reads the chunk back.
// The eviction (Load) takes a buffer whose chunk is written first, so an unfinished chunk waits
// in its buffer for its late adds while the finished ones stream through the others.
Status GradRegion::WriteBehind(size_t c, Buffer& b) {
  if (buffers_.size() >= num_chunks()) return Status::Ok();
  if (!expected_.empty()) {
    return added_[c] >= expected_[c] && !Held(c) ? WriteOut(b) : Status::Ok();
  }
  for (Buffer& o : buffers_) {
    if (o.chunk > static_cast<int>(c) && o.dirty && !Held(static_cast<size_t>(o.chunk))) {
      STRATA_RETURN_IF_ERROR(WriteOut(o));
    }
  }
  return Status::Ok();
}

// Note [Gradients of resident states]
// Written behind (Note [Write-behind]), every finished chunk went to NVMe, also those whose
// updates read them a moment later from the same buffer: with the overlapped step the sub-groups
// whose optimizer states are already in the swap buffers are updated as soon as their gradients
// are complete, so their chunks were written and never read back (bench/overlap's compute size:
// the whole 135 MB gradient written a step, 0 bytes read). So on the last pass a finished chunk
// that the optimizer holds (set_hold: each sub-group it touches has its state in a swap buffer,
// and the step's updates are final) is not written: it stays in its buffer, dirty, until the
// updates of every element in it have consumed it (Consume), and then leaves the buffer unwritten,
// with its norm sums taken first (Note [Norm as reduced]). The buffers stay the region's fixed
// count: a held chunk whose buffer is needed before its updates come is written out then, as any
// dirty chunk (Load), so the gradients of a sub-group whose state is not resident still go to NVMe,
// and nothing waits for an update. The chunks of the sub-groups whose states must be read still
// go to NVMe behind the backward and are read back with their states, as before.
bool GradRegion::Held(size_t c) const {
  if (!last_pass_ || !hold_) return false;
  const size_t b = c * options_.chunk_numel;
  return hold_(b, b + ChunkNumel(c));
}

Status GradRegion::Consume(size_t flat_begin, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(InPartition("consume of", flat_begin, n));
  if (!last_pass_) return Status::Ok();  // earlier passes' sums are still to be added to
  const size_t cn = options_.chunk_numel;
  for (size_t e = flat_begin, end = flat_begin + n; e < end;) {
    const size_t c = e / cn;
    const size_t stop = std::min(end, c * cn + ChunkNumel(c));
    consumed_[c] += stop - e;
    e = stop;
    if (consumed_[c] < ChunkNumel(c)) continue;
    for (Buffer& b : buffers_) {
      if (b.chunk != static_cast<int>(c)) continue;
      if (b.lent > 0) {
        return FailedPreconditionError("gradient region: consume of " + Where(c) +
                                       " while it is lent to an update");
      }
      if (!sums_final_) {  // Note [Sums taken once]
        Materialize(b);
        TakeNormSums(c, static_cast<const float*>(b.mem.data()));
      }
      b.chunk = -1;  // a write still in flight is waited for before the buffer is reused (Load)
      b.dirty = false;
      dropped_[c] = 1;
    }
    if (read_chunk_ == static_cast<int>(c)) read_chunk_ = -1;
  }
  return Status::Ok();
}

Status GradRegion::EndPass() {
  std::lock_guard<std::mutex> lock(mu_);
  expected_ = added_;  // Note [A chunk is done when its adds are]
  if (!last_pass_) return Status::Ok();
  // Note [Norm as reduced]: the resident chunks' final values, then those only earlier passes
  // wrote (read back once).
  // A chunk consumed already had its sums taken as it left its buffer.
  std::vector<char> summed(dropped_.begin(), dropped_.end());
  for (Buffer& b : buffers_) {
    if (b.chunk < 0 || has_data_[static_cast<size_t>(b.chunk)] == 0) continue;
    Materialize(b);
    TakeNormSums(static_cast<size_t>(b.chunk), static_cast<const float*>(b.mem.data()));
    summed[static_cast<size_t>(b.chunk)] = 1;
  }
  for (size_t c = 0; c < num_chunks(); ++c) {
    if (has_data_[c] == 0 || touched_[c] != 0 || summed[c] != 0) continue;
    STRATA_ASSIGN_OR_RETURN(const float* v, ReadView(c));
    TakeNormSums(c, v);
  }
  sums_final_ = true;
  return Status::Ok();
}

Status GradRegion::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  Status first;
  for (Buffer& b : buffers_) {
    Status s = WriteOut(b);
    if (s.ok()) s = WaitWrite(b);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status GradRegion::Read(size_t flat_begin, size_t n, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(InPartition("read of", flat_begin, n));
  const size_t cn = options_.chunk_numel;
  for (size_t e = flat_begin, end = flat_begin + n; e < end;) {
    const size_t c = e / cn;
    const size_t stop = std::min(end, c * cn + ChunkNumel(c));
    float* dst = out + (e - flat_begin);
    STRATA_RETURN_IF_ERROR(NotConsumed("read of", c));
    if (has_data_[c] == 0) {
      std::memset(dst, 0, (stop - e) * sizeof(float));
    } else {
      STRATA_ASSIGN_OR_RETURN(const float* v, ReadView(c));
      std::memcpy(dst, v + (e - c * cn), (stop - e) * sizeof(float));
    }
    e = stop;
  }
  return Status::Ok();
}

double GradRegion::SquaredNorm() const {
  std::lock_guard<std::mutex> lock(mu_);
  double total = 0;
  for (const double s : norm_sums_) total += s;
  return total;
}

bool GradRegion::HasNonFinite() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(norm_sums_.begin(), norm_sums_.end(),
                     [](double s) { return !std::isfinite(s); });
}

}  // namespace strata
