// SequenceSampler: fixed-length training sequences drawn from a TokenFile by seed.
//
// Sample i is the window starting at Start(i) - seq_len + 1 ids for next-token targets, seq_len
// ids for Hugging Face labels (the model shifts them, so every id of the stream can be drawn) - a
// pure function of (seed, i), uniform over every start that fits — so a run is reproducible from
// its seed, resumes exactly from a sample index (set_position), and data-parallel ranks can take
// disjoint indices. Only the windows drawn are touched, so a shard mapped from disk is read
// sparsely.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "models/data/token_file.h"

namespace strata::data {

// How targets are laid out next to the inputs of a window w[0..seq_len].
enum class LabelStyle {
  // targets[t] = w[t + 1] (llm.c, nanoGPT): every input position has its next token.
  kNextToken,
  // labels = inputs = w[0..seq_len) (Hugging Face: the model shifts the labels itself, so the
  // last position is not scored).
  kHuggingFace,
};

class SequenceSampler {
 public:
  // `file` must outlive the sampler. InvalidArgument if seq_len < 1 or the file holds fewer ids
  // than one window (seq_len + 1 for kNextToken, seq_len for kHuggingFace). vocab_size > 0
  // checks every id drawn against it. `style` is the layout Next gives by default.
  static Result<SequenceSampler> Create(const TokenFile* file, int64_t seq_len, uint64_t seed,
                                        int64_t vocab_size = 0,
                                        LabelStyle style = LabelStyle::kNextToken);

  int64_t seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }
  // Number of distinct window starts.
  int64_t num_starts() const { return num_starts_; }
  // Index of the next sample Next() draws.
  uint64_t position() const { return position_; }
  void set_position(uint64_t sample_index) { position_ = sample_index; }

  // First id of sample `index`'s window.
  int64_t Start(uint64_t index) const;

  // Fills `batch` rows (batch * seq_len ids each span) with samples position() .. +batch and
  // advances position(). InvalidArgument if a span has the wrong size or an id is outside the
  // vocabulary (naming the file and position), or if kNextToken is asked of a sampler created
  // for kHuggingFace (its windows have no id after the last). kHuggingFace from a kNextToken
  // sampler takes the first seq_len ids of its windows.
  Status Next(int64_t batch, std::span<int32_t> inputs, std::span<int32_t> targets);
  Status Next(int64_t batch, std::span<int32_t> inputs, std::span<int32_t> targets,
              LabelStyle style);

 private:
  SequenceSampler() = default;
  const TokenFile* file_ = nullptr;
  int64_t seq_len_ = 0;
  int64_t window_ = 0;  // ids drawn per sample
  LabelStyle style_ = LabelStyle::kNextToken;
  uint64_t seed_ = 0;
  int64_t vocab_size_ = 0;
  int64_t num_starts_ = 0;
  uint64_t position_ = 0;
};

}  // namespace strata::data
