#include "tools/strata/generate/generate_place.h"

#include <cstdio>
#include <vector>

#include "offload/device/registry.h"

namespace strata::cli {

namespace {

std::string PlaceMib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

Result<Config> GenerateConfig(const std::string& path) {
  RunContext run;
  run.micro_batch_per_gpu = 1;
  run.gradient_accumulation_steps = 1;
  if (path.empty()) return LoadConfigText("{}", "(defaults)", run);
  return LoadConfig(path, run);
}

}  // namespace

GeneratePlacement::~GeneratePlacement() {
  zero.reset();  // removes the hooks while the model lives
  if (device != nullptr && stream.valid()) device->DestroyStream(stream).IgnoreError();
}

void GeneratePlacement::Attach(infer::CachedLm& lm) {
  if (zero == nullptr) return;
  ZeroInference* z = zero.get();
  lm.set_on_pass_end([z]() { return z->FinishForward(); });
}

Result<std::unique_ptr<GeneratePlacement>> PlaceForGenerate(const GenerateWeights& weights,
                                                            const std::string& config_path,
                                                            const infer::KvCachePlan& plan,
                                                            int* exit_code) {
  *exit_code = 2;
  auto pl = std::make_unique<GeneratePlacement>();
  STRATA_ASSIGN_OR_RETURN(pl->config, GenerateConfig(config_path));
  const Config& c = pl->config;
  const DType dtype = c.bf16.enabled   ? DType::kBFloat16
                      : c.fp16.enabled ? DType::kFloat16
                                       : DType::kFloat32;
  const ZeroConfig& z = c.zero;
  const bool zero_inference = z.stage == 3 || z.offload_param.device != OffloadDevice::kNone;
  const uint64_t weight_bytes =
      static_cast<uint64_t>(weights.config.NumParameters()) * DTypeBytes(dtype);

  *exit_code = 1;
  DeviceOptions dev;
  dev.host.memory_bytes = c.strata.device_memory_bytes;
  dev.host.link_bandwidth_gbps = c.strata.link_gbps;
  dev.host.populate_memory = false;
  if (c.strata.device == DeviceChoice::kCuda) dev.kind = DeviceKind::kCuda;
  STRATA_ASSIGN_OR_RETURN(pl->device, CreateDevice(dev));
  STRATA_ASSIGN_OR_RETURN(pl->stream, pl->device->CreateStream());
  const uint64_t free_bytes = pl->device->MemoryStats().capacity_bytes;
  const uint64_t need = plan.total_bytes() + (zero_inference ? 0 : weight_bytes);
  if (need > free_bytes) {
    *exit_code = 2;
    return OutOfMemoryError(
        "device: the KV cache and workspace (" + PlaceMib(plan.total_bytes()) + ")" +
        (zero_inference ? std::string() : " + the weights (" + PlaceMib(weight_bytes) + ")") +
        " need " + PlaceMib(need) + " but the device has " + PlaceMib(free_bytes) +
        (zero_inference ? " (lower --max-new-tokens, give fewer prompts, or raise "
                          "strata.device_memory)"
                        : " (offload the weights: zero_optimization.stage 3 with offload_param "
                          "cpu or nvme, or raise strata.device_memory)"));
  }
  llama::LlamaModelOptions mo;
  mo.dtype = dtype;
  mo.allocate_parameters = !zero_inference;
  mo.allocate_grads = false;
  STRATA_ASSIGN_OR_RETURN(pl->model,
                          llama::LlamaForCausalLM::Create(weights.config, pl->device.get(), mo));
  const std::vector<nn::Parameter*> params = pl->model->NamedParameters();
  if (zero_inference) {
    STRATA_ASSIGN_OR_RETURN(pl->zero, ZeroInference::Create(*pl->model, params, c, *pl->device,
                                                            pl->stream, dtype, weights.init));
    const ZeroInferenceStats s = pl->zero->stats();
    const std::string tier = s.tier == Tier::kNvme
                                 ? "on NVMe (" + PlaceMib(s.store_nvme_bytes) + ", " +
                                       PlaceMib(s.store_cpu_bytes) + " pinned CPU buffers)"
                             : s.tier == Tier::kCpu ? "in pinned CPU memory"
                                                    : "on the device";
    pl->where = std::string(DTypeName(dtype)) + ", " + PlaceMib(s.weight_bytes) + ", " + tier +
                ", streamed per module (ZeRO-Inference)";
  } else {
    std::vector<float> values;
    for (nn::Parameter* p : params) {
      values.assign(static_cast<size_t>(p->numel()), 0.0f);
      STRATA_RETURN_IF_ERROR(weights.init(*p, values));
      STRATA_RETURN_IF_ERROR(
          nn::UploadParameter(pl->stream, *p, values.data(), DType::kFloat32, values.size()));
    }
    STRATA_RETURN_IF_ERROR(pl->stream.Synchronize());
    pl->where = std::string(DTypeName(dtype)) + ", " + PlaceMib(weight_bytes) + ", on the device";
  }
  *exit_code = 0;
  return pl;
}

}  // namespace strata::cli
