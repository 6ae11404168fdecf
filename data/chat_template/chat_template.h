// ChatTemplate: a model's own chat template (the Jinja `chat_template` of its
// tokenizer_config.json) rendered for a list of messages exactly as transformers'
// apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders it, so the
// prompt format is data from the model directory, never hard-coded per family.
//
// The Jinja subset is the one chat templates use (jinja_parser.h, jinja_interpreter.h,
// jinja_builtins.h); anything else is refused naming the construct and the template line.
// A ChatTemplate is immutable once built and Apply may be called from many threads at once.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace strata::data {

namespace jinja {
struct Stmt;
}

class ChatTemplate {
 public:
  // Parses `source`; `special_tokens` maps names (bos_token, eos_token, ...) to their text.
  // InvalidArgument naming the line for a syntax error or an unsupported construct.
  static Result<ChatTemplate> FromString(const std::string& source,
                                         nlohmann::ordered_json special_tokens = {});
  // Reads DIR/tokenizer_config.json: its chat_template (a string, or the list of {name,
  // template} where "default" is taken) and its special tokens (strings or {"content": ...}).
  // NotFound if the file is missing; FailedPrecondition if it has no chat_template (the message
  // says to train on {"text": ...} lines or add a template).
  static Result<ChatTemplate> FromModelDir(const std::string& dir);

  // The rendered text for `messages` (a JSON list of {"role", "content", ...}). `extra` adds
  // template variables (e.g. {"enable_thinking": false}); `tools` is none, as transformers
  // passes it without tools. Errors name the template line, or carry raise_exception's message.
  Result<std::string> Apply(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  nlohmann::ordered_json special_tokens_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> body_;
};

}  // namespace strata::data
