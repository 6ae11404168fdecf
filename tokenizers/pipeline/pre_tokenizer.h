// Pre-tokenizers: how tokenizer.json's "pre_tokenizer" cuts normalized text into the pieces the
// model encodes one by one (Split with the file's own regex, ByteLevel, Metaspace, Sequence).
// Built by MakePreTokenizer; any other type or behaviour is refused naming its JSON path.
// Immutable; PreTokenize may run on many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizers/text/json_node.h"

namespace strata::tokenizers::internal {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits and rewrites `*pieces` in place. `at_start`: the first piece begins the input text
  // (Metaspace's prepend_scheme "first" prepends there only).
  virtual Status PreTokenize(std::vector<std::string>* pieces, bool at_start) const = 0;
};

// nullptr for a JSON null (the whole text is one piece).
Result<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const Json& node, std::string_view path);

}  // namespace strata::tokenizers::internal
