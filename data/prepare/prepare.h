// `strata data prepare`: a JSONL dataset tokenized once, with the model's tokenizer and chat
// template, into a directory training maps instead of re-tokenizing:
//   DIR/tokens.bin      the ids of every example, one after another, in llm.c's token format
//                       (models/data/token_file.h: uint16 ids when the vocabulary fits, else
//                       uint32), so llm.c / nanoGPT-style readers still read it
//   DIR/mask.bin        one byte per token: bit 0 = the token is a label in the loss, bit 1 = it
//                       starts an example (packing restarts positions there)
//   DIR/prepared.json   the summary below and the cache key it was made with
// Lines are parsed, rendered and tokenized by `threads` workers, one of which loads the tokenizer
// first (data/prepare/line_pipeline.h); the output is the same for any thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "data/dataset/example_tokens.h"

namespace strata::data {

inline constexpr uint8_t kMaskLoss = 1;
inline constexpr uint8_t kMaskStart = 2;

struct PrepareOptions {
  TokenizeOptions tokenize;
  int threads = 1;
  // Consecutive lines a thread takes at once; 0 picks a size giving each thread many chunks.
  // Tests set it small to make many chunks of a short file; the output never depends on it.
  int64_t lines_per_chunk = 0;
};

// Where the time of one preparation went (bench/data_prepare prints it): wall seconds of each
// step as the calling thread saw it, and CPU seconds summed over the threads that did each part.
// With more than one thread the tokenizer loads on one of them while the others render.
struct PreparePhases {
  double setup_seconds = 0;   // chat template, reading the JSONL and cutting it into lines
  double lines_seconds = 0;   // from the workers' start until the last line is written
  double finish_seconds = 0;  // the token file's header, closing and renaming the files
  double setup_cpu = 0;       // (one thread)
  double load_cpu = 0;        // tokenizer.json (one thread)
  double render_cpu = 0;      // parsing lines and rendering chat templates (all threads)
  double tokenize_cpu = 0;    // tokenizing and masking (all threads)
  double write_cpu = 0;       // appending chunks to the files in order (one thread at a time)
  double finish_cpu = 0;      // (one thread)
  double idle_seconds = 0;    // threads waiting for the tokenizer with nothing left to render
  // The most one thread spent on the lines: its CPU seconds (the load included) plus its idle
  // ones. On a machine with a free core per thread, lines_seconds is about this.
  double busiest_thread_seconds = 0;
};

struct PrepareSummary {
  int64_t examples = 0;     // examples written
  int64_t skipped = 0;      // longer than max_tokens with --overlong skip (not written)
  int64_t truncated = 0;    // cut to max_tokens (written)
  int64_t blank_lines = 0;  // whitespace-only lines (not examples)
  int64_t tokens = 0;
  int64_t loss_tokens = 0;  // tokens that are labels in the loss
  int64_t vocab_size = 0;
  double seconds = 0;  // the whole preparation
  PreparePhases phases;
  double masked_share() const {
    return tokens ? 1.0 - static_cast<double>(loss_tokens) / static_cast<double>(tokens) : 0;
  }
  // "1000 examples, 123456 tokens (0 truncated, 0 skipped, 0 blank lines), 61.2% masked"
  std::string ToString() const;
};

// Called now and then with (lines done, lines in all).
using PrepareProgress = std::function<void(int64_t done, int64_t total)>;

// Tokenizes `jsonl` with MODEL_DIR's tokenizer.json and chat template (tokenizer_config.json)
// into `out_dir` (created; files replaced). `key` is recorded in prepared.json. Errors: the first
// bad line by line number ("FILE:LINE: field ..."), a missing tokenizer, an I/O failure naming
// the file; nothing is written under out_dir's final names on error (the files are written under
// per-process names and renamed at the end; out_dir is removed again if this made it).
Result<PrepareSummary> PrepareDataset(const std::string& jsonl, const std::string& model_dir,
                                      const std::string& out_dir, const PrepareOptions& options,
                                      const std::string& key = "",
                                      const PrepareProgress& progress = nullptr);

// A key naming the inputs: a hash of the JSONL file's bytes, MODEL_DIR's tokenizer.json and
// tokenizer_config.json, and the tokenize options (not the thread count). NotFound for a missing
// file.
Result<std::string> PrepareCacheKey(const std::string& jsonl, const std::string& model_dir,
                                    const TokenizeOptions& options);

// The prepared directory for these inputs under `cache_root` (CACHE_ROOT/<key>): reused when its
// prepared.json carries the same key, else prepared afresh (`*reused` says which).
Result<std::string> PrepareCached(const std::string& jsonl, const std::string& model_dir,
                                  const std::string& cache_root, const PrepareOptions& options,
                                  bool* reused, PrepareSummary* summary,
                                  const PrepareProgress& progress = nullptr);

}  // namespace strata::data
