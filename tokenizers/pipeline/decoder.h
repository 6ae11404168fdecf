// Decoders: how tokenizer.json's "decoder" turns token strings back into text (ByteLevel,
// Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence), as Hugging Face's decode_chain does:
// each step rewrites the list of token strings, and the result is their concatenation.
// Built by MakeDecoder; any other type is refused naming its JSON path. Immutable.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizers/text/json_node.h"

namespace strata::tokenizers::internal {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
};

// nullptr for a JSON null (tokens are concatenated as they are).
Result<std::unique_ptr<Decoder>> MakeDecoder(const Json& node, std::string_view path);

}  // namespace strata::tokenizers::internal
