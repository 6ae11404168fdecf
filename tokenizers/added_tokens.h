// AddedVocabulary: tokenizer.json's "added_tokens" (special tokens such as <s> or <|im_start|>,
// and added non-special ones such as Qwen's <think>). They are cut out of the text before the
// model sees it, leftmost then longest first, as Hugging Face does: tokens with normalized=false
// on the raw text, tokens with normalized=true on the normalized text; lstrip/rstrip swallow the
// whitespace to their left/right, single_word matches only between non-word characters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizers/text/json_node.h"

namespace strata::tokenizers::internal {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

class AddedVocabulary {
 public:
  // `node`: the "added_tokens" array (absent or null: none).
  static Result<AddedVocabulary> FromJson(const Json& node, std::string_view path);

  // A stretch of text: an added token (id >= 0) or plain text for the pipeline (id -1).
  struct Segment {
    size_t begin, end;
    int32_t id;
  };
  // Cuts `text` at the tokens whose `normalized` flag is `normalized`; no tokens: one segment.
  std::vector<Segment> Split(std::string_view text, bool normalized) const;
  bool HasNormalized() const { return !tries_[1].empty(); }

  std::optional<int32_t> TokenToId(std::string_view content) const;
  const AddedToken* Find(int32_t id) const;
  bool IsSpecial(int32_t id) const {
    const AddedToken* t = Find(id);
    return t != nullptr && t->special;
  }
  int32_t max_id() const { return max_id_; }

 private:
  // A byte trie over token contents; node 0 is the root.
  struct Trie {
    std::vector<std::unordered_map<unsigned char, int32_t>> next;
    std::vector<int32_t> token;  // index into tokens_ ending here, or -1
    std::array<bool, 256> first{};
    bool empty() const { return next.empty(); }
    void Add(std::string_view s, int32_t index);
  };
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  Trie tries_[2];  // [normalized]
  int32_t max_id_ = -1;
};

}  // namespace strata::tokenizers::internal
