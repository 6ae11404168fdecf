#include "engine/zero_inference.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/half.h"
#include "engine/comm/registry.h"

namespace strata {

namespace {
constexpr size_t kInferenceAlignNumel = 64;  // as the engine aligns its partitions
}  // namespace

Result<std::unique_ptr<ZeroInference>> ZeroInference::Create(
    nn::Module& model, const std::vector<nn::Parameter*>& params, const Config& config,
    Device& device, const Stream& compute, DType dtype, const ParamInitFn& init) {
  std::unique_ptr<ZeroInference> zi(new ZeroInference());
  zi->model_ = &model;
  zi->dtype_ = dtype;
  std::vector<size_t> numels;
  for (const nn::Parameter* p : params) {
    if (p->data() != nullptr) {
      return InvalidArgumentError("ZeRO-Inference: parameter " + p->name() +
                                  " is already placed (build the model without its own storage)");
    }
    numels.push_back(static_cast<size_t>(p->numel()));
    zi->weight_bytes_ += static_cast<uint64_t>(p->numel()) * DTypeBytes(dtype);
  }
  STRATA_ASSIGN_OR_RETURN(zi->layout_, PartitionLayout::Create(numels, 1, 0, kInferenceAlignNumel));
  CommOptions co;
  co.backend = CommBackend::kLocal;
  co.device_kind = device.kind();
  co.log_choice = false;  // world 1, local: nothing to say
  STRATA_ASSIGN_OR_RETURN(zi->comm_, CreateCommunicator(co));

  STRATA_ASSIGN_OR_RETURN(ParamStoreOptions so, ParamStoreOptionsFromConfig(config, 0));
  so.device = &device;
  so.layout = &zi->layout_;
  so.dtype = dtype;
  STRATA_ASSIGN_OR_RETURN(zi->store_, ParamStore::Create(so));

  // The weights, rounded to the compute dtype, into the store (NVMe: written through its swap
  // buffers; Drain waits for the writes).
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < params.size(); ++i) {
    const ShardSlice& s = zi->layout_.slices()[i];
    values.assign(s.numel, 0.0f);
    if (init) {
      STRATA_RETURN_IF_ERROR(init(*params[i], values));
    }
    bytes.resize(s.numel * DTypeBytes(dtype));
    if (dtype == DType::kFloat32) {
      std::memcpy(bytes.data(), values.data(), bytes.size());
    } else {
      auto* out = reinterpret_cast<uint16_t*>(bytes.data());
      for (size_t j = 0; j < s.numel; ++j) {
        out[j] = dtype == DType::kBFloat16 ? FloatToBf16(values[j]) : FloatToFp16(values[j]);
      }
    }
    STRATA_RETURN_IF_ERROR(zi->store_->Write(s.flat_offset, bytes.data(), s.numel, compute));
  }
  STRATA_RETURN_IF_ERROR(zi->store_->Drain());

  const ZeroConfig& z = config.zero;
  ZeroHooksOptions ho;
  ho.comm = zi->comm_.get();
  ho.device = &device;
  ho.compute = compute;
  ho.params = params;
  ho.layout = &zi->layout_;
  ho.dtype = dtype;
  ho.partition_params = true;
  ho.store = zi->store_.get();
  ho.persistence_threshold = z.param_persistence_threshold;
  ho.forward_only = true;
  // The bounds the engine's stage 3 keeps (engine/zero3_engine.cc), without gradient slots.
  uint64_t persistent = 0, largest = 0;
  for (const nn::Parameter* p : params) {
    const uint64_t n = static_cast<uint64_t>(p->numel());
    largest = std::max(largest, n);
    if (static_cast<int64_t>(n) <= z.param_persistence_threshold) persistent += n;
  }
  const uint64_t max_live = std::max<uint64_t>(
      largest, static_cast<uint64_t>(std::max<int64_t>(z.max_live_parameters, 0)));
  ho.param_limit_bytes = (persistent + max_live) * DTypeBytes(dtype);
  ho.prefetch_bucket_numel = std::max<int64_t>(z.prefetch_bucket_size, 0);
  zi->prefetch_numel_ = ho.prefetch_bucket_numel;
  ho.max_live_numel = static_cast<int64_t>(max_live);
  ho.max_reuse_distance_numel = std::max<int64_t>(z.max_reuse_distance, 0);
  STRATA_ASSIGN_OR_RETURN(zi->hooks_, ZeroHooks::Create(model, ho));
  STRATA_RETURN_IF_ERROR(zi->hooks_->RegatherPersistent());
  STRATA_RETURN_IF_ERROR(compute.Synchronize());
  model.AddHooksRecursive(zi->hooks_.get());
  return zi;
}

ZeroInference::~ZeroInference() {
  if (model_ != nullptr && hooks_ != nullptr) model_->RemoveHooksRecursive(hooks_.get());
}

// Note [Next pass read-ahead]
// The coordinator prefetches within a pass, and EndPass releases what it held: without more, each
// forward would start by waiting for the NVMe reads of its first modules. A generation's passes
// all run the same modules in the same order (the parameters' order here), so at the end of one
// the reads of the next one's first streamed parameters start at once (best effort: the store
// issues what its free buffers take), overlapping the caller's work between two forwards
// (sampling, the next token's staging) and the first module's own wait.
Status ZeroInference::FinishForward() {
  STRATA_RETURN_IF_ERROR(hooks_->FinishForward());
  if (store_->tier() != Tier::kNvme) return Status::Ok();
  std::vector<size_t> next;
  uint64_t numel = 0;
  const uint64_t budget = std::max<uint64_t>(1, static_cast<uint64_t>(prefetch_numel_));
  for (size_t i = 0; i < layout_.slices().size() && numel < budget; ++i) {
    if (hooks_->persistent(i)) continue;
    next.push_back(i);
    numel += layout_.slices()[i].numel;
  }
  return store_->Prefetch(next);
}

ZeroInferenceStats ZeroInference::stats() const {
  ZeroInferenceStats s;
  s.tier = store_->tier();
  s.store_device_bytes = store_->device_bytes();
  s.store_cpu_bytes = store_->cpu_bytes();
  s.store_nvme_bytes = store_->nvme_bytes();
  s.nvme_read_bytes = store_->nvme_read_bytes();
  s.live_bytes = hooks_->live_bytes();
  s.peak_live_bytes = hooks_->peak_live_bytes();
  if (const ParamCoordinator* c = hooks_->coordinator(); c != nullptr) {
    s.prefetch_hits = c->stats().hits;
    s.prefetch_misses = c->stats().misses;
  }
  s.weight_bytes = weight_bytes_;
  return s;
}

}  // namespace strata
