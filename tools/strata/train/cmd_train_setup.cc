#include "tools/strata/train/cmd_train_setup.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "models/llama/llama_init.h"
#include "nn/io/safetensors.h"

namespace strata::cli {

ParamInitFn RandomInit(uint64_t seed) { return llama::RandomInit(seed); }

Result<ParamInitFn> CheckpointInit(const std::string& model_dir) {
  STRATA_ASSIGN_OR_RETURN(nn::SafetensorsCheckpoint ckpt,
                          nn::SafetensorsCheckpoint::Open(model_dir));
  auto shared = std::make_shared<nn::SafetensorsCheckpoint>(std::move(ckpt));
  return ParamInitFn([shared](const nn::Parameter& p, std::span<float> out) -> Status {
    STRATA_ASSIGN_OR_RETURN(nn::SafetensorView view, shared->Tensor(p.name()));
    std::vector<int64_t> shape;
    for (int i = 0; i < p.shape().ndim(); ++i) shape.push_back(p.shape()[i]);
    return nn::ConvertSafetensor(view, shape, DType::kFloat32, std::as_writable_bytes(out));
  });
}

Result<std::string> ShippedTextPath() {
  namespace fs = std::filesystem;
  const fs::path rel = fs::path("models") / "data" / "text" / "shakespeare.txt";
  std::vector<fs::path> starts;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  starts.push_back(fs::current_path(ec));
  std::string looked;
  for (const fs::path& start : starts) {
    for (fs::path dir = start; !dir.empty(); dir = dir.parent_path()) {
      if (fs::exists(dir / rel, ec)) return (dir / rel).string();
      if (dir == dir.parent_path()) break;
    }
    looked += (looked.empty() ? "" : " and ") + start.string();
  }
  return NotFoundError("the shipped training text " + rel.string() + " was not found above " +
                       looked + "; pass --data FILE");
}

}  // namespace strata::cli
