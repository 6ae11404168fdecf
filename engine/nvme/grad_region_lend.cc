// GradRegion's loans (engine/nvme/grad_region.h): an update reads its gradients in the region's
// add buffers instead of a copy of them, and GradView, what it reads them through.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/nvme/grad_region.h"

namespace strata {

// Note [Gradients read in place]
// An update read its sub-group's gradients through Read: a copy into the optimizer's slab (one
// pass over 4 bytes a parameter, read and written) under the region's lock, then the update read
// the copy again. With the states resident the gradients are in add buffers (held: Note
// [Gradients of resident states]), so the copy was all the step paid to read them: bench/overlap's
// io size with every state in the swap buffers, 1.6-2.6 ms of copy per 4.2M-element update
// against 4.6-8 for the update itself, on the core the backward's adds share. Lend hands the
// update the buffers themselves, per chunk (the update splits its tiles at chunk edges: each
// element still sees the same instructions, so the same bits). A lent buffer keeps its chunk: it
// is never chosen for room (Load waits for a buffer not lent; the update given the loan never
// waits on the adds, so the wait ends), nor dropped by Consume or a new step; it may still be
// written out (the write only reads it) and added into at elements the loan does not read (the
// update's elements are final: the same bytes are never written and read at once). Chunks not in
// an add buffer are read as before: the read-through buffer is replaced by the next read.
Result<GradView> GradRegion::Lend(size_t flat_begin, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(InPartition("read of", flat_begin, n));
  GradView v;
  if (n == 0) return v;
  const size_t cn = options_.chunk_numel;
  const size_t first = flat_begin / cn, last = (flat_begin + n - 1) / cn;
  std::vector<Buffer*> found;
  for (size_t c = first; c <= last; ++c) {
    STRATA_RETURN_IF_ERROR(NotConsumed("read of", c));
    auto it = std::find_if(buffers_.begin(), buffers_.end(),
                           [c](const Buffer& b) { return b.chunk == static_cast<int>(c); });
    if (it == buffers_.end()) return v;  // not all in add buffers: Read
    found.push_back(&*it);
  }
  for (Buffer* b : found) {
    Materialize(*b);
    ++b->lent;
    v.bases_.push_back(static_cast<const float*>(b->mem.data()));
  }
  v.region_ = this;
  v.flat_begin_ = flat_begin;
  v.chunk_numel_ = cn;
  v.first_chunk_ = first;
  return v;
}

void GradRegion::GiveBack(size_t first_chunk, size_t chunks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t c = first_chunk; c < first_chunk + chunks; ++c) {
      for (Buffer& b : buffers_) {
        if (b.chunk == static_cast<int>(c) && b.lent > 0) --b.lent;
      }
    }
  }
  given_back_.notify_all();
}

GradView GradView::Array(const float* data, size_t flat_begin) {
  GradView v;
  v.data_ = data;
  v.flat_begin_ = flat_begin;
  return v;
}

GradView& GradView::operator=(GradView&& o) noexcept {
  if (this == &o) return *this;
  GiveBack();
  data_ = std::exchange(o.data_, nullptr);
  flat_begin_ = o.flat_begin_;
  region_ = std::exchange(o.region_, nullptr);
  chunk_numel_ = o.chunk_numel_;
  first_chunk_ = o.first_chunk_;
  bases_ = std::move(o.bases_);
  o.bases_.clear();
  return *this;
}

void GradView::GiveBack() {
  if (region_ != nullptr) region_->GiveBack(first_chunk_, bases_.size());
  region_ = nullptr;
  bases_.clear();
}

const float* GradView::At(size_t flat) const {
  if (region_ == nullptr) return data_ + (flat - flat_begin_);
  return bases_[flat / chunk_numel_ - first_chunk_] + flat % chunk_numel_;
}

size_t GradView::Run(size_t flat) const {
  if (region_ == nullptr) return SIZE_MAX;
  return chunk_numel_ - flat % chunk_numel_;
}

}  // namespace strata
