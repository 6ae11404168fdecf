#include "data/prepare/prepared_sampler.h"

#include <algorithm>
#include <random>

#include "data/prepare/prepare.h"

namespace strata::data {

Result<PreparedSampler> PreparedSampler::Open(const std::string& dir, int64_t seq_len,
                                              uint64_t seed, int64_t vocab_size, int32_t pad_id,
                                              bool pack) {
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
  std::vector<int64_t> order(s.starts_.size() - 1);
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t used = seq_len;
  for (int64_t e : order) {
    const int64_t len = s.starts_[static_cast<size_t>(e) + 1] - s.starts_[static_cast<size_t>(e)];
    if (!pack || used + len > seq_len) {
      s.windows_.emplace_back();
      used = 0;
    }
    s.windows_.back().push_back(e);
    used += len;
  }
  s.pack_ = pack;
  s.tokens_.emplace(std::move(tokens));
  s.mask_.emplace(std::move(mask));
  s.seq_len_ = seq_len;
  s.pad_id_ = pad_id;
  return s;
}

Status PreparedSampler::Next(int64_t batch, std::span<int32_t> ids, std::span<int32_t> labels,
                             std::span<int32_t> positions, std::span<int32_t> segments) {
  const size_t want = static_cast<size_t>(batch * seq_len_);
  if (ids.size() != want || labels.size() != want ||
      (!positions.empty() && positions.size() != want) ||
      (!segments.empty() && segments.size() != want) || (pack_ && segments.empty())) {
    return InvalidArgumentError("PreparedSampler::Next: spans of " + std::to_string(want) +
                                " ids, labels (and positions and segments, needed when packed)");
  }
  const uint64_t n = windows_.size();
  for (int64_t b = 0; b < batch; ++b, ++position_) {
    const auto& window = windows_[static_cast<size_t>(position_ % n)];  // epoch after epoch
    const size_t row = static_cast<size_t>(b * seq_len_);
    size_t t = 0;
    int32_t segment = 0;
    for (int64_t e : window) {
      const int64_t begin = starts_[static_cast<size_t>(e)];
      const int64_t len = starts_[static_cast<size_t>(e) + 1] - begin;
      for (int64_t k = 0; k < len; ++k, ++t) {
        const int32_t id = static_cast<int32_t>((*tokens_)[begin + k]);
        ids[row + t] = id;
        // The first token of an example is never a target (nothing of it precedes it).
        labels[row + t] = ((*mask_)[begin + k] & kMaskLoss) && k > 0 ? id : -100;
        if (!positions.empty()) positions[row + t] = static_cast<int32_t>(k);
        if (!segments.empty()) segments[row + t] = segment;
      }
      ++segment;
    }
    for (int32_t k = 0; t < static_cast<size_t>(seq_len_); ++t, ++k) {
      ids[row + t] = pad_id_;
      labels[row + t] = -100;
      if (!positions.empty()) positions[row + t] = k;
      if (!segments.empty()) segments[row + t] = segment;
    }
  }
  return Status::Ok();
}

}  // namespace strata::data
