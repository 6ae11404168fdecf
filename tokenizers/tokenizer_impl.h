// The parts a Tokenizer is made of (tokenizer.h), in pipeline order. Private to tokenizers/.
#pragma once

#include <memory>
#include <optional>

#include "tokenizers/added_tokens.h"
#include "tokenizers/bpe.h"
#include "tokenizers/pipeline/decoder.h"
#include "tokenizers/pipeline/normalizer.h"
#include "tokenizers/pipeline/post_processor.h"
#include "tokenizers/pipeline/pre_tokenizer.h"

namespace strata::tokenizers::internal {

struct TokenizerImpl {
  AddedVocabulary added;
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null
  BpeModel model;
  PostProcessor post;                // ids around the sequence with add_special_tokens
  std::unique_ptr<Decoder> decoder;  // may be null
  std::optional<int32_t> bos, eos, pad;
};

}  // namespace strata::tokenizers::internal
