#include "nn/ops/op_registry.h"

#include <atomic>

#include "nn/cuda/cuda_op_table.h"
#include "nn/host/host_ops.h"
#include "strata/config.h"

namespace strata::nn {
namespace {

constexpr size_t kOps = static_cast<size_t>(OpKind::kCount);
std::atomic<bool> g_timing{false};
std::array<std::atomic<uint64_t>, kOps> g_ns{};
std::array<std::atomic<uint64_t>, kOps> g_calls{};

}  // namespace

const OpTable* OpTableFor(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kHost:
      return &internal::HostOpTable();
    case DeviceKind::kCuda:
#if STRATA_WITH_CUDA
      return &internal::CudaOpTable();
#else
      return nullptr;  // built without CUDA
#endif
  }
  return nullptr;
}

bool SupportsOp(DeviceKind kind, OpKind op) {
  const OpTable* t = OpTableFor(kind);
  if (t == nullptr) return false;
  switch (op) {
    case OpKind::kGemm:
      return t->gemm != nullptr;
    case OpKind::kEmbeddingForward:
      return t->embedding_forward != nullptr;
    case OpKind::kEmbeddingBackward:
      return t->embedding_backward != nullptr;
    case OpKind::kRmsNormForward:
      return t->rms_norm_forward != nullptr;
    case OpKind::kRmsNormBackward:
      return t->rms_norm_backward != nullptr;
    case OpKind::kRope:
      return t->rope != nullptr;
    case OpKind::kAttentionForward:
      return t->attention_forward != nullptr;
    case OpKind::kAttentionBackward:
      return t->attention_backward != nullptr;
    case OpKind::kSwiGluForward:
      return t->swiglu_forward != nullptr;
    case OpKind::kSwiGluBackward:
      return t->swiglu_backward != nullptr;
    case OpKind::kCrossEntropyForward:
      return t->cross_entropy_forward != nullptr;
    case OpKind::kCrossEntropyBackward:
      return t->cross_entropy_backward != nullptr;
    case OpKind::kCachedAttention:
      return t->cached_attention != nullptr;
    case OpKind::kCount:
      break;
  }
  return false;
}

uint64_t OpTimes::total_ns() const {
  uint64_t t = 0;
  for (uint64_t v : ns) t += v;
  return t;
}

void SetOpTiming(bool enabled) { g_timing.store(enabled, std::memory_order_relaxed); }
bool OpTimingEnabled() { return g_timing.load(std::memory_order_relaxed); }

void ResetOpTimes() {
  for (size_t i = 0; i < kOps; ++i) {
    g_ns[i].store(0, std::memory_order_relaxed);
    g_calls[i].store(0, std::memory_order_relaxed);
  }
}

OpTimes GetOpTimes() {
  OpTimes t;
  for (size_t i = 0; i < kOps; ++i) {
    t.ns[i] = g_ns[i].load(std::memory_order_relaxed);
    t.calls[i] = g_calls[i].load(std::memory_order_relaxed);
  }
  return t;
}

void RecordOpTime(OpKind op, uint64_t ns) {
  const size_t i = static_cast<size_t>(op);
  g_ns[i].fetch_add(ns, std::memory_order_relaxed);
  g_calls[i].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace strata::nn
