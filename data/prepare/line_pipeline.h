// LinePipeline: the parallel part of `strata data prepare` (prepare.h). The JSONL lines are cut
// into chunks of consecutive lines; each chunk is parsed and rendered by the chat template
// (RenderExample), then tokenized and masked (ExampleTokenizer), then appended to the token and
// mask files in line order by whichever thread completes the next chunk in order. One thread
// loads the tokenizer first (the largest serial step: tokenizer.json is megabytes of JSON) while
// the others already parse and render, since rendering needs no tokenizer. So the files, the
// counts and the first error are the same for any thread count (Note [Chunk order]).
// Private to data/prepare.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/dataset/example_tokens.h"
#include "data/prepare/prepare.h"

namespace strata::data::internal {

// The calling thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID).
double ThreadCpuSeconds();

struct LineCounts {
  int64_t examples = 0, skipped = 0, truncated = 0, blank_lines = 0, tokens = 0, loss_tokens = 0;
  void Add(const LineCounts& o);
};

class LinePipeline {
 public:
  using TokenizerLoader = std::function<Result<tokenizers::Tokenizer>()>;

  // `lines` (views into the caller's text, which outlives Run) are named `file`:LINE in errors.
  // `chat` may be null (a chat line is then an error). The files receive the ids (uint16 when
  // the vocabulary fits 65536, else uint32) and the mask bytes; the caller owns them and writes
  // any header.
  LinePipeline(std::vector<std::string_view> lines, const std::string& file,
               const ChatTemplate* chat, const TokenizeOptions& options, std::FILE* tokens_out,
               std::FILE* mask_out);

  // Loads the tokenizer with `load` on one of `threads` threads while the others render, then
  // all tokenize. `lines_per_chunk` 0 picks a size that gives each thread many chunks. Returns
  // the tokenizer's error if it fails to load, else the first bad line's error by line number,
  // else a write error naming `tokens_path` or `mask_path`. Call once.
  Status Run(const TokenizerLoader& load, int threads, int64_t lines_per_chunk,
             const std::string& tokens_path, const std::string& mask_path,
             const PrepareProgress& progress);

  const LineCounts& counts() const { return counts_; }
  // Valid after a Run that loaded the tokenizer.
  const tokenizers::Tokenizer& tokenizer() const { return *tokenizer_; }
  const PreparePhases& phases() const { return phases_; }

 private:
  struct Line {
    bool blank = false;
    Status parse;  // the line is not an example (ParseExampleLine's error)
    RenderedExample rendered;
  };
  // Cache-line aligned: two threads usually work on neighbouring chunks at once.
  struct alignas(64) Chunk {
    int64_t begin = 0, end = 0;  // line indices [begin, end)
    std::vector<Line> lines;     // rendered; released once tokenized
    std::string ids, mask;       // the chunk's bytes of the two files, until written
    LineCounts counts;
    Status error;  // the chunk's first bad line
    bool ready = false;
  };
  struct ThreadTimes {
    double render_cpu = 0, tokenize_cpu = 0, write_cpu = 0, idle = 0, cpu = 0;
  };
  static constexpr size_t kNone = ~size_t{0};
  enum TokenizerState : int { kLoading, kReady, kFailed };

  void Work(bool load_first, const TokenizerLoader& load, ThreadTimes* t);
  size_t ClaimFresh();
  void Render(Chunk& c);
  void Tokenize(size_t index, const ExampleTokenizer& et);
  void Deliver(size_t index, ThreadTimes* t);

  std::vector<std::string_view> lines_;
  const std::string& file_;
  const ChatTemplate* chat_;
  TokenizeOptions options_;
  std::FILE* tokens_out_;
  std::FILE* mask_out_;
  std::string tokens_path_, mask_path_;

  std::vector<Chunk> chunks_;
  std::optional<tokenizers::Tokenizer> tokenizer_;
  std::optional<ExampleTokenizer> example_tokenizer_;
  Status load_status_;
  bool narrow_ = false;  // uint16 ids

  std::atomic<int> tokenizer_state_{kLoading};
  std::atomic<size_t> next_fresh_{0};
  std::atomic<size_t> first_error_chunk_{kNone};
  std::atomic<bool> abort_{false};
  std::atomic<int64_t> lines_done_{0};
  std::mutex mu_;  // guards rendered_, the chunks' `ready`, writing_, next_write_, write_status_
  std::condition_variable tokenizer_cv_;
  std::deque<size_t> rendered_;  // chunks rendered while the tokenizer loaded, not yet tokenized
  bool writing_ = false;
  size_t next_write_ = 0;
  Status write_status_;

  LineCounts counts_;
  PreparePhases phases_;
};

}  // namespace strata::data::internal
