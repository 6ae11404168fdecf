// RoPE frequency scaling of a Llama-family config.json (`rope_scaling`, or the newer
// `rope_parameters`): the types Strata implements, read with the field named in every error, and
// the inverse frequencies and cos/sin tables they give — transformers' modeling_rope_utils
// formulas, computed in double and rounded to float once.
//
//   default  inv_freq[j] = theta^(-2j / head_dim)
//   linear   inv_freq[j] / factor
//   dynamic  (NTK-aware) for a sequence of length L > max_position_embeddings, the base becomes
//            theta * (factor * L / max_position_embeddings - (factor - 1))^(head_dim /
//            (head_dim - 2)); L <= max_position_embeddings leaves the default frequencies. As in
//            transformers, L is the sequence being computed (its largest position id + 1), and
//            the threshold is max_position_embeddings (transformers reads but does not use
//            rope_scaling.original_max_position_embeddings for this type; neither does Strata).
//            Strata decides per forward; transformers' rotary module keeps the frequencies of the
//            longest sequence seen until a sequence shorter than max_position_embeddings resets
//            them, so the two agree for every call whose length is not between
//            max_position_embeddings and a longer length seen earlier.
//   llama3   (Llama 3.1 and later) wavelength w = 2 pi / inv_freq against original context C:
//            w < C / high_freq_factor keeps inv_freq, w > C / low_freq_factor divides it by
//            factor, between the two s = (C / w - low) / (high - low) blends
//            (1 - s) inv_freq / factor + s inv_freq.
// `yarn`, `longrope` and any other type are refused naming the field and the value.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace strata::llama {

enum class RopeType { kDefault, kLinear, kDynamic, kLlama3 };

// "default", "linear", "dynamic", "llama3" (config.json's rope_type values).
std::string_view RopeTypeName(RopeType type);

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;            // linear, dynamic, llama3: >= 1
  double low_freq_factor = 0.0;   // llama3
  double high_freq_factor = 0.0;  // llama3: > low_freq_factor
  // llama3: the pre-training context C (required). dynamic: kept as written (0 when absent) so
  // the config is written back unchanged; not used (see above).
  int64_t original_max_position_embeddings = 0;

  bool operator==(const RopeScaling&) const = default;
};

// Parses `value` (the object at config.json's `key`, "rope_scaling" or "rope_parameters"; null is
// the default RoPE). A rope_theta inside the object (transformers >= 5 keeps it there) is written
// to *rope_theta. `source` and `key` prefix every error: InvalidArgument for a malformed or
// missing parameter (a factor below 1, high_freq_factor <= low_freq_factor, ...), Unimplemented
// for a rope_type Strata does not implement or a key it does not know.
Status ParseRopeScaling(const nlohmann::json& value, std::string_view source, std::string_view key,
                        RopeScaling* out, double* rope_theta);

// The rope_scaling object transformers writes for `s` (null for the default RoPE).
nlohmann::json RopeScalingJson(const RopeScaling& s);

// Inverse frequencies [head_dim / 2] in double. `seq_len` is the length of the sequence being
// computed (used by dynamic only).
std::vector<double> RopeInvFreq(const RopeScaling& s, int64_t head_dim, double rope_theta,
                                int64_t max_position_embeddings, int64_t seq_len);

// cos/sin tables [num_positions, inv_freq.size()]: angle = position * inv_freq[j], in double,
// rounded to float.
void RopeTables(const std::vector<double>& inv_freq, int64_t num_positions, std::vector<float>* cos,
                std::vector<float>* sin);
// One row of those tables: cos[j], sin[j] of position * inv_freq[j] (inv_freq.size() floats each).
void RopeTableRow(const std::vector<double>& inv_freq, int64_t position, float* cos, float* sin);

}  // namespace strata::llama
