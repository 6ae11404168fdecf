#include "tools/strata/generate/generate_text.h"

#include <filesystem>
#include <fstream>

#include "tokenizers/text/utf8.h"

namespace strata::cli {

namespace fs = std::filesystem;

Result<GenerateText> GenerateText::Open(const std::vector<std::string>& dirs, int64_t vocab) {
  GenerateText t;
  for (const std::string& d : dirs) {
    if (!fs::exists(fs::path(d) / "tokenizer.json")) continue;
    STRATA_ASSIGN_OR_RETURN(tokenizers::Tokenizer tok, tokenizers::Tokenizer::FromModelDir(d));
    if (tok.VocabSize() > vocab) {
      return InvalidArgumentError(d + "/tokenizer.json has " + std::to_string(tok.VocabSize()) +
                                  " tokens but the model's vocab_size is " + std::to_string(vocab) +
                                  " (not this model's tokenizer)");
    }
    if (std::optional<int32_t> eos = tok.EosId()) t.stop_ids_.push_back(*eos);
    Result<data::ChatTemplate> chat = data::ChatTemplate::FromModelDir(d);
    if (chat.ok()) {
      t.chat_ = std::move(*chat);
    } else if (chat.status().code() == StatusCode::kFailedPrecondition ||
               chat.status().code() == StatusCode::kNotFound) {
      t.chat_error_ = d +
                      " has no chat template (tokenizer_config.json's chat_template): add "
                      "the model's, or give the prompt as --prompt TEXT";
    } else {
      t.chat_error_ = chat.status().message();
    }
    // generation_config.json's eos_token_id: the ids generate() stops on.
    std::ifstream gc(fs::path(d) / "generation_config.json");
    if (gc) {
      nlohmann::json j = nlohmann::json::parse(gc, nullptr, false);
      if (j.is_object() && j.contains("eos_token_id")) {
        const nlohmann::json& e = j["eos_token_id"];
        for (const nlohmann::json& id : e.is_array() ? e : nlohmann::json::array({e})) {
          if (id.is_number_integer()) t.stop_ids_.push_back(id.get<int32_t>());
        }
      }
    }
    t.tokenizer_ = std::move(tok);
    t.source_ = d + "/tokenizer.json";
    return t;
  }
  if (vocab < 256) {
    return InvalidArgumentError("no tokenizer.json in " + (dirs.empty() ? "" : dirs[0]) +
                                " and the model's vocab_size " + std::to_string(vocab) +
                                " is smaller than the byte-level ids (0-255) a prompt is read as");
  }
  t.source_ = "byte-level ids (no tokenizer.json)";
  t.chat_error_ = "the model has no tokenizer.json (byte-level ids have no chat template)";
  return t;
}

Result<std::vector<int32_t>> GenerateText::EncodePrompt(const std::string& text) const {
  if (tokenizer_) return tokenizer_->Encode(text, /*add_special_tokens=*/true);
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
  return ids;
}

Result<std::vector<int32_t>> GenerateText::EncodeChat(const nlohmann::ordered_json& messages,
                                                      std::string* rendered) const {
  if (!chat_) return FailedPreconditionError("--chat: " + chat_error_);
  STRATA_ASSIGN_OR_RETURN(*rendered, chat_->Apply(messages, /*add_generation_prompt=*/true));
  return tokenizer_->Encode(*rendered, /*add_special_tokens=*/false);
}

std::string GenerateText::Decode(std::span<const int32_t> ids) const {
  if (tokenizer_) return tokenizer_->Decode(ids, /*skip_special_tokens=*/false);
  // The byte vocabulary: the bytes as UTF-8, each invalid sequence (a random model samples any
  // byte) one U+FFFD as a tokenizer's byte-level decoder gives, so stdout is always valid text.
  std::string s;
  for (int32_t id : ids) {
    s += id >= 0 && id < 256 ? std::string(1, static_cast<char>(id))
                             : "<" + std::to_string(id) + ">";
  }
  return tokenizers::internal::Utf8Lossy(s);
}

std::string TextStream::Push(int32_t id) {
  ids_.push_back(id);
  const std::string all = text_->Decode(ids_);
  size_t end = all.size();
  static const std::string kReplacement = "\xEF\xBF\xBD";
  // A trailing U+FFFD may be a character whose bytes have not all come: held until the next token.
  if (end >= 3 && all.compare(end - 3, 3, kReplacement) == 0) end -= 3;
  if (end <= printed_) return "";
  std::string out = all.substr(printed_, end - printed_);
  printed_ = end;
  return out;
}

std::string TextStream::Flush() {
  const std::string all = text_->Decode(ids_);
  std::string out = all.size() > printed_ ? all.substr(printed_) : "";
  printed_ = all.size();
  return out;
}

}  // namespace strata::cli
