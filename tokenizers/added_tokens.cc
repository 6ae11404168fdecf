#include "tokenizers/added_tokens.h"

#include <utf8proc.h>

#include "tokenizers/text/utf8.h"

namespace strata::tokenizers::internal {
namespace {

bool IsWordChar(uint32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// The code point ending at `end` (end > 0) and its start.
uint32_t LastChar(std::string_view s, size_t end, size_t* start) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  int len = 0;
  *start = b;
  return DecodeUtf8(s, b, &len);
}

}  // namespace

void AddedVocabulary::Trie::Add(std::string_view s, int32_t index) {
  if (next.empty()) {
    next.emplace_back();
    token.push_back(-1);
  }
  int32_t node = 0;
  for (unsigned char c : s) {
    auto it = next[node].find(c);
    if (it == next[node].end()) {
      next.emplace_back();
      token.push_back(-1);
      const int32_t child = static_cast<int32_t>(next.size()) - 1;
      next[node].emplace(c, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  token[node] = index;
  first[static_cast<unsigned char>(s[0])] = true;
}

Result<AddedVocabulary> AddedVocabulary::FromJson(const Json& node, std::string_view path) {
  AddedVocabulary v;
  if (node.is_null()) return v;
  if (!node.is_array()) {
    return InvalidArgumentError(std::string(path) + ": expected an array, got " + node.type_name());
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string p = IndexPath(path, i);
    const Json& e = node[i];
    AddedToken t;
    STRATA_ASSIGN_OR_RETURN(const int64_t id, GetInt(e, p, "id"));
    if (id < 0 || id > INT32_MAX) {
      return InvalidArgumentError(JoinPath(p, "id") + ": expected a non-negative 32-bit id");
    }
    t.id = static_cast<int32_t>(id);
    STRATA_ASSIGN_OR_RETURN(t.content, GetString(e, p, "content"));
    if (t.content.empty() || FindInvalidUtf8(t.content) != std::string::npos) {
      return InvalidArgumentError(JoinPath(p, "content") + ": expected non-empty UTF-8 text");
    }
    STRATA_ASSIGN_OR_RETURN(t.single_word, GetBool(e, p, "single_word", false));
    STRATA_ASSIGN_OR_RETURN(t.lstrip, GetBool(e, p, "lstrip", false));
    STRATA_ASSIGN_OR_RETURN(t.rstrip, GetBool(e, p, "rstrip", false));
    STRATA_ASSIGN_OR_RETURN(t.special, GetBool(e, p, "special", false));
    // Hugging Face's default: special tokens are matched on the raw text.
    STRATA_ASSIGN_OR_RETURN(t.normalized, GetBool(e, p, "normalized", !t.special));
    const int32_t index = static_cast<int32_t>(v.tokens_.size());
    v.tries_[t.normalized ? 1 : 0].Add(t.content, index);
    v.by_id_[t.id] = v.tokens_.size();
    v.by_content_[t.content] = t.id;
    v.max_id_ = std::max(v.max_id_, t.id);
    v.tokens_.push_back(std::move(t));
  }
  return v;
}

std::optional<int32_t> AddedVocabulary::TokenToId(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::Find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::vector<AddedVocabulary::Segment> AddedVocabulary::Split(std::string_view text,
                                                             bool normalized) const {
  std::vector<Segment> out;
  const Trie& trie = tries_[normalized ? 1 : 0];
  size_t done = 0;  // text before this is emitted
  size_t pos = 0;
  while (!trie.empty() && pos < text.size()) {
    if (!trie.first[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    // Longest token starting at pos.
    int32_t found = -1, node = 0;
    size_t found_end = 0;
    for (size_t k = pos; k < text.size(); ++k) {
      auto it = trie.next[node].find(static_cast<unsigned char>(text[k]));
      if (it == trie.next[node].end()) break;
      node = it->second;
      if (trie.token[node] >= 0) {
        found = trie.token[node];
        found_end = k + 1;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[found];
    size_t start = pos, stop = found_end;
    if (t.single_word) {
      size_t cs = 0;
      int len = 0;
      const bool word_before = start > 0 && IsWordChar(LastChar(text, start, &cs));
      const bool word_after = stop < text.size() && IsWordChar(DecodeUtf8(text, stop, &len));
      if (word_before || word_after) {
        pos = stop;  // as an Aho-Corasick scan resumes after the rejected match
        continue;
      }
    }
    if (t.lstrip) {
      size_t cs = start;
      while (start > done && IsWhitespace(LastChar(text, start, &cs))) start = cs;
    }
    if (t.rstrip) {
      int len = 0;
      while (stop < text.size() && IsWhitespace(DecodeUtf8(text, stop, &len))) {
        stop += static_cast<size_t>(len);
      }
    }
    if (start > done) out.push_back({done, start, -1});
    out.push_back({start, stop, t.id});
    done = pos = stop;
  }
  if (done < text.size() || out.empty()) out.push_back({done, text.size(), -1});
  return out;
}

}  // namespace strata::tokenizers::internal
