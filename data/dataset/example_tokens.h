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

// An example as the chat template renders it, before any tokenization: the half of
// ExampleTokenizer::Tokenize that needs no tokenizer (RenderExample), so `strata data prepare`
// can render lines while the tokenizer is still loading. A render failure is kept, not returned,
// so that Tokenize reports the failures of one line in the same order as when it renders itself.
struct RenderedExample {
  Example example;
  Status status;     // no chat template, or the whole conversation failed to render
  std::string full;  // kChat: the conversation rendered without the generation prompt
  // An assistant turn (only when the prompt is not trained); the last one may hold a failure,
  // after which no later turn is rendered.
  struct Turn {
    size_t message = 0;      // its index in example.messages
    Status before_status;    // rendering messages[:message] with the generation prompt
    std::string before;      // that render ("" for the first message)
    Status marked_status;    // rendering with a marker after this turn's content
    size_t content_end = 0;  // where that render parts from `full` (Note [Turn end])
  };
  std::vector<Turn> turns;
};

struct ExampleTokens {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;  // 1 where the token is a label in the loss
  bool truncated = false;
  bool skipped = false;  // longer than max_tokens with Overlong::kSkip (ids empty)
};

// Renders `ex` with `chat` (may be null: a chat example then carries the error). `file` and
// `line_no` name the example in errors. Thread-safe as ChatTemplate::Apply is.
RenderedExample RenderExample(Example ex, const ChatTemplate* chat, const TokenizeOptions& options,
                              std::string_view file, int64_t line_no);

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
  // The same for an example RenderExample rendered with this tokenizer's chat template and
  // options: Tokenize(ex) is Tokenize(RenderExample(ex, chat, options, file, line_no)).
  Result<ExampleTokens> Tokenize(const RenderedExample& rendered, std::string_view file,
                                 int64_t line_no) const;

  const TokenizeOptions& options() const { return options_; }

 private:
  Status MarkAssistantTurns(const RenderedExample& r, const std::vector<int32_t>& ids,
                            std::vector<uint8_t>& loss, const std::string& where) const;

  const tokenizers::Tokenizer* tokenizer_;
  const ChatTemplate* chat_;
  TokenizeOptions options_;
};

}  // namespace strata::data
