// NvmeOptimizerState's gradients (engine/nvme/optimizer_nvme.h): the partition's fp32 gradients in
// pinned memory or in the NVMe gradient region, their norm's chunk sums and overflow checks, and a
// sub-group's gradients handed to its update.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include "engine/nvme/optimizer_nvme.h"
#include "offload/device/optim/optimizer_kernels.h"

namespace strata {

void NvmeOptimizerState::SumNormChunksHere(size_t first, size_t last) const {
  for (size_t k = first; k < last;) {  // in runs of chunks not summed yet
    if (norm_ready_[k] != 0) {
      ++k;
      continue;
    }
    size_t e = k;
    while (e < last && norm_ready_[e] == 0) ++e;
    const size_t b = k * kSquaredNormChunk, stop = std::min(numel_, e * kSquaredNormChunk);
    SquaredNormChunkSums(grad_ + b, stop - b, norm_sums_.data() + k);
    std::fill(norm_ready_.begin() + static_cast<std::ptrdiff_t>(k),
              norm_ready_.begin() + static_cast<std::ptrdiff_t>(e), 1);
    k = e;
  }
}

void NvmeOptimizerState::SumNormChunks(size_t first, size_t last) const {
  // Chunks are independent: computed in parallel.
  tbb::parallel_for(tbb::blocked_range<size_t>(first, last, 64),
                    [&](const auto& r) { SumNormChunksHere(r.begin(), r.end()); });
}

std::pair<size_t, size_t> NvmeOptimizerState::WholeChunks(size_t begin, size_t end) const {
  end = std::min(end, numel_);
  // The chunks wholly inside [begin, end); the last chunk of the partition may be short.
  const size_t first = (begin + kSquaredNormChunk - 1) / kSquaredNormChunk;
  const size_t last = end == numel_ ? norm_sums_.size() : end / kSquaredNormChunk;
  return {first, std::max(first, last)};
}

void NvmeOptimizerState::PrecomputeGradChecks(size_t begin, size_t end) const {
  if (region_ != nullptr) return;  // the region took its sums as the gradients were written
  const auto [first, last] = WholeChunks(begin, end);
  if (first < last) SumNormChunks(first, last);
}

double NvmeOptimizerState::GradSquaredNorm(size_t begin, size_t end) const {
  // The chunks' sums (every backend's chunking and order: offload/device/optim/optimizer_kernels.h)
  // in parallel, added in order: the same bits as the sequential loop.
  if (end <= begin) return 0;
  if (region_ != nullptr) return region_->SquaredNorm();
  double total = 0;
  if (begin == 0 && end == numel_) {
    SumNormChunks(0, norm_sums_.size());
    for (const double s : norm_sums_) total += s;
    std::fill(norm_ready_.begin(), norm_ready_.end(), 0);
    return total;
  }
  std::vector<double> sums(SquaredNormChunks(end - begin));
  ParallelSquaredNormChunkSums(grad_ + begin, end - begin, sums.data());
  for (const double s : sums) total += s;
  return total;
}

bool NvmeOptimizerState::GradHasNonFinite(size_t begin, size_t end) const {
  if (region_ != nullptr) return region_->HasNonFinite();
  if (begin == 0 && end == numel_) {
    SumNormChunks(0, norm_sums_.size());  // kept for GradSquaredNorm
    return std::any_of(norm_sums_.begin(), norm_sums_.end(),
                       [](double s) { return !std::isfinite(s); });
  }
  bool bad = false;
  for (size_t i = begin; i < end; ++i) bad |= !std::isfinite(grad_[i]);
  return bad;
}

void NvmeOptimizerState::ZeroGrad(bool memory) const {
  // A region's next pass starts from zero (GradRegion::BeginPass), with no pass over the bytes.
  if (memory && region_ == nullptr) std::memset(grad_, 0, numel_ * sizeof(float));
  std::fill(norm_ready_.begin(), norm_ready_.end(), 0);
}

Result<GradView> NvmeOptimizerState::SubGroupGrads(int i, bool lend) {
  const SubGroup& g = groups_[static_cast<size_t>(i)];
  if (region_ == nullptr) return GradView::Array(grad_ + g.flat_begin, g.flat_begin);
  auto context = [i] { return "gradients of sub-group " + std::to_string(i); };
  if (lend) {
    Result<GradView> lent = region_->Lend(g.flat_begin, g.numel());
    if (!lent.ok()) return lent.status().WithContext(context());
    if (!lent->empty()) return lent;
  }
  float* out = static_cast<float*>(grad_slab_.data());
  Status s = region_->Read(g.flat_begin, g.numel(), out);
  if (!s.ok()) return s.WithContext(context());
  return GradView::Array(out, g.flat_begin);
}

bool NvmeOptimizerState::HoldsGrads(size_t flat_begin, size_t flat_end) const {
  if (!hold_grads_.load(std::memory_order_relaxed) || flat_end <= flat_begin) return false;
  for (int i = SubGroupOf(flat_begin); i < num_sub_groups(); ++i) {
    const SubGroup& g = groups_[static_cast<size_t>(i)];
    if (g.flat_begin >= flat_end) break;
    if (g.numel() > 0 && !InBuffers(i)) return false;
  }
  return true;
}

Status NvmeOptimizerState::ConsumeGrads(int i) {
  if (region_ == nullptr || i < 0 || i >= num_sub_groups()) return Status::Ok();
  const SubGroup& g = groups_[static_cast<size_t>(i)];
  return region_->Consume(g.flat_begin, g.numel())
      .WithContext("gradients of sub-group " + std::to_string(i));
}

int NvmeOptimizerState::SubGroupOf(size_t e) const {
  auto it = std::upper_bound(groups_.begin(), groups_.end(), e,
                             [](size_t v, const SubGroup& g) { return v < g.flat_end; });
  return static_cast<int>(it - groups_.begin());
}

}  // namespace strata
