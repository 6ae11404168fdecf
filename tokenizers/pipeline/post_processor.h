// Post-processor: the special tokens tokenizer.json's "post_processor" puts around one encoded
// sequence (TemplateProcessing's "single" template: BOS/EOS), ByteLevel (offsets only: nothing to
// do for ids) and Sequence of those. Other types (BertProcessing, RobertaProcessing) are refused
// naming their JSON path. Pair templates are not used (Strata encodes one sequence at a time).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizers/text/json_node.h"

namespace strata::tokenizers::internal {

struct PostProcessor {
  std::vector<int32_t> prefix;  // ids before the sequence (BOS)
  std::vector<int32_t> suffix;  // ids after it (EOS)
};

Result<PostProcessor> MakePostProcessor(const Json& node, std::string_view path);

}  // namespace strata::tokenizers::internal
