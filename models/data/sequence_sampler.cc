#include "models/data/sequence_sampler.h"

#include <algorithm>
#include <string>
#include <vector>

namespace strata::data {
namespace {

__extension__ typedef unsigned __int128 Uint128;  // GCC/Clang; -Wpedantic knows no __int128

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

Result<SequenceSampler> SequenceSampler::Create(const TokenFile* file, int64_t seq_len,
                                                uint64_t seed, int64_t vocab_size,
                                                LabelStyle style) {
  if (seq_len < 1) {
    return InvalidArgumentError("sequence length " + std::to_string(seq_len) +
                                " must be at least 1");
  }
  const int64_t window = seq_len + (style == LabelStyle::kNextToken ? 1 : 0);
  if (file->size() < window) {
    return InvalidArgumentError(
        "token file " + file->path() + " holds " + std::to_string(file->size()) +
        " tokens, fewer than one window of " +
        (style == LabelStyle::kNextToken ? "seq_len + 1 = " : "seq_len = ") +
        std::to_string(window));
  }
  SequenceSampler s;
  s.file_ = file;
  s.seq_len_ = seq_len;
  s.seed_ = seed;
  s.vocab_size_ = vocab_size;
  s.window_ = window;
  s.style_ = style;
  s.num_starts_ = file->size() - window + 1;
  return s;
}

int64_t SequenceSampler::Start(uint64_t index) const {
  const uint64_t r = SplitMix64(SplitMix64(seed_) ^ SplitMix64(index ^ 0xD1B54A32D192ED03ull));
  // Lemire's multiply-shift maps r uniformly (to within 2^-64) onto [0, num_starts).
  return static_cast<int64_t>((static_cast<Uint128>(r) * static_cast<uint64_t>(num_starts_)) >> 64);
}

Status SequenceSampler::Next(int64_t batch, std::span<int32_t> inputs, std::span<int32_t> targets) {
  return Next(batch, inputs, targets, style_);
}

Status SequenceSampler::Next(int64_t batch, std::span<int32_t> inputs, std::span<int32_t> targets,
                             LabelStyle style) {
  if (style == LabelStyle::kNextToken && window_ == seq_len_) {
    return InvalidArgumentError(
        "sampler: next-token targets from a sampler made for Hugging "
        "Face labels (its windows hold seq_len ids, no id after the last)");
  }
  const auto n = static_cast<size_t>(batch * seq_len_);
  if (batch < 1 || inputs.size() != n || targets.size() != n) {
    return InvalidArgumentError("sampler: batch " + std::to_string(batch) + " x seq_len " +
                                std::to_string(seq_len_) + " needs spans of " + std::to_string(n) +
                                " ids, got " + std::to_string(inputs.size()) + " and " +
                                std::to_string(targets.size()));
  }
  std::vector<int32_t> window(static_cast<size_t>(window_));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = Start(position_ + static_cast<uint64_t>(b));
    STRATA_RETURN_IF_ERROR(file_->Read(start, window_, window.data(), vocab_size_));
    const auto row = static_cast<size_t>(b * seq_len_);
    std::copy_n(window.begin(), seq_len_, inputs.begin() + static_cast<ptrdiff_t>(row));
    std::copy_n(window.begin() + (style == LabelStyle::kNextToken ? 1 : 0), seq_len_,
                targets.begin() + static_cast<ptrdiff_t>(row));
  }
  position_ += static_cast<uint64_t>(batch);
  return Status::Ok();
}

}  // namespace strata::data
