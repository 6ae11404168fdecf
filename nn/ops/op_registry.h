// Op registry: one table of op implementations per device kind (ggml-backend style). ops.cc
// validates arguments and calls the table of the stream's device; a backend fills the entries
// it implements and leaves the rest null (SupportsOp false, the call Unimplemented). The one
// place that knows which backends are built is op_registry.cc.
//
// Op timing (for benchmarks): when enabled, backends add each op's wall time, measured where
// it runs, to a per-op counter.
#pragma once

#include <array>
#include <cstdint>

#include "nn/ops/ops.h"
#include "offload/device/api/device.h"

namespace strata::nn {

struct OpTable {
  const char* backend = "";
  Status (*gemm)(const Stream&, const GemmArgs&) = nullptr;
  Status (*embedding_forward)(const Stream&, const int32_t*, int64_t, const void*, DType, int64_t,
                              int64_t, float*) = nullptr;
  Status (*embedding_backward)(const Stream&, const int32_t*, int64_t, const float*, void*, DType,
                               int64_t, int64_t) = nullptr;
  Status (*rms_norm_forward)(const Stream&, const float*, const void*, DType, int64_t, int64_t,
                             float, float*, float*) = nullptr;
  Status (*rms_norm_backward)(const Stream&, const float*, const void*, DType, const float*,
                              const float*, int64_t, int64_t, float*, void*, DType) = nullptr;
  Status (*rope)(const Stream&, float*, int64_t, int64_t, int64_t, const float*, const float*,
                 const int32_t*, int64_t, bool) = nullptr;
  Status (*attention_forward)(const Stream&, const AttentionArgs&) = nullptr;
  Status (*attention_backward)(const Stream&, const AttentionArgs&) = nullptr;
  Status (*swiglu_forward)(const Stream&, const float*, const float*, int64_t, float*) = nullptr;
  Status (*swiglu_backward)(const Stream&, const float*, const float*, const float*, int64_t,
                            float*, float*) = nullptr;
  Status (*cross_entropy_forward)(const Stream&, const CrossEntropyArgs&) = nullptr;
  Status (*cross_entropy_backward)(const Stream&, const CrossEntropyArgs&) = nullptr;
  Status (*cached_attention)(const Stream&, const CachedAttentionArgs&) = nullptr;
};

// The table for `kind`, or nullptr if this build has no nn backend for it.
const OpTable* OpTableFor(DeviceKind kind);
// True if `kind`'s backend implements `op`.
bool SupportsOp(DeviceKind kind, OpKind op);

// --- Op timing ---------------------------------------------------------------------------------
struct OpTimes {
  std::array<uint64_t, static_cast<size_t>(OpKind::kCount)> ns{};
  std::array<uint64_t, static_cast<size_t>(OpKind::kCount)> calls{};
  uint64_t total_ns() const;
};
void SetOpTiming(bool enabled);
bool OpTimingEnabled();
void ResetOpTimes();
OpTimes GetOpTimes();
// Called by backends.
void RecordOpTime(OpKind op, uint64_t ns);

}  // namespace strata::nn
