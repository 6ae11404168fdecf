// PreparedSampler: training sequences from a prepared dataset (prepare.h), in Hugging Face's
// label layout: labels[t] = ids[t] where the token is in the loss, -100 elsewhere (the model
// shifts them), so the loss is the mean over the trained tokens.
//
// Each window of seq_len tokens holds one example from its first token, padded after its end
// (pad id, label -100). A causal model attends only backwards, so the padding changes nothing
// the example sees: its loss and gradients are those of the example alone. Examples longer than
// seq_len are an error telling to prepare with --max-length <= seq_len. Windows are visited in
// an order shuffled by the seed; sample i is a pure function of (seed, i), as SequenceSampler's.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/data/token_file.h"

namespace strata::data {

class PreparedSampler {
 public:
  // Maps DIR/tokens.bin and DIR/mask.bin. InvalidArgument if an example is longer than seq_len
  // or an id is >= vocab_size (when > 0); DataLoss if the two files disagree.
  static Result<PreparedSampler> Open(const std::string& dir, int64_t seq_len, uint64_t seed,
                                      int64_t vocab_size, int32_t pad_id);

  int64_t num_examples() const { return static_cast<int64_t>(starts_.size()); }
  int64_t seq_len() const { return seq_len_; }
  void set_position(uint64_t sample_index) { position_ = sample_index; }
  uint64_t position() const { return position_; }

  // Fills batch rows of seq_len ids and labels with samples position() .. +batch, advancing.
  Status Next(int64_t batch, std::span<int32_t> ids, std::span<int32_t> labels);

 private:
  PreparedSampler() = default;
  std::optional<TokenFile> tokens_;
  std::optional<TokenFile> mask_;
  std::vector<int64_t> starts_;  // first token of each example, plus the end
  std::vector<int64_t> order_;   // a seeded permutation of the examples
  int64_t seq_len_ = 0;
  int32_t pad_id_ = 0;
  uint64_t position_ = 0;
};

}  // namespace strata::data
