#include "tokenizers/tokenizer.h"

#include <filesystem>
#include <utility>

#include "tokenizers/text/utf8.h"
#include "tokenizers/tokenizer_impl.h"
#include "tokenizers/tokenizer_json.h"

namespace strata::tokenizers {

using internal::Json;
using internal::TokenizerImpl;

namespace {

Result<Json> ReadJson(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const std::string bytes, internal::ReadFileBytes(path));
  Json j = Json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(path + ": not valid JSON");
  if (!j.is_object()) return InvalidArgumentError(path + ": expected a JSON object");
  return j;
}

Result<std::unique_ptr<TokenizerImpl>> Build(internal::TokenizerJson& file) {
  const Json& j = file.root;
  auto impl = std::make_unique<TokenizerImpl>();
  static const Json kNull;
  auto node = [&](const char* key) -> const Json& { return j.contains(key) ? j[key] : kNull; };
  if (!j.contains("model")) return InvalidArgumentError("model: missing");
  STRATA_ASSIGN_OR_RETURN(impl->model, internal::BpeModel::FromJson(
                                           j["model"], "model", file.bpe ? &*file.bpe : nullptr));
  STRATA_ASSIGN_OR_RETURN(
      impl->added, internal::AddedVocabulary::FromJson(node("added_tokens"), "added_tokens"));
  STRATA_ASSIGN_OR_RETURN(impl->normalizer,
                          internal::MakeNormalizer(node("normalizer"), "normalizer"));
  STRATA_ASSIGN_OR_RETURN(impl->pre_tokenizer,
                          internal::MakePreTokenizer(node("pre_tokenizer"), "pre_tokenizer"));
  STRATA_ASSIGN_OR_RETURN(impl->post,
                          internal::MakePostProcessor(node("post_processor"), "post_processor"));
  STRATA_ASSIGN_OR_RETURN(impl->decoder, internal::MakeDecoder(node("decoder"), "decoder"));
  if (impl->post.prefix.size() == 1) impl->bos = impl->post.prefix[0];
  if (impl->post.suffix.size() == 1) impl->eos = impl->post.suffix[0];
  return impl;
}

// tokenizer_config.json writes a special token as "<s>" or {"content": "<s>", ...}.
Result<std::optional<int32_t>> ConfigToken(const Json& config, const char* key,
                                           const TokenizerImpl& impl, const std::string& path) {
  if (!config.contains(key) || config[key].is_null()) return std::optional<int32_t>();
  const Json& v = config[key];
  std::string content;
  if (v.is_string()) {
    content = v.get<std::string>();
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    content = v["content"].get<std::string>();
  } else {
    return InvalidArgumentError(path + ": " + key + ": expected a token string, got " + v.dump());
  }
  std::optional<int32_t> id = impl.added.TokenToId(content);
  if (!id) id = impl.model.TokenToId(content);
  if (!id) {
    return InvalidArgumentError(path + ": " + key + ": '" + content +
                                "' is not a token of tokenizer.json");
  }
  return id;
}

Status ApplyConfig(const Json& config, const std::string& path, TokenizerImpl* impl) {
  STRATA_ASSIGN_OR_RETURN(auto bos, ConfigToken(config, "bos_token", *impl, path));
  STRATA_ASSIGN_OR_RETURN(auto eos, ConfigToken(config, "eos_token", *impl, path));
  STRATA_ASSIGN_OR_RETURN(auto pad, ConfigToken(config, "pad_token", *impl, path));
  if (bos) impl->bos = bos;
  if (eos) impl->eos = eos;
  if (pad) impl->pad = pad;
  // add_bos_token / add_eos_token, when written, decide what Encode adds (transformers rebuilds
  // the Llama post-processor from them the same way).
  auto flag = [&](const char* key, std::optional<int32_t> id, std::vector<int32_t>* ids) -> Status {
    if (!config.contains(key) || config[key].is_null()) return Status::Ok();
    if (!config[key].is_boolean()) {
      return InvalidArgumentError(path + ": " + key + ": expected true or false");
    }
    if (!config[key].get<bool>()) {
      ids->clear();
      return Status::Ok();
    }
    if (!id) {
      return InvalidArgumentError(path + ": " + key + " is true but no token is named for it");
    }
    ids->assign(1, *id);
    return Status::Ok();
  };
  STRATA_RETURN_IF_ERROR(flag("add_bos_token", impl->bos, &impl->post.prefix));
  STRATA_RETURN_IF_ERROR(flag("add_eos_token", impl->eos, &impl->post.suffix));
  return Status::Ok();
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}

Result<Tokenizer> Tokenizer::FromFile(const std::string& tokenizer_json_path) {
  STRATA_ASSIGN_OR_RETURN(internal::TokenizerJson j,
                          internal::ReadTokenizerJson(tokenizer_json_path));
  auto impl = Build(j);
  if (!impl.ok()) return impl.status().WithContext(tokenizer_json_path);
  return Tokenizer(std::shared_ptr<const TokenizerImpl>(std::move(*impl)));
}

Result<Tokenizer> Tokenizer::FromModelDir(const std::string& dir) {
  const std::string json_path = (std::filesystem::path(dir) / "tokenizer.json").string();
  if (!std::filesystem::exists(json_path)) {
    return NotFoundError(dir +
                         ": no tokenizer.json (Strata reads the Hugging Face fast-tokenizer "
                         "file; save it with tokenizer.save_pretrained(dir))");
  }
  STRATA_ASSIGN_OR_RETURN(internal::TokenizerJson j, internal::ReadTokenizerJson(json_path));
  auto impl = Build(j);
  if (!impl.ok()) return impl.status().WithContext(json_path);
  const std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  if (std::filesystem::exists(config_path)) {
    STRATA_ASSIGN_OR_RETURN(const Json config, ReadJson(config_path));
    STRATA_RETURN_IF_ERROR(ApplyConfig(config, config_path, impl->get()));
  }
  return Tokenizer(std::shared_ptr<const TokenizerImpl>(std::move(*impl)));
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                               bool add_special_tokens) const {
  if (const size_t bad = internal::FindInvalidUtf8(text); bad != std::string_view::npos) {
    return InvalidArgumentError("tokenizer: the text is not valid UTF-8 at byte " +
                                std::to_string(bad));
  }
  const TokenizerImpl& t = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = t.post.prefix;
  std::vector<std::string> pieces;
  for (const auto& seg : t.added.Split(text, /*normalized=*/false)) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    if (seg.end == seg.begin) continue;
    std::string s(text.substr(seg.begin, seg.end - seg.begin));
    if (t.normalizer) STRATA_RETURN_IF_ERROR(t.normalizer->Normalize(&s));
    const auto subs = t.added.HasNormalized()
                          ? t.added.Split(s, /*normalized=*/true)
                          : std::vector<internal::AddedVocabulary::Segment>{{0, s.size(), -1}};
    for (const auto& sub : subs) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
        continue;
      }
      if (sub.end == sub.begin) continue;
      pieces.assign(1, s.substr(sub.begin, sub.end - sub.begin));
      if (t.pre_tokenizer) {
        STRATA_RETURN_IF_ERROR(
            t.pre_tokenizer->PreTokenize(&pieces, seg.begin == 0 && sub.begin == 0));
      }
      for (const std::string& p : pieces) {
        if (!p.empty()) STRATA_RETURN_IF_ERROR(t.model.Tokenize(p, &ids));
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), t.post.suffix.begin(), t.post.suffix.end());
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const internal::AddedToken* a = t.added.Find(id)) {
      if (!(skip_special_tokens && a->special)) tokens.push_back(a->content);
    } else if (const std::string* s = t.model.IdToToken(id)) {
      tokens.push_back(*s);
    }
  }
  // Without a decoder Hugging Face joins the token strings with spaces.
  if (t.decoder) t.decoder->DecodeChain(&tokens);
  const char* sep = t.decoder ? "" : " ";
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) out += (i == 0 ? "" : sep) + tokens[i];
  return out;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto id = impl_->added.TokenToId(token)) return id;
  return impl_->model.TokenToId(token);
}

std::string Tokenizer::IdToToken(int32_t id) const {
  if (const internal::AddedToken* a = impl_->added.Find(id)) return a->content;
  const std::string* s = impl_->model.IdToToken(id);
  return s != nullptr ? *s : std::string();
}

int64_t Tokenizer::VocabSize() const {
  return std::max<int64_t>(impl_->model.size(), int64_t{impl_->added.max_id()} + 1);
}

std::optional<int32_t> Tokenizer::BosId() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::EosId() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::PadId() const { return impl_->pad; }
bool Tokenizer::IsSpecial(int32_t id) const { return impl_->added.IsSpecial(id); }
bool Tokenizer::AddsBos() const { return !impl_->post.prefix.empty(); }
bool Tokenizer::AddsEos() const { return !impl_->post.suffix.empty(); }

}  // namespace strata::tokenizers
