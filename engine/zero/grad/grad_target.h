// GradTarget: where the gradient reducer (engine/zero/grad/grad_reducer.h) adds the reduced fp32
// gradients that leave the device — so the engine stays placement-agnostic: a flat host array
// (HostArrayGradTarget: the pinned partition of offload_optimizer cpu, or nvme without a region)
// or the NVMe gradient region (engine/nvme/grad_region.h).
//
// Calls come in this order per backward pass: BeginPass, any number of Add and AddZeros, EndPass.
// All of them run on the reducer's host-add stream (one thread at a time, in enqueue order); an
// error fails that stream's work, so the engine's next synchronization reports it.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace strata {

class GradTarget {
 public:
  virtual ~GradTarget() = default;
  // A backward pass begins: `first` is the step's first (the target's values start from zero),
  // `last` the step's last (its values are then final).
  virtual Status BeginPass(bool first, bool last) = 0;
  // Flat elements [flat_begin, flat_begin + n) += src[0, n). `src` (host memory) is valid for the
  // call only.
  virtual Status Add(size_t flat_begin, const float* src, size_t n) = 0;
  // Flat elements [flat_begin, flat_begin + n) get nothing this pass: a parameter sent as its
  // touched rows (Note [Rows to the region] in engine/zero/grad/grad_reducer.cc) is zero there,
  // and only in the step's first pass, before anything else wrote those elements, so they are
  // +0.0 already and stay so. Nothing to add; a target that counts the elements each pass adds
  // (the NVMe region: Note [A chunk is done when its adds are]) counts them.
  virtual Status AddZeros(size_t flat_begin, size_t n) {
    (void)flat_begin;
    (void)n;
    return Status::Ok();
  }
  // The pass's adds are all in.
  virtual Status EndPass() = 0;
  // The flat host array behind the target, holding flat element f at array()[f - array_begin()]
  // — or null (the region). The reducer copies straight into an array (Note [Copy first]).
  virtual float* array() const { return nullptr; }
};

// A flat host array: host[f - begin] for flat element f; the owner zeroes it between steps (or
// marks it stale: GradReducer::MarkHostStale).
class HostArrayGradTarget final : public GradTarget {
 public:
  HostArrayGradTarget(float* host, size_t begin) : host_(host), begin_(begin) {}
  Status BeginPass(bool, bool) override { return Status::Ok(); }
  Status Add(size_t flat_begin, const float* src, size_t n) override {
    float* dst = host_ + (flat_begin - begin_);
    for (size_t i = 0; i < n; ++i) dst[i] += src[i];
    return Status::Ok();
  }
  Status EndPass() override { return Status::Ok(); }
  float* array() const override { return host_; }

 private:
  float* host_;
  size_t begin_;
};

}  // namespace strata
