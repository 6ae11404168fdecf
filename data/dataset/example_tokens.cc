#include "data/dataset/example_tokens.h"

#include <algorithm>

namespace strata::data {
namespace {

bool IsPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

Result<ExampleTokens> ExampleTokenizer::Tokenize(const Example& ex, std::string_view file,
                                                 int64_t line_no) const {
  std::string where = std::string(file) + ":" + std::to_string(line_no);
  ExampleTokens out;
  if (ex.kind == Example::Kind::kText) {
    auto ids = tokenizer_->Encode(ex.text, /*add_special_tokens=*/true);
    if (!ids.ok()) return ids.status().WithContext(where + ": text");
    out.ids = std::move(*ids);
    auto eos = tokenizer_->EosId();
    if (eos && (out.ids.empty() || out.ids.back() != *eos)) out.ids.push_back(*eos);
    out.loss.assign(out.ids.size(), 1);
  } else {
    if (chat_ == nullptr) {
      return FailedPreconditionError(where +
                                     ": a conversation, but the model directory's "
                                     "tokenizer_config.json has no chat_template to render it");
    }
    auto full = chat_->Apply(ex.messages, /*add_generation_prompt=*/false);
    if (!full.ok()) return full.status().WithContext(where + ": messages");
    auto ids = tokenizer_->Encode(*full, /*add_special_tokens=*/false);
    if (!ids.ok()) return ids.status().WithContext(where + ": rendered conversation");
    out.ids = std::move(*ids);
    out.loss.assign(out.ids.size(), options_.train_on_prompt ? 1 : 0);
    if (!options_.train_on_prompt) {
      STRATA_RETURN_IF_ERROR(MarkAssistantTurns(ex, *full, out.ids, out.loss, where));
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

Status ExampleTokenizer::MarkAssistantTurns(const Example& ex, const std::string& full,
                                            const std::vector<int32_t>& ids,
                                            std::vector<uint8_t>& loss,
                                            const std::string& where) const {
  const auto& msgs = ex.messages;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i]["role"] != "assistant") continue;
    std::string at = where + ": messages[" + std::to_string(i) + "] (assistant)";
    const char* advice =
        "; train on the whole conversation with --train-on all, or split the conversation";
    std::string before;
    if (i > 0) {
      nlohmann::ordered_json head(msgs.begin(), msgs.begin() + static_cast<ptrdiff_t>(i));
      STRATA_ASSIGN_OR_RETURN(before, chat_->Apply(head, /*add_generation_prompt=*/true));
    }
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
    // Note [Turn end]: the end of the turn's content is found by rendering the conversation
    // again with a marker after this turn's content: the two renders agree up to there. The
    // turn ends with the token after the content when that is a special token (<|eot_id|>,
    // <|im_end|>, </s>: the model learns to stop); otherwise (Llama 2 writes " </s>") with the
    // render of messages[:i+1], which must then be a prefix of the whole. Rendering messages[:i+1]
    // alone is not enough: Llama 3's first template appends a generation prompt regardless, and
    // Qwen3 drops the reasoning of turns that later turns follow.
    nlohmann::ordered_json marked = msgs;
    marked[i]["content"] = marked[i]["content"].get<std::string>() + "\x01\x02";
    STRATA_ASSIGN_OR_RETURN(std::string other, chat_->Apply(marked, false));
    size_t end_char = 0;
    while (end_char < full.size() && end_char < other.size() && full[end_char] == other[end_char]) {
      ++end_char;
    }
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
