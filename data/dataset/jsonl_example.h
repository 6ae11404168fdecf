// One training example read from a line of a JSONL dataset, in any of the formats fine-tuning
// tools take:
//   {"text": "..."}                                        plain text, every token trained
//   {"instruction", "input"?, "output", "system"?}         Alpaca: user = instruction (+ "\n\n"
//                                                          + input when not empty), assistant =
//                                                          output
//   {"messages": [{"role", "content"}, ...]}                OpenAI chat
//   {"conversations": [{"from", "value"}, ...]}             ShareGPT (human/user, gpt/assistant,
//                                                          system, tool)
// Conversations become OpenAI messages, rendered later by the model's chat template.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace strata::data {

struct Example {
  enum class Kind { kText, kChat };
  Kind kind = Kind::kText;
  std::string text;                 // kText
  nlohmann::ordered_json messages;  // kChat: [{"role", "content"}, ...]
};

// Parses one line. InvalidArgument "FILE:LINE: ..." naming the field for malformed JSON, a line
// in no known format (listing the formats), a field of the wrong type, an unknown role, an empty
// conversation or one without an assistant turn.
Result<Example> ParseExampleLine(std::string_view line, std::string_view file, int64_t line_no);

}  // namespace strata::data
