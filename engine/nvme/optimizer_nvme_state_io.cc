// NvmeOptimizerState's state outside a step (engine/nvme/optimizer_nvme.h): the fp32 master and
// Adam moments written from and read into the caller's buffers (checkpoints, export, the engine's
// initial state), range by range (WriteState, ReadState) or a sub-group at a time.
#include <algorithm>
#include <cstring>
#include <span>
#include <string>

#include "engine/nvme/optimizer_nvme.h"

namespace strata {

Status NvmeOptimizerState::WriteState(size_t flat_begin, std::span<const float> master,
                                      std::span<const float> exp_avg,
                                      std::span<const float> exp_avg_sq) {
  const size_t n = master.size();
  if ((!exp_avg.empty() && exp_avg.size() != n) ||
      (!exp_avg_sq.empty() && exp_avg_sq.size() != n)) {
    return InvalidArgumentError("nvme optimizer state: WriteState got " + std::to_string(n) +
                                " master values but " + std::to_string(exp_avg.size()) + " / " +
                                std::to_string(exp_avg_sq.size()) +
                                " moments (give the same count, or none)");
  }
  if (flat_begin > numel_ || n > numel_ - flat_begin) {
    return InvalidArgumentError("nvme optimizer state: WriteState of [" +
                                std::to_string(flat_begin) + ", " + std::to_string(flat_begin + n) +
                                ") is outside the partition of " + std::to_string(numel_));
  }
  size_t e = flat_begin;
  const size_t end = flat_begin + n;
  while (e < end) {
    const int i = SubGroupOf(e);
    const SubGroup& g = groups_[static_cast<size_t>(i)];
    const size_t stop = std::min(end, g.flat_end);
    const bool whole = e == g.flat_begin && stop == g.flat_end;
    STRATA_RETURN_IF_ERROR(Stage(i, !(whole && !exp_avg.empty() && !exp_avg_sq.empty())));
    const size_t gn = g.numel(), at = e - g.flat_begin, src = e - flat_begin, len = stop - e;
    float* p = stage_.data();
    std::memcpy(p + at, master.data() + src, len * sizeof(float));
    if (!exp_avg.empty()) std::memcpy(p + gn + at, exp_avg.data() + src, len * sizeof(float));
    if (!exp_avg_sq.empty()) {
      std::memcpy(p + 2 * gn + at, exp_avg_sq.data() + src, len * sizeof(float));
    }
    stage_dirty_ = true;
    e = stop;
  }
  return Status::Ok();
}

Status NvmeOptimizerState::ReadState(size_t flat_begin, size_t numel, float* master, float* exp_avg,
                                     float* exp_avg_sq) {
  if (flat_begin > numel_ || numel > numel_ - flat_begin) {
    return InvalidArgumentError("nvme optimizer state: ReadState of [" +
                                std::to_string(flat_begin) + ", " +
                                std::to_string(flat_begin + numel) +
                                ") is outside the partition of " + std::to_string(numel_));
  }
  size_t e = flat_begin;
  const size_t end = flat_begin + numel;
  while (e < end) {
    const int i = SubGroupOf(e);
    const SubGroup& g = groups_[static_cast<size_t>(i)];
    const size_t stop = std::min(end, g.flat_end);
    STRATA_RETURN_IF_ERROR(Stage(i, true));
    const size_t gn = g.numel(), at = e - g.flat_begin, dst = e - flat_begin, len = stop - e;
    const float* p = stage_.data();
    if (master) std::memcpy(master + dst, p + at, len * sizeof(float));
    if (exp_avg) std::memcpy(exp_avg + dst, p + gn + at, len * sizeof(float));
    if (exp_avg_sq) std::memcpy(exp_avg_sq + dst, p + 2 * gn + at, len * sizeof(float));
    e = stop;
  }
  return Status::Ok();
}

Status NvmeOptimizerState::ReadSubGroup(int i, float* master, float* exp_avg, float* exp_avg_sq) {
  if (i < 0 || i >= num_sub_groups()) {
    return InvalidArgumentError("nvme optimizer state: no sub-group " + std::to_string(i) +
                                " (there are " + std::to_string(num_sub_groups()) + ")");
  }
  const SubGroup& g = groups_[static_cast<size_t>(i)];
  const size_t n = g.numel();
  if (staged_ == i || !written_[static_cast<size_t>(i)] || n == 0) {
    return ReadState(g.flat_begin, n, master, exp_avg, exp_avg_sq);
  }
  // Straight from NVMe into the caller's arrays: no stage.
  STRATA_RETURN_IF_ERROR(DrainAsync());
  return swapper_->ReadState(swap_index_[static_cast<size_t>(i)], master, exp_avg, exp_avg_sq);
}

Status NvmeOptimizerState::WriteSubGroup(int i, const float* master, const float* exp_avg,
                                         const float* exp_avg_sq) {
  if (i < 0 || i >= num_sub_groups()) {
    return InvalidArgumentError("nvme optimizer state: no sub-group " + std::to_string(i) +
                                " (there are " + std::to_string(num_sub_groups()) + ")");
  }
  const int k = swap_index_[static_cast<size_t>(i)];
  if (k < 0) return Status::Ok();
  STRATA_RETURN_IF_ERROR(DrainAsync());
  STRATA_RETURN_IF_ERROR(
      swapper_->Initialize(k, master, exp_avg, exp_avg_sq)
          .WithContext("offload_optimizer nvme: write sub-group " + std::to_string(i)));
  written_[static_cast<size_t>(i)] = true;
  return Status::Ok();
}

}  // namespace strata
