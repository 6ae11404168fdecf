// ParamStore's in-memory tiers (device memory, pinned CPU memory) and the factory.
#include "engine/zero/store/param_store.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/units.h"
#include "offload/device/api/kernels.h"

namespace strata {
namespace {

// One flat array of partition_numel compute-dtype elements: device memory (kDevice) or pinned
// host memory (kCpu). Acquire is a pointer into it; there is nothing to wait for.
class FlatParamStore final : public ParamStore {
 public:
  explicit FlatParamStore(const ParamStoreOptions& o) : ParamStore(o) {}
  ~FlatParamStore() override {
    if (device_array_ != nullptr) options_.device->Free(device_array_).IgnoreError();
    host_.Release();
  }

  Status Init() {
    const ParamStoreOptions& o = options_;
    bytes_ = std::max<size_t>(o.layout->partition_numel() * DTypeBytes(o.dtype), 64);
    if (o.tier == Tier::kDevice) {
      Result<void*> p = o.device->Allocate(bytes_);
      if (!p.ok()) {
        return p.status().WithContext("engine: parameter shards (" + FormatBytes(bytes_) + ")");
      }
      device_array_ = *p;
      STRATA_ASSIGN_OR_RETURN(Stream s, o.device->CreateStream());
      Status st = LaunchFill(s, device_array_, o.dtype, 0.0f, o.layout->partition_numel());
      if (st.ok()) st = s.Synchronize();
      o.device->DestroyStream(s).IgnoreError();
      return st;
    }
    PinnedPoolOptions po;
    po.buffer_bytes = bytes_;
    po.buffer_count = 1;
    po.lock = o.pin_memory;
    po.device = o.device;
    po.budget = o.budget;
    po.name = "parameter shards (offload_param cpu)";
    STRATA_ASSIGN_OR_RETURN(pool_, PinnedPool::Create(po));
    host_ = pool_->Acquire();
    std::memset(host_.data(), 0, bytes_);
    return Status::Ok();
  }

  void* flat() const override {
    return device_array_ != nullptr ? device_array_ : static_cast<void*>(host_.data());
  }
  Status DoPrefetch(std::span<const size_t>) override { return Status::Ok(); }
  Result<ShardView> DoAcquire(size_t param) override {
    STRATA_RETURN_IF_ERROR(Check(param));
    const ShardSlice& s = options_.layout->slices()[param];
    return ShardView{
        static_cast<const uint8_t*>(flat()) + s.flat_offset * DTypeBytes(options_.dtype),
        on_host()};
  }
  Status Done(size_t param, const Stream&) override { return Check(param); }

  Status Write(size_t flat_begin, const void* src, size_t numel, const Stream& stream) override {
    const size_t cb = DTypeBytes(options_.dtype);
    if (flat_begin + numel > options_.layout->partition_numel()) {
      return InvalidArgumentError("parameter shards: write of [" + std::to_string(flat_begin) +
                                  ", " + std::to_string(flat_begin + numel) +
                                  ") past the partition's " +
                                  std::to_string(options_.layout->partition_numel()) + " elements");
    }
    uint8_t* dst = static_cast<uint8_t*>(flat()) + flat_begin * cb;
    if (on_host()) {
      std::memcpy(dst, src, numel * cb);
      return Status::Ok();
    }
    STRATA_RETURN_IF_ERROR(stream.CopyAsync(dst, src, numel * cb, CopyKind::kHostToDevice));
    return stream.Synchronize();
  }

  uint64_t device_bytes() const override { return device_array_ != nullptr ? bytes_ : 0; }
  uint64_t cpu_bytes() const override { return pool_ != nullptr ? pool_->buffer_bytes() : 0; }
  uint64_t nvme_bytes() const override { return 0; }

 private:
  Status Check(size_t param) const {
    if (param >= options_.layout->slices().size()) {
      return InvalidArgumentError("parameter shards: no parameter " + std::to_string(param));
    }
    return Status::Ok();
  }

  size_t bytes_ = 0;
  void* device_array_ = nullptr;
  std::unique_ptr<PinnedPool> pool_;
  PinnedBuffer host_;
};

}  // namespace

Result<ParamStoreOptions> ParamStoreOptionsFromConfig(const Config& config, int rank) {
  const OffloadParamConfig& pc = config.zero.offload_param;
  ParamStoreOptions o;
  o.tier = pc.device == OffloadDevice::kCpu    ? Tier::kCpu
           : pc.device == OffloadDevice::kNvme ? Tier::kNvme
                                               : Tier::kDevice;
  o.pin_memory = pc.pin_memory;
  if (o.tier != Tier::kNvme) return o;
  constexpr const char* kPathKey = "zero_optimization.offload_param.nvme_path";
  if (pc.nvme_paths.empty()) {
    return InvalidArgumentError(std::string(kPathKey) +
                                " is required with offload_param.device = \"nvme\" (a "
                                "directory, or a list of directories to stripe over)");
  }
  namespace fs = std::filesystem;
  for (const std::string& p : pc.nvme_paths) {
    std::error_code ec;
    const fs::path abs = fs::absolute(fs::path(p), ec);
    if (ec) return InvalidArgumentError(std::string(kPathKey) + " '" + p + "': " + ec.message());
    if (!fs::exists(abs, ec)) {
      fs::create_directories(abs, ec);
      if (ec) {
        return InvalidArgumentError(std::string(kPathKey) + " '" + p + "' (" + abs.string() +
                                    ") does not exist and cannot be made: " + ec.message());
      }
    }
    o.swapper.nvme_paths.push_back(abs.lexically_normal().string());
  }
  if (pc.buffer_count < 1 || pc.buffer_size < 1 || pc.max_in_cpu < 0) {
    return InvalidArgumentError(
        "zero_optimization.offload_param: buffer_count (" + std::to_string(pc.buffer_count) +
        ") and buffer_size (" + std::to_string(pc.buffer_size) +
        ") must be at least 1 and max_in_cpu (" + std::to_string(pc.max_in_cpu) + ") at least 0");
  }
  o.swapper.pin_memory = pc.pin_memory;
  o.swapper.checksums = config.strata.swap_checksums;
  o.swapper.rank = rank;
  o.swapper.buffer_count = static_cast<size_t>(pc.buffer_count);
  o.swapper.buffer_size = static_cast<size_t>(pc.buffer_size);
  o.swapper.max_in_cpu = static_cast<size_t>(pc.max_in_cpu);
  o.aio_options = config.aio;
  return o;
}

Status ParamStore::Prefetch(std::span<const size_t> params) {
  const auto pending = [&](size_t i) { return fence_->Pending(i); };
  if (fence_ == nullptr || std::none_of(params.begin(), params.end(), pending)) {
    return DoPrefetch(params);
  }
  std::vector<size_t> final_params;  // a pending shard's read would fetch its old bytes
  final_params.reserve(params.size());
  for (size_t i : params) {
    if (!pending(i)) final_params.push_back(i);
  }
  return DoPrefetch(final_params);
}

Result<ShardView> ParamStore::Acquire(size_t param) {
  if (fence_ != nullptr && fence_->Pending(param)) {
    return InternalError("parameter shards: parameter " + std::to_string(param) +
                         " read before its deferred optimizer update (a gather must wait for "
                         "it: ParamFence::Await)");
  }
  return DoAcquire(param);
}

Result<std::unique_ptr<ParamStore>> ParamStore::Create(const ParamStoreOptions& options) {
  if (options.device == nullptr || options.layout == nullptr) {
    return InvalidArgumentError("parameter shards: a device and a partition layout are required");
  }
  if (options.tier == Tier::kNvme) return CreateNvmeParamStore(options);
  auto store = std::make_unique<FlatParamStore>(options);
  STRATA_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<ParamStore>(std::move(store));
}

}  // namespace strata
