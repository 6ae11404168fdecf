#include "data/prepare/prepare.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "models/data/token_file.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

Result<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open (no such file?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return ErrnoToStatus(errno, "open " + path);
  size_t n = bytes ? std::fwrite(data, 1, bytes, f) : 0;
  int close_rc = std::fclose(f);
  if (n != bytes || close_rc != 0) return ErrnoToStatus(errno, "write " + path);
  return Status::Ok();
}

struct LineResult {
  ExampleTokens tokens;
  bool blank = false;
};

}  // namespace

std::string PrepareSummary::ToString() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%lld examples, %lld tokens (%lld truncated, %lld skipped, %lld blank lines), "
                "%.1f%% masked",
                static_cast<long long>(examples), static_cast<long long>(tokens),
                static_cast<long long>(truncated), static_cast<long long>(skipped),
                static_cast<long long>(blank_lines), 100.0 * masked_share());
  return buf;
}

Result<PrepareSummary> PrepareDataset(const std::string& jsonl, const std::string& model_dir,
                                      const std::string& out_dir, const PrepareOptions& options,
                                      const std::string& key, const PrepareProgress& progress) {
  auto t0 = std::chrono::steady_clock::now();
  STRATA_ASSIGN_OR_RETURN(auto tokenizer, tokenizers::Tokenizer::FromModelDir(model_dir));
  std::optional<ChatTemplate> chat;
  if (fs::exists(fs::path(model_dir) / "tokenizer_config.json")) {
    auto t = ChatTemplate::FromModelDir(model_dir);
    if (t.ok()) {
      chat = std::move(*t);
    } else if (t.status().code() != StatusCode::kFailedPrecondition) {
      return t.status();  // a template that does not parse; none at all is fine for text lines
    }
  }
  ExampleTokenizer example_tokenizer(&tokenizer, chat ? &*chat : nullptr, options.tokenize);
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadAll(jsonl));
  std::vector<std::string_view> lines;
  for (size_t p = 0; p < text.size();) {
    size_t e = text.find('\n', p);
    if (e == std::string::npos) e = text.size();
    lines.emplace_back(text.data() + p, e - p);
    p = e + 1;
  }
  if (lines.empty()) return InvalidArgumentError(jsonl + ": the file is empty");

  const int64_t n = static_cast<int64_t>(lines.size());
  const int threads = std::max(1, std::min<int>(options.threads, static_cast<int>(n)));
  std::vector<LineResult> results(lines.size());
  std::vector<Status> errors(static_cast<size_t>(threads));
  std::vector<int64_t> error_line(static_cast<size_t>(threads), -1);
  std::atomic<int64_t> done{0};
  auto work = [&](int w) {
    int64_t begin = n * w / threads, end = n * (w + 1) / threads;
    for (int64_t k = begin; k < end; ++k) {
      std::string_view line = lines[static_cast<size_t>(k)];
      bool blank = line.find_first_not_of(" \t\r") == std::string_view::npos;
      if (blank) {
        results[static_cast<size_t>(k)].blank = true;
      } else {
        auto ex = ParseExampleLine(line, jsonl, k + 1);
        Result<ExampleTokens> toks = ex.ok() ? example_tokenizer.Tokenize(*ex, jsonl, k + 1)
                                             : Result<ExampleTokens>(ex.status());
        if (!toks.ok()) {
          errors[static_cast<size_t>(w)] = toks.status();
          error_line[static_cast<size_t>(w)] = k;
          return;
        }
        results[static_cast<size_t>(k)].tokens = std::move(*toks);
      }
      done.fetch_add(1, std::memory_order_relaxed);
    }
  };
  auto t_work = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int w = 1; w < threads; ++w) pool.emplace_back(work, w);
  if (progress) {
    std::atomic<bool> finished{false};
    std::thread reporter([&] {
      while (!finished.load()) {
        progress(done.load(), n);
        for (int k = 0; k < 10 && !finished.load(); ++k) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    });
    work(0);
    for (auto& t : pool) t.join();
    finished = true;
    reporter.join();
    progress(done.load(), n);
  } else {
    work(0);
    for (auto& t : pool) t.join();
  }
  for (size_t w = 0; w < errors.size(); ++w) {
    if (!errors[w].ok()) return errors[w];  // workers own ascending line ranges: first is first
  }
  const double tokenize_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_work).count();

  PrepareSummary s;
  s.tokenize_seconds = tokenize_seconds;
  s.vocab_size = tokenizer.VocabSize();
  std::vector<uint8_t> mask;
  std::vector<uint32_t> ids;
  for (const auto& r : results) {
    if (r.blank) {
      ++s.blank_lines;
      continue;
    }
    if (r.tokens.skipped) {
      ++s.skipped;
      continue;
    }
    if (r.tokens.ids.empty()) continue;
    ++s.examples;
    s.truncated += r.tokens.truncated;
    for (size_t t = 0; t < r.tokens.ids.size(); ++t) {
      ids.push_back(static_cast<uint32_t>(r.tokens.ids[t]));
      uint8_t m = (r.tokens.loss[t] ? kMaskLoss : 0) | (t == 0 ? kMaskStart : 0);
      s.loss_tokens += r.tokens.loss[t] != 0;
      mask.push_back(m);
    }
  }
  s.tokens = static_cast<int64_t>(ids.size());
  if (s.examples == 0) {
    return InvalidArgumentError(jsonl + ": no examples left (" + s.ToString() +
                                "); raise --max-length or use --overlong truncate");
  }

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return IoError("create " + out_dir + ": " + ec.message());
  // llm.c's header: magic, version (1: uint16 ids, 2: uint32), token count; then the ids.
  const bool narrow = s.vocab_size <= 65536;
  std::vector<int32_t> header(256, 0);
  header[0] = kLlmcMagic;
  header[1] = narrow ? 1 : 2;
  header[2] = static_cast<int32_t>(s.tokens);
  if (s.tokens > INT32_MAX) return InvalidArgumentError(jsonl + ": more than 2^31 tokens");
  std::string bin(reinterpret_cast<const char*>(header.data()), kLlmcHeaderBytes);
  for (uint32_t id : ids) {
    bin.append(reinterpret_cast<const char*>(&id), narrow ? 2 : 4);  // little-endian host
  }
  std::string tmp = out_dir + "/.tmp";
  STRATA_RETURN_IF_ERROR(WriteFile(tmp + ".tokens.bin", bin.data(), bin.size()));
  STRATA_RETURN_IF_ERROR(WriteFile(tmp + ".mask.bin", mask.data(), mask.size()));
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json meta = {{"key", key},
               {"source", jsonl},
               {"model", model_dir},
               {"examples", s.examples},
               {"skipped", s.skipped},
               {"truncated", s.truncated},
               {"blank_lines", s.blank_lines},
               {"tokens", s.tokens},
               {"loss_tokens", s.loss_tokens},
               {"vocab_size", s.vocab_size},
               {"train_on", options.tokenize.train_on_prompt ? "all" : "responses"},
               {"max_length", options.tokenize.max_tokens},
               {"overlong", options.tokenize.overlong == Overlong::kSkip ? "skip" : "truncate"}};
  std::string meta_text = meta.dump(2) + "\n";
  STRATA_RETURN_IF_ERROR(WriteFile(tmp + ".prepared.json", meta_text.data(), meta_text.size()));
  for (const char* name : {"tokens.bin", "mask.bin", "prepared.json"}) {
    fs::rename(tmp + "." + name, out_dir + "/" + name, ec);
    if (ec) return IoError("rename into " + out_dir + "/" + name + ": " + ec.message());
  }
  return s;
}

Result<std::string> PrepareCacheKey(const std::string& jsonl, const std::string& model_dir,
                                    const TokenizeOptions& options) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  Status status;
  for (const std::string& path :
       {jsonl, model_dir + "/tokenizer.json", model_dir + "/tokenizer_config.json"}) {
    auto bytes = ReadAll(path);
    if (!bytes.ok()) {
      if (path == model_dir + "/tokenizer_config.json") {
        XXH3_64bits_update(st, "-", 1);  // optional: its absence is part of the key
        continue;
      }
      status = bytes.status();
      break;
    }
    uint64_t len = bytes->size();
    XXH3_64bits_update(st, &len, sizeof(len));
    XXH3_64bits_update(st, bytes->data(), bytes->size());
  }
  std::string opts = std::string(options.train_on_prompt ? "all" : "responses") + "/" +
                     std::to_string(options.max_tokens) + "/" +
                     (options.overlong == Overlong::kSkip ? "skip" : "truncate") + "/format1";
  XXH3_64bits_update(st, opts.data(), opts.size());
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  STRATA_RETURN_IF_ERROR(status);
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return std::string(buf);
}

Result<std::string> PrepareCached(const std::string& jsonl, const std::string& model_dir,
                                  const std::string& cache_root, const PrepareOptions& options,
                                  bool* reused, PrepareSummary* summary,
                                  const PrepareProgress& progress) {
  STRATA_ASSIGN_OR_RETURN(std::string key, PrepareCacheKey(jsonl, model_dir, options.tokenize));
  std::string dir = cache_root + "/" + key;
  auto meta_text = ReadAll(dir + "/prepared.json");
  if (meta_text.ok()) {
    json meta = json::parse(*meta_text, nullptr, false);
    if (!meta.is_discarded() && meta.value("key", "") == key) {
      *reused = true;
      if (summary) {
        summary->examples = meta.value("examples", int64_t{0});
        summary->skipped = meta.value("skipped", int64_t{0});
        summary->truncated = meta.value("truncated", int64_t{0});
        summary->blank_lines = meta.value("blank_lines", int64_t{0});
        summary->tokens = meta.value("tokens", int64_t{0});
        summary->loss_tokens = meta.value("loss_tokens", int64_t{0});
        summary->vocab_size = meta.value("vocab_size", int64_t{0});
      }
      return dir;
    }
  }
  *reused = false;
  STRATA_ASSIGN_OR_RETURN(PrepareSummary s,
                          PrepareDataset(jsonl, model_dir, dir, options, key, progress));
  if (summary) *summary = s;
  return dir;
}

}  // namespace strata::data
