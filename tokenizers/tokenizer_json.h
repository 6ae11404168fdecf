// Reading a tokenizer.json quickly. Llama 3's is 9 MB, almost all of it model.vocab (128k
// entries) and model.merges (280k pairs); as a JSON tree those are about a million small
// allocations that are built, walked once and freed, which made loading the tokenizer the
// largest serial step of `strata data prepare`. So the file is read with a SAX handler that
// builds the tree for everything else and streams a BPE model's vocab and merges straight into
// flat tables (BpeTables). Anything in them of a shape other than the expected one (a non-integer
// id, a merge that is not "a b" or [a, b]) makes the reader fall back to the whole tree, so the
// errors naming JSON paths stay those of BpeModel::FromJson. Private to tokenizers/.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "tokenizers/bpe.h"
#include "tokenizers/text/json_node.h"

namespace strata::tokenizers::internal {

struct TokenizerJson {
  Json root;  // model.vocab is {} and model.merges is [] when `bpe` holds them
  std::optional<BpeTables> bpe;
};

// Reads and parses `path`. Errors: the file cannot be read (naming it), not valid JSON, not an
// object.
Result<TokenizerJson> ReadTokenizerJson(const std::string& path);

// The whole file as bytes (IoError naming it).
Result<std::string> ReadFileBytes(const std::string& path);

}  // namespace strata::tokenizers::internal
