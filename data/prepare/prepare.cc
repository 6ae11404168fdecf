#include "data/prepare/prepare.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "data/prepare/line_pipeline.h"
#include "models/data/token_file.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

Result<std::string> ReadAll(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return NotFoundError(path + ": cannot open (no such file?)");
  std::string text;
  char buf[1 << 16];
  if (std::fseek(f, 0, SEEK_END) == 0) {
    const long size = std::ftell(f);
    if (size > 0) text.reserve(static_cast<size_t>(size));
    std::rewind(f);
  }
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, got);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return ErrnoToStatus(errno, "read " + path);
  return text;
}

Status WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return ErrnoToStatus(errno, "open " + path);
  size_t n = bytes ? std::fwrite(data, 1, bytes, f) : 0;
  int close_rc = std::fclose(f);
  if (n != bytes || close_rc != 0) return ErrnoToStatus(errno, "write " + path);
  return Status::Ok();
}

using internal::ThreadCpuSeconds;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The three files of a prepared directory, written under per-process names in `dir` and renamed
// into place by Commit. Until then, destruction removes them (and `dir`, when this made it and
// it is left empty), so a failed preparation leaves nothing under the final names.
class OutputFiles {
 public:
  static Result<OutputFiles> Open(const std::string& dir) {
    OutputFiles f;
    f.dir_ = dir;
    std::error_code ec;
    f.made_dir_ = !fs::exists(dir, ec);
    fs::create_directories(dir, ec);
    if (ec) return IoError("create " + dir + ": " + ec.message());
    f.tmp_ = dir + "/.tmp" + std::to_string(getpid());
    for (auto [file, name] :
         {std::pair{&f.tokens_, "tokens.bin"}, std::pair{&f.mask_, "mask.bin"}}) {
      const std::string path = f.tmp_ + "." + name;
      *file = std::fopen(path.c_str(), "wb");
      if (*file == nullptr) return ErrnoToStatus(errno, "open " + path);
      std::setvbuf(*file, nullptr, _IOFBF, 1 << 20);
    }
    return f;
  }
  OutputFiles(OutputFiles&& o) noexcept { *this = std::move(o); }
  OutputFiles& operator=(OutputFiles&& o) noexcept {
    std::swap(dir_, o.dir_);
    std::swap(tmp_, o.tmp_);
    std::swap(made_dir_, o.made_dir_);
    std::swap(tokens_, o.tokens_);
    std::swap(mask_, o.mask_);
    std::swap(committed_, o.committed_);
    return *this;
  }
  ~OutputFiles() {
    if (tokens_) std::fclose(tokens_);
    if (mask_) std::fclose(mask_);
    if (committed_ || tmp_.empty()) return;
    std::error_code ec;
    for (const char* name : {"tokens.bin", "mask.bin", "prepared.json"}) {
      fs::remove(tmp_ + "." + name, ec);
    }
    if (made_dir_) fs::remove(dir_, ec);  // only if empty
  }

  std::FILE* tokens() const { return tokens_; }
  std::FILE* mask() const { return mask_; }
  std::string tokens_path() const { return tmp_ + ".tokens.bin"; }
  std::string mask_path() const { return tmp_ + ".mask.bin"; }

  Status WriteTokens(const void* data, size_t bytes) {
    if (std::fwrite(data, 1, bytes, tokens_) != bytes) {
      return ErrnoToStatus(errno, "write " + tokens_path());
    }
    return Status::Ok();
  }
  // Overwrites the token file's first `bytes` (its header, once the count is known).
  Status RewriteTokenHeader(const void* data, size_t bytes) {
    if (std::fflush(tokens_) != 0 || std::fseek(tokens_, 0, SEEK_SET) != 0) {
      return ErrnoToStatus(errno, "write " + tokens_path());
    }
    return WriteTokens(data, bytes);
  }
  // Closes the two files, writes prepared.json, and renames the three into place.
  Status Commit(const std::string& meta) {
    for (auto [file, path] : {std::pair{&tokens_, tokens_path()}, std::pair{&mask_, mask_path()}}) {
      const int rc = std::fclose(*file);
      *file = nullptr;
      if (rc != 0) return ErrnoToStatus(errno, "write " + path);
    }
    STRATA_RETURN_IF_ERROR(WriteFile(tmp_ + ".prepared.json", meta.data(), meta.size()));
    std::error_code ec;
    for (const char* name : {"tokens.bin", "mask.bin", "prepared.json"}) {
      fs::rename(tmp_ + "." + name, dir_ + "/" + name, ec);
      if (ec) return IoError("rename into " + dir_ + "/" + name + ": " + ec.message());
    }
    committed_ = true;
    return Status::Ok();
  }

 private:
  OutputFiles() = default;
  std::string dir_, tmp_;
  bool made_dir_ = false;
  std::FILE* tokens_ = nullptr;
  std::FILE* mask_ = nullptr;
  bool committed_ = false;
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
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  auto load_tokenizer = [&] { return tokenizers::Tokenizer::FromModelDir(model_dir); };
  // A missing tokenizer is reported before anything else (the loader below runs in parallel).
  if (!fs::exists(fs::path(model_dir) / "tokenizer.json")) return load_tokenizer().status();
  std::optional<ChatTemplate> chat;
  if (fs::exists(fs::path(model_dir) / "tokenizer_config.json")) {
    auto t = ChatTemplate::FromModelDir(model_dir);
    if (t.ok()) {
      chat = std::move(*t);
    } else if (t.status().code() != StatusCode::kFailedPrecondition) {
      return t.status();  // a template that does not parse; none at all is fine for text lines
    }
  }
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadAll(jsonl));
  std::vector<std::string_view> lines;
  for (size_t p = 0; p < text.size();) {
    size_t e = text.find('\n', p);
    if (e == std::string::npos) e = text.size();
    lines.emplace_back(text.data() + p, e - p);
    p = e + 1;
  }
  if (lines.empty()) return InvalidArgumentError(jsonl + ": the file is empty");

  // Per-process names, renamed into place at the end: ranks of one run preparing the same cache
  // entry at once each write whole files, and the last rename wins with identical content.
  STRATA_ASSIGN_OR_RETURN(OutputFiles out, OutputFiles::Open(out_dir));
  // llm.c's header comes first: its token count is written once known.
  std::vector<int32_t> header(256, 0);
  STRATA_RETURN_IF_ERROR(out.WriteTokens(header.data(), kLlmcHeaderBytes));

  const double setup_seconds = Since(t0), setup_cpu = ThreadCpuSeconds() - cpu0;
  internal::LinePipeline pipeline(std::move(lines), jsonl, chat ? &*chat : nullptr,
                                  options.tokenize, out.tokens(), out.mask());
  STRATA_RETURN_IF_ERROR(pipeline.Run(load_tokenizer, options.threads, options.lines_per_chunk,
                                      out.tokens_path(), out.mask_path(), progress));
  const auto t_finish = std::chrono::steady_clock::now();
  const double cpu_finish = ThreadCpuSeconds();
  const internal::LineCounts& n = pipeline.counts();
  PrepareSummary s;
  s.examples = n.examples;
  s.skipped = n.skipped;
  s.truncated = n.truncated;
  s.blank_lines = n.blank_lines;
  s.tokens = n.tokens;
  s.loss_tokens = n.loss_tokens;
  s.vocab_size = pipeline.tokenizer().VocabSize();
  if (s.examples == 0) {
    return InvalidArgumentError(jsonl + ": no examples left (" + s.ToString() +
                                "); raise --max-length or use --overlong truncate");
  }
  if (s.tokens > INT32_MAX) return InvalidArgumentError(jsonl + ": more than 2^31 tokens");
  // llm.c's header: magic, version (1: uint16 ids, 2: uint32), token count; then the ids.
  header[0] = kLlmcMagic;
  header[1] = s.vocab_size <= 65536 ? 1 : 2;
  header[2] = static_cast<int32_t>(s.tokens);
  STRATA_RETURN_IF_ERROR(out.RewriteTokenHeader(header.data(), kLlmcHeaderBytes));
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
  STRATA_RETURN_IF_ERROR(out.Commit(meta.dump(2) + "\n"));
  s.phases = pipeline.phases();
  s.phases.setup_seconds = setup_seconds;
  s.phases.setup_cpu = setup_cpu;
  s.phases.finish_seconds = Since(t_finish);
  s.phases.finish_cpu = ThreadCpuSeconds() - cpu_finish;
  s.seconds = Since(t0);
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
