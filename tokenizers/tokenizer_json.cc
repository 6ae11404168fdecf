#include "tokenizers/tokenizer_json.h"

#include <cerrno>
#include <cstdio>
#include <vector>

namespace strata::tokenizers::internal {
namespace {

// Builds the tree like nlohmann's own DOM parser, except inside root.model.vocab (an object of
// token: id) and root.model.merges (an array of "a b" or [a, b]), which go to `tables`, leaving
// an empty placeholder in the tree. Returns false (stopping the parse) on a syntax error, on any
// other shape inside those two, or when either comes twice.
class Handler final : public nlohmann::json_sax<Json> {
 public:
  explicit Handler(Json* root, BpeTables* tables) : root_(root), tables_(tables) {}

  bool streamed_vocab = false, streamed_merges = false;

  bool null() override { return Value(nullptr); }
  bool boolean(bool v) override { return Value(v); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == kVocab) return VocabId(v >= 0 && v <= INT32_MAX, v);
    return Value(v);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == kVocab) return VocabId(v <= INT32_MAX, static_cast<int64_t>(v));
    return Value(v);
  }
  bool number_float(number_float_t v, const string_t&) override { return Value(v); }
  bool string(string_t& s) override {
    if (mode_ == kMerges) {
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) return Fallback();
      const std::string_view v(s);
      tables_->merges.emplace_back(tables_->Add(v.substr(0, sp)), tables_->Add(v.substr(sp + 1)));
      return true;
    }
    if (mode_ == kMergePair) {
      if (pair_.size() == 2) return Fallback();
      pair_.push_back(std::move(s));
      return true;
    }
    return Value(std::move(s));
  }
  bool binary(binary_t& b) override { return Value(std::move(b)); }

  bool start_object(std::size_t) override {
    if (mode_ != kTree) return Fallback();
    if (stack_.size() == 2 && stack_.back() == model_ && key_ == "vocab") {
      if (streamed_vocab) return Fallback();
      Value(Json::object());  // the placeholder
      mode_ = kVocab;
      streamed_vocab = true;
      return true;
    }
    Json* v = Value(Json::object()) ? last_ : nullptr;
    if (stack_.size() == 1 && key_ == "model") model_ = v;
    stack_.push_back(v);
    return true;
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == kVocab) {
      mode_ = kTree;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == kMerges) {
      mode_ = kMergePair;
      pair_.clear();
      return true;
    }
    if (mode_ != kTree) return Fallback();
    if (stack_.size() == 2 && stack_.back() == model_ && key_ == "merges") {
      if (streamed_merges) return Fallback();
      Value(Json::array());  // the placeholder
      mode_ = kMerges;
      streamed_merges = true;
      return true;
    }
    Value(Json::array());
    stack_.push_back(last_);
    return true;
  }
  bool end_array() override {
    if (mode_ == kMergePair) {
      if (pair_.size() != 2) return Fallback();
      tables_->merges.emplace_back(tables_->Add(pair_[0]), tables_->Add(pair_[1]));
      mode_ = kMerges;
      return true;
    }
    if (mode_ == kMerges) {
      mode_ = kTree;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  enum Mode { kTree, kVocab, kMerges, kMergePair };

  bool Fallback() { return false; }
  bool VocabId(bool in_range, int64_t id) {
    if (!in_range) return Fallback();
    tables_->vocab.emplace_back(tables_->Add(key_), static_cast<int32_t>(id));
    return true;
  }
  // Adds a value where the tree is (last_ points at it).
  template <typename V>
  bool Value(V&& v) {
    if (mode_ != kTree) return Fallback();
    if (stack_.empty()) {
      *root_ = Json(std::forward<V>(v));
      last_ = root_;
    } else if (stack_.back()->is_array()) {
      stack_.back()->emplace_back(std::forward<V>(v));
      last_ = &stack_.back()->back();
    } else {
      Json& slot = (*stack_.back())[key_];
      slot = Json(std::forward<V>(v));
      last_ = &slot;
    }
    return true;
  }

  Json* root_;
  BpeTables* tables_;
  std::vector<Json*> stack_;
  std::string key_;
  Json* model_ = nullptr;
  Json* last_ = nullptr;
  Mode mode_ = kTree;
  std::vector<std::string> pair_;
};

}  // namespace

Result<std::string> ReadFileBytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoToStatus(errno, "open " + path);
  std::string bytes;
  if (std::fseek(f, 0, SEEK_END) == 0) {
    const long size = std::ftell(f);
    if (size > 0) bytes.reserve(static_cast<size_t>(size));
    std::rewind(f);
  }
  char buf[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, got);
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err != 0) return ErrnoToStatus(err, "read " + path);
  return bytes;
}

Result<TokenizerJson> ReadTokenizerJson(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const std::string bytes, ReadFileBytes(path));
  TokenizerJson out;
  BpeTables tables;
  Handler handler(&out.root, &tables);
  tables.arena.reserve(bytes.size() / 2);  // the tokens are most of the file
  const bool ok = Json::sax_parse(bytes, &handler, nlohmann::detail::input_format_t::json,
                                  /*strict=*/true, /*ignore_comments=*/false);
  // Only a model whose vocab and merges were both streamed takes the tables; one with neither is
  // the tree as it is.
  if (ok && out.root.is_object() && handler.streamed_vocab == handler.streamed_merges) {
    if (!handler.streamed_vocab) return out;
    const Json& model = out.root["model"];
    const bool placeholders = model.is_object() && model.contains("vocab") &&
                              model["vocab"].is_object() && model["vocab"].empty() &&
                              model.contains("merges") && model["merges"].is_array() &&
                              model["merges"].empty();
    if (placeholders) {
      out.bpe = std::move(tables);
      return out;
    }
  }
  // A syntax error, another shape, or a partly streamed model: the plain tree says what is wrong.
  out.bpe.reset();
  out.root = Json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (out.root.is_discarded()) return InvalidArgumentError(path + ": not valid JSON");
  if (!out.root.is_object()) return InvalidArgumentError(path + ": expected a JSON object");
  return out;
}

}  // namespace strata::tokenizers::internal
