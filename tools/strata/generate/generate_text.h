// How `strata generate` turns prompts into token ids and ids back into text: with the model's
// own tokenizer (tokenizer.json, tokenizers/tokenizer.h) and chat template (tokenizer_config.json,
// data/chat_template) when the model directory has them, else byte-level ids (a prompt's bytes
// are its ids, as `strata train` reads text). The stop ids are the tokenizer's EOS and
// generation_config.json's eos_token_id (one id or a list: the chat template's end-of-turn
// tokens, e.g. Llama 3's <|eot_id|>).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "data/chat_template/chat_template.h"
#include "tokenizers/tokenizer.h"

namespace strata::cli {

class GenerateText {
 public:
  // Looks in `dirs` in order for tokenizer.json (a directory without one: byte-level ids, which
  // need vocab >= 256). InvalidArgument when the tokenizer's vocabulary exceeds `vocab`.
  static Result<GenerateText> Open(const std::vector<std::string>& dirs, int64_t vocab);

  bool has_tokenizer() const { return tokenizer_.has_value(); }
  const std::string& source() const { return source_; }
  // The prompt's ids (BOS added as the tokenizer says).
  Result<std::vector<int32_t>> EncodePrompt(const std::string& text) const;
  // `messages` ([{"role", "content"}, ...]) rendered by the chat template with the generation
  // prompt, then tokenized without adding special tokens again (the template writes them).
  // FailedPrecondition naming what is missing when there is no tokenizer or template.
  Result<std::vector<int32_t>> EncodeChat(const nlohmann::ordered_json& messages,
                                          std::string* rendered) const;
  std::string Decode(std::span<const int32_t> ids) const;
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

 private:
  std::optional<tokenizers::Tokenizer> tokenizer_;
  std::optional<data::ChatTemplate> chat_;
  std::string chat_error_;  // why there is no chat template
  std::string source_;
  std::vector<int32_t> stop_ids_;
};

// Streams one sequence's text: each Push decodes the ids so far and returns what is new, holding
// back a trailing incomplete UTF-8 character (U+FFFD from a partial byte sequence).
class TextStream {
 public:
  explicit TextStream(const GenerateText* text) : text_(text) {}
  std::string Push(int32_t id);
  std::string Flush();

 private:
  const GenerateText* text_;
  std::vector<int32_t> ids_;
  size_t printed_ = 0;
};

}  // namespace strata::cli
