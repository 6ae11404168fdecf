#include "tests/engine/train/engine_fixture.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/comm/registry.h"
#include "offload/device/registry.h"

namespace strata::testing {

ParamInitFn TestInit(uint64_t seed) {
  return [seed](const nn::Parameter& p, std::span<float> out) -> Status {
    const std::string& n = p.name();
    if (n.ends_with("norm.weight")) {
      std::fill(out.begin(), out.end(), 1.0f);
      return Status::Ok();
    }
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(p.index()));
    std::normal_distribution<float> d(0.0f, 0.02f);
    for (float& x : out) x = d(rng);
    return Status::Ok();
  };
}

TokenData RandomTokens(uint64_t seed, size_t batches, int64_t batch, int64_t seq_len,
                       int64_t vocab) {
  TokenData t;
  t.batch = batch;
  t.seq_len = seq_len;
  std::mt19937_64 rng(seed);
  for (size_t b = 0; b < batches; ++b) {
    std::vector<int32_t> ids(static_cast<size_t>(batch * seq_len));
    for (int32_t& x : ids) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    t.ids.push_back(std::move(ids));
  }
  return t;
}

Config MakeConfig(int64_t micro_batch, int64_t gas, const std::string& zero,
                  const std::string& extra, int world_size, double clip,
                  const std::string& optimizer_params) {
  const std::string text = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(micro_batch) +
                           ", \"gradient_accumulation_steps\": " + std::to_string(gas) + ", " +
                           extra + " \"optimizer\": {\"type\": \"AdamW\", \"params\": {" +
                           optimizer_params +
                           "}},"
                           " \"gradient_clipping\": " +
                           std::to_string(clip) + ", \"zero_optimization\": {" + zero + "}}";
  RunContext run;
  run.world_size = world_size;
  Result<Config> c = LoadConfigText(text, "test-config", run);
  EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << text;
  return c.ok() ? *c : Config{};
}

std::unique_ptr<Communicator> MakeLocalComm() {
  CommOptions o;
  o.backend = CommBackend::kLocal;
  Result<std::unique_ptr<Communicator>> c = CreateCommunicator(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

std::unique_ptr<Device> MakeHostDevice(uint64_t memory_bytes) {
  DeviceOptions o;
  o.host.memory_bytes = memory_bytes;
  o.host.populate_memory = false;
  Result<std::unique_ptr<Device>> d = CreateDevice(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

std::unique_ptr<llama::LlamaForCausalLM> MakeTinyModel(Device* device, DType dtype, bool tied,
                                                       bool checkpointing) {
  llama::LlamaConfig c = llama::LlamaPreset("tiny").value();
  c.tie_word_embeddings = tied;
  llama::LlamaModelOptions o;
  o.dtype = dtype;
  o.allocate_parameters = false;
  o.allocate_grads = false;
  o.activation_checkpointing = checkpointing;
  Result<std::unique_ptr<llama::LlamaForCausalLM>> m =
      llama::LlamaForCausalLM::Create(c, device, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

std::vector<std::vector<float>> TrainAndGather(Engine& engine, const TokenData& data, int steps,
                                               int64_t gas, std::vector<float>* losses,
                                               size_t first_batch, size_t batch_stride) {
  size_t next = first_batch;
  for (int s = 0; s < steps; ++s) {
    for (int64_t m = 0; m < gas; ++m) {
      Status st = engine.Forward(data.Batch(next));
      EXPECT_TRUE(st.ok()) << st.ToString();
      next += batch_stride;
      if (losses != nullptr) losses->push_back(engine.Loss().value());
      st = engine.Backward();
      EXPECT_TRUE(st.ok()) << st.ToString();
      st = engine.Step();
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
  }
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < engine.layout().slices().size(); ++i) {
    std::vector<float> v(engine.layout().slices()[i].numel);
    Status st = engine.GatherMasterParameter(i, v);
    EXPECT_TRUE(st.ok()) << st.ToString();
    out.push_back(std::move(v));
  }
  return out;
}

bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace strata::testing
