// Exports that Hugging Face tools load unchanged, as a user makes them: `strata train --model SRC
// --save --export OUT` and `strata export` write SRC's config.json with every field it had (rope
// settings, token ids, fields Strata does not read) and only torch_dtype changed to what is
// written — by default SRC's dtype (bf16 in, bf16 out) — and copy SRC's generation_config.json
// and tokenizer files byte for byte. Export -> train from it (lr 0) -> export again gives the same
// weight bytes, in bf16 and in fp32: the load is bitwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string Config(bool bf16, double lr) {
  nlohmann::json j = {
      {"train_micro_batch_size_per_gpu", 2},
      {"gradient_accumulation_steps", 1},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", lr}, {"weight_decay", 0.0}}}}},
      {"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}}},
      {"strata", {{"device_memory", "256M"}}}};
  if (bf16) j["bf16"] = {{"enabled", true}};
  return j.dump(2);
}

std::string Strata(const std::string& args) { return std::string(STRATA_BIN) + " " + args; }

std::string ReadBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json ReadJson(const fs::path& p) { return nlohmann::json::parse(ReadBytes(p)); }

void RunOk(const std::string& args) {
  const testing::CommandResult r = testing::RunCommand(Strata(args));
  ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.err;
}

class HfExportCliTest : public ::testing::Test {
 protected:
  // A source directory as a Hub download has it: bf16 weights (a tiny model trained one step
  // and exported), a config.json with fields Strata does not read, and tokenizer files.
  void SetUp() override {
    std::ofstream(dir_.File("bf16.json")) << Config(true, 1e-2);
    std::ofstream(dir_.File("bf16_lr0.json")) << Config(true, 0.0);
    std::ofstream(dir_.File("fp32_lr0.json")) << Config(false, 0.0);
    src_ = dir_.File("src");
    RunOk("train --config " + dir_.File("bf16.json") +
          " --init tiny --seq-len 16 --steps 1 --save " + dir_.File("ck0") + " --export " + src_ +
          " --json");
    nlohmann::json c = ReadJson(fs::path(src_) / "config.json");
    c["architectures"] = {"LlamaForCausalLM"};
    c["model_type"] = "llama";
    c["bos_token_id"] = 1;
    c["eos_token_id"] = {2, 7};
    c["rope_scaling"] = nullptr;
    c["transformers_version"] = "4.44.2";
    c["attention_bias"] = false;
    c["pretraining_tp"] = 1;
    c["torch_dtype"] = "bfloat16";
    std::ofstream(fs::path(src_) / "config.json") << c.dump(2);
    source_config_ = c;
    std::ofstream(fs::path(src_) / "generation_config.json")
        << R"({"bos_token_id": 1, "eos_token_id": [2, 7], "do_sample": true, "temperature": 0.6})";
    std::ofstream(fs::path(src_) / "tokenizer.json") << R"({"version": "1.0", "model": {}})";
    std::ofstream(fs::path(src_) / "tokenizer_config.json") << R"({"add_bos_token": true})";
    std::ofstream(fs::path(src_) / "special_tokens_map.json") << R"({"bos_token": "<s>"})";
    std::string sp("\x0a\x05\xff\x00\x80piece", 11);  // binary, like a SentencePiece model
    std::ofstream(fs::path(src_) / "tokenizer.model", std::ios::binary) << sp;
  }

  void ExpectSourceConfigAndFiles(const std::string& out, const std::string& torch_dtype) {
    nlohmann::json want = source_config_;
    want["torch_dtype"] = torch_dtype;
    EXPECT_EQ(ReadJson(fs::path(out) / "config.json"), want) << out;
    for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json", "tokenizer.model"}) {
      ASSERT_TRUE(fs::exists(fs::path(out) / f)) << out << "/" << f;
      EXPECT_EQ(ReadBytes(fs::path(out) / f), ReadBytes(fs::path(src_) / f)) << f;
    }
  }

  testing::ScratchDir dir_;
  std::string src_;
  nlohmann::json source_config_;
};

TEST_F(HfExportCliTest, TrainExportKeepsTheSourceConfigAndFilesAndBf16RoundTripsBitwise) {
  // bf16 in -> bf16 out by default; lr 0 leaves the weights as loaded, so the export's bytes
  // are the source's: the load was bitwise.
  const std::string out = dir_.File("out");
  RunOk("train --config " + dir_.File("bf16_lr0.json") + " --model " + src_ +
        " --seq-len 16 --steps 1 --save " + dir_.File("ck1") + " --export " + out + " --json");
  ExpectSourceConfigAndFiles(out, "bfloat16");
  EXPECT_EQ(ReadBytes(fs::path(out) / "model.safetensors"),
            ReadBytes(fs::path(src_) / "model.safetensors"));

  // strata export of the same checkpoint: the default is still the source's dtype; --dtype
  // overrides it and only torch_dtype changes.
  const testing::CommandResult ex =
      testing::RunCommand(Strata("export " + dir_.File("ck1") + " " + dir_.File("out_default")));
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_THAT(ex.out, HasSubstr("as bf16"));
  ExpectSourceConfigAndFiles(dir_.File("out_default"), "bfloat16");
  RunOk("export " + dir_.File("ck1") + " " + dir_.File("out32") + " --dtype fp32");
  ExpectSourceConfigAndFiles(dir_.File("out32"), "float32");
}

TEST_F(HfExportCliTest, Fp32ExportLoadsBackBitwise) {
  // An fp32 source (the bf16 one exported as fp32), trained with lr 0 in fp32 and exported:
  // fp32 in, fp32 out, the same bytes.
  RunOk("export " + dir_.File("ck0") + " " + dir_.File("src32") + " --dtype fp32");
  const std::string src32 = dir_.File("src32");
  EXPECT_EQ(ReadJson(fs::path(src32) / "config.json")["torch_dtype"], "float32");
  const std::string out = dir_.File("out32");
  RunOk("train --config " + dir_.File("fp32_lr0.json") + " --model " + src32 +
        " --seq-len 16 --steps 1 --save " + dir_.File("ck2") + " --export " + out + " --json");
  EXPECT_EQ(ReadJson(fs::path(out) / "config.json"), ReadJson(fs::path(src32) / "config.json"));
  EXPECT_EQ(ReadBytes(fs::path(out) / "model.safetensors"),
            ReadBytes(fs::path(src32) / "model.safetensors"));
}

}  // namespace
}  // namespace strata
