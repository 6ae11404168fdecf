#include "data/prepare/prepared_sampler.h"

#include <algorithm>
#include <random>

#include "data/prepare/prepare.h"

namespace strata::data {

Result<PreparedSampler> PreparedSampler::Open(const std::string& dir, int64_t seq_len,
                                              uint64_t seed, int64_t vocab_size, int32_t pad_id) {
  if (seq_len < 2) return InvalidArgumentError("seq_len must be at least 2");
  PreparedSampler s;
  STRATA_ASSIGN_OR_RETURN(TokenFile tokens,
                          TokenFile::Open(dir + "/tokens.bin", TokenFormat::kLlmc));
  STRATA_ASSIGN_OR_RETURN(TokenFile mask, TokenFile::Open(dir + "/mask.bin", TokenFormat::kBytes));
  if (mask.size() != tokens.size()) {
    return DataLossError(dir + ": mask.bin holds " + std::to_string(mask.size()) + " entries for " +
                         std::to_string(tokens.size()) + " tokens");
  }
  for (int64_t t = 0; t < tokens.size(); ++t) {
    if (mask[t] & kMaskStart) s.starts_.push_back(t);
    if (vocab_size > 0 && tokens[t] >= static_cast<uint64_t>(vocab_size)) {
      return InvalidArgumentError(
          dir + "/tokens.bin: id " + std::to_string(tokens[t]) + " at token " + std::to_string(t) +
          " is outside the model's vocabulary (" + std::to_string(vocab_size) + ")");
    }
  }
  if (s.starts_.empty() || s.starts_[0] != 0)
    return DataLossError(dir + "/mask.bin: no example starts at token 0");
  s.starts_.push_back(tokens.size());
  for (size_t e = 0; e + 1 < s.starts_.size(); ++e) {
    int64_t len = s.starts_[e + 1] - s.starts_[e];
    if (len > seq_len) {
      return InvalidArgumentError(dir + ": example " + std::to_string(e) + " has " +
                                  std::to_string(len) + " tokens, more than --seq-len " +
                                  std::to_string(seq_len) + " (prepare with --max-length " +
                                  std::to_string(seq_len) + ", or raise --seq-len)");
    }
  }
  s.order_.resize(s.starts_.size() - 1);
  for (size_t k = 0; k < s.order_.size(); ++k) s.order_[k] = static_cast<int64_t>(k);
  std::mt19937_64 rng(seed);
  std::shuffle(s.order_.begin(), s.order_.end(), rng);
  s.tokens_.emplace(std::move(tokens));
  s.mask_.emplace(std::move(mask));
  s.seq_len_ = seq_len;
  s.pad_id_ = pad_id;
  return s;
}

Status PreparedSampler::Next(int64_t batch, std::span<int32_t> ids, std::span<int32_t> labels) {
  const size_t want = static_cast<size_t>(batch * seq_len_);
  if (ids.size() != want || labels.size() != want) {
    return InvalidArgumentError("PreparedSampler::Next: spans of " + std::to_string(want) + " ids");
  }
  const int64_t n = static_cast<int64_t>(order_.size());
  for (int64_t b = 0; b < batch; ++b, ++position_) {
    // Epoch by epoch through the shuffled order.
    int64_t e =
        order_[static_cast<size_t>(static_cast<int64_t>(position_ % static_cast<uint64_t>(n)))];
    int64_t begin = starts_[static_cast<size_t>(e)],
            len = starts_[static_cast<size_t>(e) + 1] - begin;
    int32_t* row_ids = ids.data() + b * seq_len_;
    int32_t* row_labels = labels.data() + b * seq_len_;
    for (int64_t t = 0; t < seq_len_; ++t) {
      if (t < len) {
        int32_t id = static_cast<int32_t>((*tokens_)[begin + t]);
        row_ids[t] = id;
        // The first token of an example is never a target (nothing precedes it).
        row_labels[t] = ((*mask_)[begin + t] & kMaskLoss) && t > 0 ? id : -100;
      } else {
        row_ids[t] = pad_id_;
        row_labels[t] = -100;
      }
    }
  }
  return Status::Ok();
}

}  // namespace strata::data
