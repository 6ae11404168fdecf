#include "tokenizers/pipeline/pre_tokenizer.h"

#include <utility>

#include "tokenizers/text/utf8.h"

namespace strata::tokenizers::internal {
namespace {

// GPT-2's pattern, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Cuts `s` at the matches of `re` as Hugging Face's SplitDelimiterBehavior says.
Status SplitPiece(const Regex& re, Behavior behavior, bool invert, const std::string& s,
                  std::vector<std::string>* out) {
  STRATA_ASSIGN_OR_RETURN(const auto matches, re.FindAll(s));
  // The piece as alternating spans, each flagged as a delimiter (a match, or a gap if inverted).
  struct Span {
    size_t b, e;
    bool delim;
  };
  std::vector<Span> spans;
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    if (b > last) spans.push_back({last, b, invert});
    spans.push_back({b, e, !invert});
    last = e;
  }
  if (last < s.size()) spans.push_back({last, s.size(), invert});
  std::string pending;  // MergedWithNext: delimiters waiting for the next piece
  bool have_prev = false;
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& sp = spans[i];
    std::string_view text(s.data() + sp.b, sp.e - sp.b);
    switch (behavior) {
      case Behavior::kIsolated:
        out->emplace_back(text);
        break;
      case Behavior::kRemoved:
        if (!sp.delim) out->emplace_back(text);
        break;
      case Behavior::kMergedWithPrevious:
        if (sp.delim && have_prev) {
          out->back().append(text);
        } else {
          out->emplace_back(text);
        }
        break;
      case Behavior::kMergedWithNext:
        if (sp.delim) {
          if (i + 1 < spans.size() && !spans[i + 1].delim) {
            pending.append(text);
          } else {
            out->emplace_back(pending + std::string(text));
            pending.clear();
          }
        } else {
          out->emplace_back(pending + std::string(text));
          pending.clear();
        }
        break;
      case Behavior::kContiguous:
        if (sp.delim && have_prev && spans[i - 1].delim) {
          out->back().append(text);
        } else {
          out->emplace_back(text);
        }
        break;
    }
    have_prev = !out->empty();
  }
  return Status::Ok();
}

class Split final : public PreTokenizer {
 public:
  Split(Regex re, Behavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  Status PreTokenize(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size() * 4);
    for (const std::string& p : *pieces) {
      STRATA_RETURN_IF_ERROR(SplitPiece(re_, behavior_, invert_, p, &out));
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  Regex re_;
  Behavior behavior_;
  bool invert_;
};

// Bytes -> GPT-2's printable characters, after an optional GPT-2 split and prefix space.
class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::optional<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  Status PreTokenize(std::vector<std::string>* pieces, bool) const override {
    if (add_prefix_space_) {
      for (std::string& p : *pieces) {
        if (p.empty() || p[0] != ' ') p.insert(p.begin(), ' ');
      }
    }
    if (re_) {
      std::vector<std::string> out;
      for (const std::string& p : *pieces) {
        STRATA_RETURN_IF_ERROR(SplitPiece(*re_, Behavior::kIsolated, false, p, &out));
      }
      *pieces = std::move(out);
    }
    const auto& table = ByteToChar();
    for (std::string& p : *pieces) {
      std::string mapped;
      mapped.reserve(p.size() * 2);
      for (unsigned char c : p) mapped += table[c];
      p = std::move(mapped);
    }
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> re_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

// Spaces -> the replacement character ("▁"), prepended as the scheme says, optionally split
// before each replacement.
class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split, Regex split_re)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_(split),
        split_re_(std::move(split_re)) {}
  Status PreTokenize(std::vector<std::string>* pieces, bool at_start) const override {
    for (size_t i = 0; i < pieces->size(); ++i) {
      std::string& p = (*pieces)[i];
      std::string r;
      r.reserve(p.size() + replacement_.size());
      for (char c : p) {
        if (c == ' ') {
          r += replacement_;
        } else {
          r.push_back(c);
        }
      }
      const bool starts = r.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways ||
                      (scheme_ == PrependScheme::kFirst && at_start && i == 0))) {
        r.insert(0, replacement_);
      }
      p = std::move(r);
    }
    if (!split_) return Status::Ok();
    std::vector<std::string> out;
    for (const std::string& p : *pieces) {
      STRATA_RETURN_IF_ERROR(SplitPiece(split_re_, Behavior::kMergedWithNext, false, p, &out));
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Regex split_re_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  Status PreTokenize(std::vector<std::string>* pieces, bool at_start) const override {
    for (const auto& p : parts_) STRATA_RETURN_IF_ERROR(p->PreTokenize(pieces, at_start));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Result<Behavior> GetBehavior(const Json& node, std::string_view path) {
  STRATA_ASSIGN_OR_RETURN(const std::string b, GetString(node, path, "behavior"));
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return Unsupported(JoinPath(path, "behavior"), "'" + b + "'",
                     "supported: Isolated, Removed, MergedWithPrevious, MergedWithNext, "
                     "Contiguous");
}

Result<std::unique_ptr<PreTokenizer>> MakeMetaspace(const Json& node, std::string_view path) {
  STRATA_ASSIGN_OR_RETURN(std::string rep, GetChar(node, path, "replacement", "\xE2\x96\x81"));
  // Older files say add_prefix_space (true = "always"); newer ones prepend_scheme.
  STRATA_ASSIGN_OR_RETURN(const bool add_prefix, GetBool(node, path, "add_prefix_space", true));
  STRATA_ASSIGN_OR_RETURN(const std::string scheme_name,
                          GetString(node, path, "prepend_scheme", add_prefix ? "always" : "never"));
  PrependScheme scheme;
  if (scheme_name == "always") {
    scheme = PrependScheme::kAlways;
  } else if (scheme_name == "first") {
    scheme = PrependScheme::kFirst;
  } else if (scheme_name == "never") {
    scheme = PrependScheme::kNever;
  } else {
    return Unsupported(JoinPath(path, "prepend_scheme"), "'" + scheme_name + "'",
                       "supported: always, first, never");
  }
  STRATA_ASSIGN_OR_RETURN(const bool split, GetBool(node, path, "split", true));
  STRATA_ASSIGN_OR_RETURN(Regex split_re, Regex::Compile(rep, /*literal=*/true));
  return std::unique_ptr<PreTokenizer>(
      new Metaspace(std::move(rep), scheme, split, std::move(split_re)));
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const Json& node, std::string_view path) {
  if (node.is_null()) return std::unique_ptr<PreTokenizer>();
  STRATA_ASSIGN_OR_RETURN(const std::string type,
                          GetType(node, path, {"Split", "ByteLevel", "Metaspace", "Sequence"}));
  if (type == "Split") {
    STRATA_ASSIGN_OR_RETURN(Regex re, GetPattern(node, path, "pattern"));
    STRATA_ASSIGN_OR_RETURN(const Behavior behavior, GetBehavior(node, path));
    STRATA_ASSIGN_OR_RETURN(const bool invert, GetBool(node, path, "invert", false));
    return std::unique_ptr<PreTokenizer>(new Split(std::move(re), behavior, invert));
  }
  if (type == "ByteLevel") {
    STRATA_ASSIGN_OR_RETURN(const bool prefix, GetBool(node, path, "add_prefix_space", true));
    STRATA_ASSIGN_OR_RETURN(const bool use_regex, GetBool(node, path, "use_regex", true));
    std::optional<Regex> re;
    if (use_regex) {
      STRATA_ASSIGN_OR_RETURN(re, Regex::Compile(kGpt2Pattern, /*literal=*/false));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevel(prefix, std::move(re)));
  }
  if (type == "Metaspace") return MakeMetaspace(node, path);
  STRATA_ASSIGN_OR_RETURN(const Json* list, GetArray(node, path, "pretokenizers"));
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  const std::string list_path = JoinPath(path, "pretokenizers");
  for (size_t i = 0; i < list->size(); ++i) {
    STRATA_ASSIGN_OR_RETURN(auto part, MakePreTokenizer((*list)[i], IndexPath(list_path, i)));
    if (part) parts.push_back(std::move(part));
  }
  return std::unique_ptr<PreTokenizer>(new Sequence(std::move(parts)));
}

}  // namespace strata::tokenizers::internal
