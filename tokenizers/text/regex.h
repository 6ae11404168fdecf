// Regex: a tokenizer.json pattern ({"Regex": ...} or {"String": ...}) compiled by PCRE2 with UTF
// and Unicode properties (UCP: \s, \w, \d and \p{L} are Unicode-aware, as in the Rust `regex` and
// Oniguruma engines the files were written for), look-ahead included, JIT-compiled when the
// platform allows. Immutable and shareable across threads: match data is per call.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace strata::tokenizers::internal {

class Regex {
 public:
  // `literal`: the pattern is a plain string ({"String": ...}), matched as is.
  static Result<Regex> Compile(std::string_view pattern, bool literal);

  // Non-overlapping matches [begin, end) in `s` (valid UTF-8), left to right; an empty match
  // advances one character. Fails only when PCRE2 runs out of its match limits (named).
  Result<std::vector<std::pair<size_t, size_t>>> FindAll(std::string_view s) const;
  // `s` with every match replaced by `content` (taken literally).
  Result<std::string> ReplaceAll(std::string_view s, std::string_view content) const;

 private:
  struct Code;
  explicit Regex(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;
};

}  // namespace strata::tokenizers::internal
