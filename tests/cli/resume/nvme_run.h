// What the resume tests share: an NVMe training job as configs/llama_nvme.json sets it up
// (ZeRO-3, parameters and optimizer state on NVMe, bf16) on the tiny preset, with its swap
// directory in the test's scratch space, and the command line a user would rerun after a crash.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata::testing {

// configs/llama_nvme.json with nvme_path `swap_dir` (created) and sub-groups small enough that
// tiny's state is several of them.
inline std::string WriteNvmeConfig(const std::string& path, const std::string& swap_dir) {
  std::filesystem::create_directories(swap_dir);
  nlohmann::json c = nlohmann::json::parse(R"({
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 1.0,
    "steps_per_print": 1,
    "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "zero_optimization": {
      "stage": 3, "overlap_comm": true, "contiguous_gradients": true,
      "reduce_bucket_size": 5e5, "sub_group_size": 2e5,
      "stage3_param_persistence_threshold": 1e4,
      "offload_param": {"device": "nvme", "pin_memory": true, "buffer_count": 4,
                        "buffer_size": 1e6, "max_in_cpu": 0},
      "offload_optimizer": {"device": "nvme", "pin_memory": true, "buffer_count": 4,
                            "pipeline_read": true, "pipeline_write": true}},
    "strata": {"device_memory": "320M"}
  })");
  c["zero_optimization"]["offload_param"]["nvme_path"] = swap_dir;
  c["zero_optimization"]["offload_optimizer"]["nvme_path"] = swap_dir;
  std::ofstream(path) << c.dump(2);
  return path;
}

// The --json object `strata train` prints last.
inline nlohmann::json LastJson(const std::string& out) {
  const size_t at = out.rfind("\n{");
  const std::string last = at == std::string::npos ? out : out.substr(at + 1);
  return nlohmann::json::parse(last, nullptr, false);
}

inline std::vector<double> JsonLosses(const std::string& out) {
  const nlohmann::json j = LastJson(out);
  if (j.is_discarded() || !j.contains("losses")) return {};
  return j["losses"].get<std::vector<double>>();
}

// Splits "a b c" on spaces (the tests' paths have none).
inline std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t next = s.find(' ', pos);
    const size_t end = next == std::string::npos ? s.size() : next;
    if (end > pos) out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

}  // namespace strata::testing
