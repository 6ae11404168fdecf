#include "tokenizers/pipeline/decoder.h"

#include <utility>

#include "tokenizers/text/utf8.h"

namespace strata::tokenizers::internal {
namespace {

// GPT-2 characters -> bytes, the whole sequence at once (a character may span tokens).
class ByteLevel final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& t : *tokens) {
      for (size_t i = 0; i < t.size();) {
        int len = 0;
        const uint32_t cp = DecodeUtf8(t, i, &len);
        const int b = CharToByte(cp);
        if (b >= 0) {
          bytes.push_back(static_cast<char>(b));
        } else {
          bytes.append(t, i, static_cast<size_t>(len));
        }
        i += static_cast<size_t>(len);
      }
    }
    tokens->assign(1, Utf8Lossy(bytes));
  }
};

// "<0xNN>" tokens -> their bytes; a run of them that is not valid UTF-8 becomes one U+FFFD per
// byte, as Hugging Face does.
class ByteFallback final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_len = 0;
    auto flush = [&] {
      if (run_len == 0) return;
      if (FindInvalidUtf8(run) == std::string::npos) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_len; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_len = 0;
    };
    for (std::string& t : *tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        byte = HexByte(t[3], t[4]);
      }
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_len;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  }

 private:
  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int HexByte(char hi, char lo) {
    const int h = Hex(hi), l = Hex(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class Fuse final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class Strip final : public Decoder {
 public:
  Strip(std::string content, int64_t start, int64_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    const size_t n = content_.size();
    for (std::string& t : *tokens) {
      size_t b = 0, e = t.size();
      for (int64_t k = 0; k < start_ && e - b >= n && t.compare(b, n, content_) == 0; ++k) b += n;
      for (int64_t k = 0; k < stop_ && e - b >= n && t.compare(e - n, n, content_) == 0; ++k) {
        e -= n;
      }
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class Replace final : public Decoder {
 public:
  Replace(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      auto r = pattern_.ReplaceAll(t, content_);
      if (r.ok()) t = std::move(*r);  // a literal or short pattern never exhausts PCRE2's limits
    }
  }

 private:
  Regex pattern_;
  std::string content_;
};

// The replacement character back to spaces; the first token loses the space the pre-tokenizer
// prepended (unless prepend_scheme is "never").
class Metaspace final : public Decoder {
 public:
  Metaspace(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      std::string r;
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, replacement_.size(), replacement_) == 0) {
          r.push_back(' ');
          k += replacement_.size();
        } else {
          r.push_back(t[k++]);
        }
      }
      if (i == 0 && strip_first_ && !r.empty() && r[0] == ' ') r.erase(0, 1);
      t = std::move(r);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& p : parts_) p->DecodeChain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

Result<std::unique_ptr<Decoder>> MakeDecoder(const Json& node, std::string_view path) {
  if (node.is_null()) return std::unique_ptr<Decoder>();
  STRATA_ASSIGN_OR_RETURN(
      const std::string type,
      GetType(node, path,
              {"ByteLevel", "Metaspace", "ByteFallback", "Fuse", "Strip", "Replace", "Sequence"}));
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevel());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallback());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new Fuse());
  if (type == "Strip") {
    STRATA_ASSIGN_OR_RETURN(std::string content, GetChar(node, path, "content"));
    STRATA_ASSIGN_OR_RETURN(const int64_t start, GetInt(node, path, "start"));
    STRATA_ASSIGN_OR_RETURN(const int64_t stop, GetInt(node, path, "stop"));
    return std::unique_ptr<Decoder>(new Strip(std::move(content), start, stop));
  }
  if (type == "Replace") {
    STRATA_ASSIGN_OR_RETURN(Regex pattern, GetPattern(node, path, "pattern"));
    STRATA_ASSIGN_OR_RETURN(std::string content, GetString(node, path, "content"));
    return std::unique_ptr<Decoder>(new Replace(std::move(pattern), std::move(content)));
  }
  if (type == "Metaspace") {
    STRATA_ASSIGN_OR_RETURN(std::string rep, GetChar(node, path, "replacement", "\xE2\x96\x81"));
    STRATA_ASSIGN_OR_RETURN(const bool add_prefix, GetBool(node, path, "add_prefix_space", true));
    STRATA_ASSIGN_OR_RETURN(const std::string scheme, GetString(node, path, "prepend_scheme",
                                                                add_prefix ? "always" : "never"));
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return Unsupported(JoinPath(path, "prepend_scheme"), "'" + scheme + "'",
                         "supported: always, first, never");
    }
    return std::unique_ptr<Decoder>(new Metaspace(std::move(rep), scheme != "never"));
  }
  STRATA_ASSIGN_OR_RETURN(const Json* list, GetArray(node, path, "decoders"));
  std::vector<std::unique_ptr<Decoder>> parts;
  const std::string list_path = JoinPath(path, "decoders");
  for (size_t i = 0; i < list->size(); ++i) {
    STRATA_ASSIGN_OR_RETURN(auto part, MakeDecoder((*list)[i], IndexPath(list_path, i)));
    if (part) parts.push_back(std::move(part));
  }
  return std::unique_ptr<Decoder>(new Sequence(std::move(parts)));
}

}  // namespace strata::tokenizers::internal
