// Real DeepSpeed configs from other projects (tests/data/dsconfigs, sources in SOURCES.md) pass;
// real broken ones and hand-made broken variants fail naming the key; configs/ passes.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/config/config.h"
#include "tests/engine/config/config_test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::strata::testing::AllDiagnostics;
using ::strata::testing::HasDiag;

const fs::path kCorpus = fs::path(STRATA_SOURCE_DIR) / "tests/data/dsconfigs";

std::vector<fs::path> JsonFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

RunContext CheckRun(int64_t world = 1) {
  RunContext run;
  run.world_size = world;
  run.require_run_values = false;  // as `strata config check` without run flags
  return run;
}

TEST(ConfigCorpusTest, HasAtLeastThirtyConfigsEachWithItsSource) {
  std::vector<fs::path> files = JsonFiles(kCorpus);
  EXPECT_GE(files.size(), 30u);
  const std::string sources = ReadFile(kCorpus / "SOURCES.md");
  for (const auto& f : files) {
    EXPECT_NE(sources.find("| " + f.filename().string() + " |"), std::string::npos)
        << f.filename() << " is not listed in SOURCES.md";
  }
}

TEST(ConfigCorpusTest, EveryRealConfigPasses) {
  for (const auto& f : JsonFiles(kCorpus)) {
    Config c = CheckConfigFile(f.string(), CheckRun());
    EXPECT_EQ(c.report.ErrorCount(), 0u) << f.filename() << "\n" << AllDiagnostics(c);
  }
}

TEST(ConfigCorpusTest, AtWorldSizeEightOnlyIndivisibleBatchesFail) {
  for (const auto& f : JsonFiles(kCorpus)) {
    Config c = CheckConfigFile(f.string(), CheckRun(8));
    for (const auto& d : c.report.diagnostics) {
      if (d.severity == Severity::kError) {
        EXPECT_EQ(d.path, "train_batch_size") << f.filename() << "\n" << AllDiagnostics(c);
      }
    }
  }
}

TEST(ConfigCorpusTest, RealBrokenConfigsFailNamingTheKey) {
  const std::map<std::string, std::pair<std::string, std::string>> expected = {
      {"deepspeedexamples_ds_zero_stage_infinity_config.json",
       {"zero_optimization.stage3_param_persitance_threshold",
        "did you mean 'stage3_param_persistence_threshold'?"}},
      {"deepspeedexamples_ds_zero_stage_3_config.json",
       {"zero_optimization.stage3_param_persitence_threshold",
        "did you mean 'stage3_param_persistence_threshold'?"}},
      {"deepspeedexamples_ds_zero-offload_10B_config.json",
       {"zero_optimization.comm_overlap", "did you mean 'overlap_comm'?"}},
      {"deepspeedexamples_bingbertsquad_deepspeed_bsz24_config.json",
       {"optimizer.params.max_grad_norm", "gradient_clipping"}},
  };
  std::vector<fs::path> files = JsonFiles(kCorpus / "broken");
  EXPECT_EQ(files.size(), expected.size());
  for (const auto& f : files) {
    auto it = expected.find(f.filename().string());
    ASSERT_NE(it, expected.end()) << f.filename() << " has no expectation";
    Config c = CheckConfigFile(f.string(), CheckRun());
    EXPECT_EQ(c.report.ErrorCount(), 1u) << AllDiagnostics(c);
    EXPECT_TRUE(HasDiag(c, Severity::kError, it->second.first, it->second.second))
        << f.filename() << "\n"
        << AllDiagnostics(c);
  }
}

TEST(ConfigCorpusTest, ConfigWithoutBatchNeedsTheRun) {
  const std::string f = (kCorpus / "needs_run/transformers_ds_config_zero3.json").string();
  Config c = CheckConfigFile(f, CheckRun());
  EXPECT_TRUE(HasDiag(c, Severity::kError, "train_batch_size", "no batch size"));
  RunContext run = CheckRun();
  run.micro_batch_per_gpu = 4;
  Config with_run = CheckConfigFile(f, run);
  EXPECT_EQ(with_run.report.ErrorCount(), 0u) << AllDiagnostics(with_run);
  EXPECT_EQ(with_run.batch.train_batch_size, 4);
}

// Hand-made broken variants of every corpus config: each must fail naming the changed key.
TEST(ConfigCorpusTest, BrokenVariantsFailNamingTheKey) {
  struct Mutation {
    const char* name;
    void (*apply)(Json*);
    const char* path;
    const char* text;
  };
  const Mutation mutations[] = {
      {"misspelt zero key",
       [](Json* j) { (*j)["zero_optimization"]["stage3_max_live_parameter"] = 1; },
       "zero_optimization.stage3_max_live_parameter", "did you mean 'stage3_max_live_parameters'"},
      {"misspelt section",
       [](Json* j) {
         (*j)["zero_optimisation"] = (*j)["zero_optimization"];
         j->erase("zero_optimization");
       },
       "zero_optimisation", "did you mean 'zero_optimization'"},
      {"stage out of range", [](Json* j) { (*j)["zero_optimization"]["stage"] = 5; },
       "zero_optimization.stage", "[0, 3]"},
      {"aio under zero",
       [](Json* j) {
         (*j)["zero_optimization"]["aio"] = {{"queue_depth", 8}};
       },
       "zero_optimization.aio", "top-level section"},
      {"bp16",
       [](Json* j) {
         (*j)["bp16"] = {{"enabled", true}};
       },
       "bp16", "did you mean 'bf16'"},
      {"offload device typo",
       [](Json* j) {
         (*j)["zero_optimization"]["offload_optimizer"] = {{"device", "cpuu"}};
       },
       "zero_optimization.offload_optimizer.device", "did you mean \"cpu\""},
  };
  int variants = 0;
  for (const auto& f : JsonFiles(kCorpus)) {
    Result<JsonDocument> doc = ParseJsonDocument(ReadFile(f), f.string());
    ASSERT_TRUE(doc.ok()) << doc.status().ToString();
    if (!doc->root.contains("zero_optimization")) continue;
    for (const auto& m : mutations) {
      Json j = doc->root;
      m.apply(&j);
      Config c = CheckConfigText(j.dump(2), f.filename().string(), CheckRun());
      EXPECT_TRUE(HasDiag(c, Severity::kError, m.path, m.text))
          << f.filename() << " / " << m.name << "\n"
          << AllDiagnostics(c);
      ++variants;
    }
  }
  EXPECT_GE(variants, 150);
}

TEST(ConfigCorpusTest, EveryConfigInTheRepositoryPasses) {
  std::vector<fs::path> files = JsonFiles(fs::path(STRATA_SOURCE_DIR) / "configs");
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {
    Config c = CheckConfigFile(f.string(), CheckRun());
    EXPECT_EQ(c.report.ErrorCount(), 0u) << f.filename() << "\n" << AllDiagnostics(c);
    EXPECT_EQ(c.report.Count(Severity::kWarning), 0u) << f.filename() << "\n" << AllDiagnostics(c);
  }
}

TEST(ConfigCorpusTest, ZeroInfinityExampleResolvesAsWritten) {
  Config c = CheckConfigFile(STRATA_SOURCE_DIR "/configs/zero3_nvme_offload.json", CheckRun());
  ASSERT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kNvme);
  EXPECT_EQ(c.zero.offload_optimizer.nvme_paths,
            (std::vector<std::string>{"/local_nvme0", "/local_nvme1"}));
  EXPECT_TRUE(c.zero.offload_optimizer.pipeline_read);
  EXPECT_EQ(c.aio.engine, IoEngineKind::kIoUring);
  EXPECT_EQ(c.batch.train_batch_size, 8);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.optimizer.beta2, 0.95);
}

}  // namespace
}  // namespace strata
