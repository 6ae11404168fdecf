#include "engine/config/auto_sizes.h"

#include <algorithm>

#include "engine/config/config_json.h"

namespace strata {
namespace {

constexpr const char* kBufferSize = "zero_optimization.offload_param.buffer_size";
constexpr int64_t kDefaultBufferSize = OffloadParamConfig{}.buffer_size;

}  // namespace

void ResolveModelAutoSizes(Config* config, std::span<const size_t> numels, int world) {
  ZeroConfig& z = config->zero;
  // Once chosen within strata.cpu_memory (engine/plan/cpu_budget.h) the choice stands.
  if (!z.IsAuto(kBufferSize) || world < 1 || config->strata.sizes_within_budget) return;
  const size_t w = static_cast<size_t>(world);
  size_t largest = 0;
  for (size_t n : numels) largest = std::max(largest, z.stage == 3 ? (n + w - 1) / w : n);
  const int64_t shard = static_cast<int64_t>(largest);
  z.offload_param.buffer_size = std::max(kDefaultBufferSize, shard);
  std::string why = shard > kDefaultBufferSize
                        ? "the largest parameter shard, " + std::to_string(shard) +
                              " elements, above DeepSpeed's default " +
                              std::to_string(kDefaultBufferSize) + " (a buffer holds a whole shard)"
                        : "DeepSpeed's default; the largest parameter shard is " +
                              std::to_string(shard) + " elements";
  config->report.origins[kBufferSize] = {OriginKind::kAuto, std::move(why)};
}

std::string AutoSizesText(const Config& config) {
  const Json resolved = ConfigToJson(config);
  std::string out;
  for (const std::string& path : config.zero.auto_sizes) {
    const Json* v = &resolved;
    size_t begin = 0;
    while (v != nullptr && begin <= path.size()) {
      const size_t dot = std::min(path.find('.', begin), path.size());
      const std::string key = path.substr(begin, dot - begin);
      v = v->is_object() && v->contains(key) ? &(*v)[key] : nullptr;
      begin = dot + 1;
    }
    auto it = config.report.origins.find(path);
    const std::string why = it != config.report.origins.end() ? it->second.detail : "default";
    out += "  " + path + " = " + (v != nullptr ? v->dump() : std::string("?")) +
           "  (\"auto\": " + why + ")\n";
  }
  return out;
}

}  // namespace strata
