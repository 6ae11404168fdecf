// BpeModel: tokenizer.json's "model" of type BPE, as Hugging Face `tokenizers` runs it: a piece
// is split into characters (unknown ones to <0xNN> byte tokens with byte_fallback, else to
// unk_token, consecutive unknowns fused with fuse_unk), then adjacent symbols are merged lowest
// merge rank first (leftmost among equals) until no listed merge applies. With ignore_merges
// (Llama 3) a piece that is itself in the vocabulary is emitted whole. Dropout, word prefixes and
// suffixes are refused naming their JSON path. Immutable; Tokenize may run on many threads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizers/text/json_node.h"

namespace strata::tokenizers::internal {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  static Result<BpeModel> FromJson(const Json& node, std::string_view path);

  // Appends the ids of `piece` (non-empty, valid UTF-8). Fails on a character the vocabulary
  // cannot express when there is neither byte_fallback nor unk_token.
  Status Tokenize(std::string_view piece, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // nullptr for an id outside the vocabulary.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest vocabulary id.
  int64_t size() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  Status Characters(std::string_view piece, std::vector<int32_t>* symbols) const;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> ids (-1 when absent)
};

}  // namespace strata::tokenizers::internal
