#include "data/dataset/example_tokens.h"

#include <algorithm>

namespace strata::data {
namespace {

bool IsPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

RenderedExample RenderExample(Example ex, const ChatTemplate* chat, const TokenizeOptions& options,
                              std::string_view file, int64_t line_no) {
  RenderedExample r;
  r.example = std::move(ex);
  if (r.example.kind == Example::Kind::kText) return r;
  std::string where = std::string(file) + ":" + std::to_string(line_no);
  if (chat == nullptr) {
    r.status = FailedPreconditionError(where +
                                       ": a conversation, but the model directory's "
                                       "tokenizer_config.json has no chat_template to render it");
    return r;
  }
  const auto& msgs = r.example.messages;
  auto full = chat->Apply(msgs, /*add_generation_prompt=*/false);
  if (!full.ok()) {
    r.status = full.status().WithContext(where + ": messages");
    return r;
  }
  r.full = std::move(*full);
  if (options.train_on_prompt) return r;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i]["role"] != "assistant") continue;
    RenderedExample::Turn& turn = r.turns.emplace_back();
    turn.message = i;
    if (i > 0) {
      nlohmann::ordered_json head(msgs.begin(), msgs.begin() + static_cast<ptrdiff_t>(i));
      auto before = chat->Apply(head, /*add_generation_prompt=*/true);
      if (!before.ok()) {
        turn.before_status = before.status();
        return r;
      }
      turn.before = std::move(*before);
    }
    // Note [Turn end]: the end of the turn's content is found by rendering the conversation
    // again with a marker after this turn's content: the two renders agree up to there. The
    // turn ends with the token after the content when that is a special token (<|eot_id|>,
    // <|im_end|>, </s>: the model learns to stop); otherwise (Llama 2 writes " </s>") with the
    // render of messages[:i+1], which must then be a prefix of the whole. Rendering messages[:i+1]
    // alone is not enough: Llama 3's first template appends a generation prompt regardless, and
    // Qwen3 drops the reasoning of turns that later turns follow.
    nlohmann::ordered_json marked = msgs;
    marked[i]["content"] = marked[i]["content"].get<std::string>() + "\x01\x02";
    auto other = chat->Apply(marked, false);
    if (!other.ok()) {
      turn.marked_status = other.status();
      return r;
    }
    const std::string& full_text = r.full;
    size_t end_char = 0;
    while (end_char < full_text.size() && end_char < other->size() &&
           full_text[end_char] == (*other)[end_char]) {
      ++end_char;
    }
    turn.content_end = end_char;
  }
  return r;
}

Result<ExampleTokens> ExampleTokenizer::Tokenize(const Example& ex, std::string_view file,
                                                 int64_t line_no) const {
  return Tokenize(RenderExample(ex, chat_, options_, file, line_no), file, line_no);
}

Result<ExampleTokens> ExampleTokenizer::Tokenize(const RenderedExample& r, std::string_view file,
                                                 int64_t line_no) const {
  STRATA_RETURN_IF_ERROR(r.status);
  std::string where = std::string(file) + ":" + std::to_string(line_no);
  ExampleTokens out;
  if (r.example.kind == Example::Kind::kText) {
    auto ids = tokenizer_->Encode(r.example.text, /*add_special_tokens=*/true);
    if (!ids.ok()) return ids.status().WithContext(where + ": text");
    out.ids = std::move(*ids);
    auto eos = tokenizer_->EosId();
    if (eos && (out.ids.empty() || out.ids.back() != *eos)) out.ids.push_back(*eos);
    out.loss.assign(out.ids.size(), 1);
  } else {
    auto ids = tokenizer_->Encode(r.full, /*add_special_tokens=*/false);
    if (!ids.ok()) return ids.status().WithContext(where + ": rendered conversation");
    out.ids = std::move(*ids);
    out.loss.assign(out.ids.size(), options_.train_on_prompt ? 1 : 0);
    if (!options_.train_on_prompt) {
      STRATA_RETURN_IF_ERROR(MarkAssistantTurns(r, out.ids, out.loss, where));
    }
  }
  if (options_.max_tokens > 0 && static_cast<int64_t>(out.ids.size()) > options_.max_tokens) {
    if (options_.overlong == Overlong::kSkip) {
      out.ids.clear();
      out.loss.clear();
      out.skipped = true;
    } else {
      out.ids.resize(static_cast<size_t>(options_.max_tokens));
      out.loss.resize(static_cast<size_t>(options_.max_tokens));
      out.truncated = true;
    }
  }
  return out;
}

Status ExampleTokenizer::MarkAssistantTurns(const RenderedExample& r,
                                            const std::vector<int32_t>& ids,
                                            std::vector<uint8_t>& loss,
                                            const std::string& where) const {
  const auto& msgs = r.example.messages;
  const std::string& full = r.full;
  for (const RenderedExample::Turn& turn : r.turns) {
    const size_t i = turn.message;
    std::string at = where + ": messages[" + std::to_string(i) + "] (assistant)";
    const char* advice =
        "; train on the whole conversation with --train-on all, or split the conversation";
    STRATA_RETURN_IF_ERROR(turn.before_status);
    const std::string& before = turn.before;
    if (full.compare(0, before.size(), before) != 0) {
      return InvalidArgumentError(at +
                                  ": the chat template renders the turns before this one "
                                  "differently once it follows them, so its start cannot be "
                                  "located exactly" +
                                  advice);
    }
    STRATA_ASSIGN_OR_RETURN(auto ids_before, tokenizer_->Encode(before, false));
    if (!IsPrefix(ids_before, ids)) {
      return InvalidArgumentError(at +
                                  ": a token spans the boundary between this turn and the one "
                                  "before, so the turn's tokens cannot be located exactly" +
                                  advice);
    }
    // Note [Turn end] (RenderExample).
    STRATA_RETURN_IF_ERROR(turn.marked_status);
    const size_t end_char = turn.content_end;
    STRATA_ASSIGN_OR_RETURN(auto ids_content, tokenizer_->Encode(full.substr(0, end_char), false));
    if (end_char < before.size() || !IsPrefix(ids_content, ids)) {
      return InvalidArgumentError(at +
                                  ": the end of this turn's content cannot be located exactly "
                                  "in the rendered conversation" +
                                  advice);
    }
    size_t end_tokens = ids_content.size();
    if (end_tokens < ids.size() && tokenizer_->IsSpecial(ids[end_tokens])) {
      ++end_tokens;
    } else {
      STRATA_CHECK_MSG(chat_ != nullptr, "a conversation rendered without this chat template");
      nlohmann::ordered_json upto(msgs.begin(), msgs.begin() + static_cast<ptrdiff_t>(i) + 1);
      STRATA_ASSIGN_OR_RETURN(std::string through, chat_->Apply(upto, false));
      auto ids_through = tokenizer_->Encode(through, false);
      if (!ids_through.ok()) return ids_through.status().WithContext(at);
      if (full.compare(0, through.size(), through) != 0 || !IsPrefix(*ids_through, ids) ||
          ids_through->size() < end_tokens) {
        return InvalidArgumentError(at +
                                    ": no special token ends this turn and the template renders "
                                    "it differently once later turns follow, so its end cannot "
                                    "be located exactly" +
                                    advice);
      }
      end_tokens = ids_through->size();
    }
    for (size_t t = ids_before.size(); t < end_tokens; ++t) loss[t] = 1;
  }
  return Status::Ok();
}

}  // namespace strata::data
