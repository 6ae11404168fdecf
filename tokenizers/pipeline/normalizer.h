// Normalizers: the text rewrites tokenizer.json's "normalizer" applies before pre-tokenization
// (NFC/NFD/NFKC/NFKD, Prepend, Replace, Sequence). Built by MakeNormalizer from the JSON node;
// any other type is refused naming its path. Immutable; Normalize may run on many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizers/text/json_node.h"

namespace strata::tokenizers::internal {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `*s` (valid UTF-8) in place.
  virtual Status Normalize(std::string* s) const = 0;
};

// nullptr for a JSON null (no normalizer).
Result<std::unique_ptr<Normalizer>> MakeNormalizer(const Json& node, std::string_view path);

}  // namespace strata::tokenizers::internal
