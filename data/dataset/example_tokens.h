// ExampleTokenizer: an Example (jsonl_example.h) to token ids and a loss mask, with the model's
// own tokenizer and chat template.
//
// Text: the tokenizer's ids with its special tokens (BOS where it adds one), then EOS if the
// tokenizer has one and did not add it; every token is trained.
// Chat: the conversation rendered by the chat template (no generation prompt) and tokenized
// without added special tokens (the template writes them), as apply_chat_template(tokenize=True)
// does. By default only assistant turns are trained: turn i spans from the end of the render of
// messages[:i] with the generation prompt to the end of the render of messages[:i+1] (so the
// turn's end-of-turn token is trained: the model learns to stop). The span is exact - both
// renders must be prefixes of the whole conversation's, and their tokens prefixes of its tokens
// - or the example is an error saying why (see Tokenize).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/chat_template/chat_template.h"
#include "data/dataset/jsonl_example.h"
#include "tokenizers/tokenizer.h"

namespace strata::data {

enum class Overlong { kTruncate, kSkip };

struct TokenizeOptions {
  bool train_on_prompt = false;  // train every token of a conversation, not only the assistant's
  int64_t max_tokens = 0;        // 0: no limit; longer examples are truncated or skipped
  Overlong overlong = Overlong::kTruncate;
};

struct ExampleTokens {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;  // 1 where the token is a label in the loss
  bool truncated = false;
  bool skipped = false;  // longer than max_tokens with Overlong::kSkip (ids empty)
};

class ExampleTokenizer {
 public:
  // Both must outlive this. `chat` may be null when the dataset has text lines only (a chat
  // example is then an error saying the model directory has no chat_template).
  ExampleTokenizer(const tokenizers::Tokenizer* tokenizer, const ChatTemplate* chat,
                   TokenizeOptions options)
      : tokenizer_(tokenizer), chat_(chat), options_(options) {}

  // Errors are "FILE:LINE: ..." (InvalidArgument): the template failed (its message), the text
  // cannot be encoded, or an assistant turn cannot be located exactly (the template renders it
  // differently once later turns follow, or its first token merges with the prompt's last) -
  // the message advises --train-on all, which trains the whole conversation.
  Result<ExampleTokens> Tokenize(const Example& ex, std::string_view file, int64_t line_no) const;

  const TokenizeOptions& options() const { return options_; }

 private:
  Status MarkAssistantTurns(const Example& ex, const std::string& full,
                            const std::vector<int32_t>& ids, std::vector<uint8_t>& loss,
                            const std::string& where) const;

  const tokenizers::Tokenizer* tokenizer_;
  const ChatTemplate* chat_;
  TokenizeOptions options_;
};

}  // namespace strata::data
