#include "tokenizers/pipeline/normalizer.h"

#include <utility>
#include <vector>

#include "tokenizers/text/utf8.h"

namespace strata::tokenizers::internal {
namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  Status Normalize(std::string* s) const override {
    // ASCII is in every normal form already: skip the copy for the common case.
    bool ascii = true;
    for (char c : *s) ascii &= static_cast<unsigned char>(c) < 0x80;
    if (ascii) return Status::Ok();
    STRATA_ASSIGN_OR_RETURN(*s, internal::Normalize(*s, form_));
    return Status::Ok();
  }

 private:
  NormalForm form_;
};

// Prepends a string to non-empty text (Llama 2's "▁").
class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  Status Normalize(std::string* s) const override {
    if (!s->empty()) s->insert(0, prefix_);
    return Status::Ok();
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status Normalize(std::string* s) const override {
    STRATA_ASSIGN_OR_RETURN(*s, pattern_.ReplaceAll(*s, content_));
    return Status::Ok();
  }

 private:
  Regex pattern_;
  std::string content_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  Status Normalize(std::string* s) const override {
    for (const auto& p : parts_) STRATA_RETURN_IF_ERROR(p->Normalize(s));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

Result<std::unique_ptr<Normalizer>> MakeNormalizer(const Json& node, std::string_view path) {
  if (node.is_null()) return std::unique_ptr<Normalizer>();
  STRATA_ASSIGN_OR_RETURN(
      const std::string type,
      GetType(node, path, {"NFC", "NFD", "NFKC", "NFKD", "Prepend", "Replace", "Sequence"}));
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkd));
  if (type == "Prepend") {
    STRATA_ASSIGN_OR_RETURN(std::string prefix, GetString(node, path, "prepend"));
    return std::unique_ptr<Normalizer>(new Prepend(std::move(prefix)));
  }
  if (type == "Replace") {
    STRATA_ASSIGN_OR_RETURN(Regex pattern, GetPattern(node, path, "pattern"));
    STRATA_ASSIGN_OR_RETURN(std::string content, GetString(node, path, "content"));
    return std::unique_ptr<Normalizer>(new Replace(std::move(pattern), std::move(content)));
  }
  STRATA_ASSIGN_OR_RETURN(const Json* list, GetArray(node, path, "normalizers"));
  std::vector<std::unique_ptr<Normalizer>> parts;
  const std::string list_path = JoinPath(path, "normalizers");
  for (size_t i = 0; i < list->size(); ++i) {
    STRATA_ASSIGN_OR_RETURN(auto part, MakeNormalizer((*list)[i], IndexPath(list_path, i)));
    if (part) parts.push_back(std::move(part));
  }
  return std::unique_ptr<Normalizer>(new Sequence(std::move(parts)));
}

}  // namespace strata::tokenizers::internal
