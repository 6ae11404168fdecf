// Tokenizer: a model's own text <-> token-id mapping, read from the `tokenizer.json` that Hugging
// Face `tokenizers` writes (Llama 2/3, Mistral, TinyLlama, Qwen), so `strata train` and
// `strata data prepare` tokenize exactly as transformers does.
//
// The pipeline is Hugging Face's: added/special tokens split out first, then normalizer ->
// pre-tokenizer -> model (BPE) -> post-processor; and a decoder back. Each part is a small class
// built from its JSON node by one factory keyed on "type" (docs/tokenizers.md lists what is
// supported); a component or option outside that set is refused naming its JSON path
// ("tokenizer.json: normalizer.normalizers[1].type: 'NFKC' is not supported ...").
//
// A Tokenizer is immutable once built: copies share the tables, and every const method may be
// called from any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::tokenizers {

namespace internal {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // Reads a tokenizer.json. Special-token flags come from the file's own post-processor and
  // added_tokens; BosId/EosId are guessed from the TemplateProcessing post-processor only.
  static Result<Tokenizer> FromFile(const std::string& tokenizer_json_path);
  // Reads DIR/tokenizer.json (+ tokenizer_config.json for bos/eos/pad tokens and add_bos/eos
  // flags, when present).
  static Result<Tokenizer> FromModelDir(const std::string& dir);

  // Text -> ids. With add_special_tokens the post-processor adds BOS/EOS as the file says.
  // Errors: text that is not valid UTF-8 (InvalidArgument naming the byte offset); a piece the
  // model cannot encode (no unk_token, no byte_fallback).
  Result<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids -> text through the file's decoder. Ids outside the vocabulary decode to nothing.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token's string as stored in the vocabulary ("" for an id outside it).
  std::string IdToToken(int32_t id) const;
  // One past the largest id (vocabulary and added tokens).
  int64_t VocabSize() const;
  std::optional<int32_t> BosId() const;
  std::optional<int32_t> EosId() const;
  std::optional<int32_t> PadId() const;
  // Whether `id` is an added token flagged special.
  bool IsSpecial(int32_t id) const;
  // Whether Encode adds BOS / EOS (from the post-processor, or tokenizer_config.json's
  // add_bos_token / add_eos_token when FromModelDir read one).
  bool AddsBos() const;
  bool AddsEos() const;

 private:
  explicit Tokenizer(std::shared_ptr<const internal::TokenizerImpl> impl);
  std::shared_ptr<const internal::TokenizerImpl> impl_;
};

}  // namespace strata::tokenizers
