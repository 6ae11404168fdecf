#include "engine/config/reader/json_document.h"

#include <cctype>
#include <charconv>
#include <cstdint>
#include <utility>

namespace strata {
namespace {

// A recursive-descent parser over the text, tracking line and column. Strict JSON plus what hjson
// files in the wild use: comments and trailing commas.
class Parser {
 public:
  Parser(std::string_view text, std::string_view source, JsonDocument* doc)
      : text_(text), source_(source), doc_(doc) {}

  Status Run() {
    STRATA_RETURN_IF_ERROR(SkipSpace());
    if (AtEnd()) return Fail("the file is empty; a DeepSpeed config is a JSON object");
    doc_->positions[""] = Pos();
    STRATA_RETURN_IF_ERROR(ParseValue("", &doc_->root, 0));
    STRATA_RETURN_IF_ERROR(SkipSpace());
    if (!AtEnd()) return Fail("unexpected text after the end of the JSON value");
    return Status::Ok();
  }

 private:
  static constexpr int kMaxDepth = 256;

  bool AtEnd() const { return i_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[i_]; }
  SourcePos Pos() const { return {line_, static_cast<int>(i_ - line_start_) + 1}; }

  void Advance() {
    if (text_[i_] == '\n') {
      ++line_;
      line_start_ = i_ + 1;
    }
    ++i_;
  }

  Status Fail(std::string what) const { return FailAt(Pos(), line_start_, std::move(what)); }

  Status FailAt(SourcePos pos, size_t line_start, std::string what) const {
    size_t end = text_.find('\n', line_start);
    std::string_view line =
        text_.substr(line_start, (end == std::string_view::npos ? text_.size() : end) - line_start);
    std::string msg = std::string(source_) + ":" + std::to_string(pos.line) + ":" +
                      std::to_string(pos.column) + ": invalid JSON: " + what + "\n    " +
                      std::string(line) + "\n    " +
                      std::string(static_cast<size_t>(std::max(pos.column - 1, 0)), ' ') + "^";
    return InvalidArgumentError(std::move(msg));
  }

  Status SkipSpace() {
    while (!AtEnd()) {
      char c = Peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        Advance();
      } else if (c == '#' || (c == '/' && i_ + 1 < text_.size() && text_[i_ + 1] == '/')) {
        while (!AtEnd() && Peek() != '\n') Advance();
      } else if (c == '/' && i_ + 1 < text_.size() && text_[i_ + 1] == '*') {
        SourcePos start = Pos();
        size_t start_line = line_start_;
        Advance();
        Advance();
        while (!AtEnd() && !(Peek() == '*' && i_ + 1 < text_.size() && text_[i_ + 1] == '/')) {
          Advance();
        }
        if (AtEnd()) return FailAt(start, start_line, "comment '/*' is never closed");
        Advance();
        Advance();
      } else {
        break;
      }
    }
    return Status::Ok();
  }

  Status ParseValue(const std::string& path, Json* out, int depth) {
    if (depth > kMaxDepth) return Fail("nesting deeper than 256 levels");
    switch (Peek()) {
      case '{':
        return ParseObject(path, out, depth);
      case '[':
        return ParseArray(path, out, depth);
      case '"': {
        std::string s;
        STRATA_RETURN_IF_ERROR(ParseString(&s));
        *out = std::move(s);
        return Status::Ok();
      }
      default:
        break;
    }
    if (std::isalpha(static_cast<unsigned char>(Peek()))) {
      size_t start = i_;
      while (!AtEnd() && std::isalnum(static_cast<unsigned char>(Peek()))) Advance();
      std::string_view word = text_.substr(start, i_ - start);
      if (word == "true") {
        *out = true;
      } else if (word == "false") {
        *out = false;
      } else if (word == "null") {
        *out = nullptr;
      } else {
        i_ = start;  // same line: no newline was consumed
        return Fail("unexpected word '" + std::string(word) +
                    "'; strings need double quotes, literals are true, false and null");
      }
      return Status::Ok();
    }
    if (Peek() == '-' || std::isdigit(static_cast<unsigned char>(Peek()))) return ParseNumber(out);
    if (AtEnd()) return Fail("the file ends where a value was expected");
    return Fail(std::string("unexpected character '") + Peek() + "' where a value was expected");
  }

  Status ParseNumber(Json* out) {
    size_t start = i_;
    bool is_float = false;
    if (Peek() == '-') Advance();
    while (!AtEnd()) {
      char c = Peek();
      if (std::isdigit(static_cast<unsigned char>(c))) {
        Advance();
      } else if (c == '.' || c == 'e' || c == 'E' ||
                 ((c == '+' || c == '-') && (text_[i_ - 1] == 'e' || text_[i_ - 1] == 'E'))) {
        is_float = true;
        Advance();
      } else {
        break;
      }
    }
    std::string_view num = text_.substr(start, i_ - start);
    const char* first = num.data();
    const char* last = num.data() + num.size();
    if (!is_float) {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(first, last, v);
      if (ec == std::errc() && p == last) {
        *out = v;
        return Status::Ok();
      }
    }
    double d = 0;
    auto [p, ec] = std::from_chars(first, last, d);
    if (ec != std::errc() || p != last) {
      i_ = start;
      return Fail("malformed number '" + std::string(num) + "'");
    }
    *out = d;
    return Status::Ok();
  }

  Status ParseString(std::string* out) {
    Advance();  // opening quote
    while (true) {
      if (AtEnd() || Peek() == '\n') return Fail("string is not closed on its line");
      char c = Peek();
      if (c == '"') {
        Advance();
        return Status::Ok();
      }
      if (c == '\\') {
        Advance();
        if (AtEnd()) return Fail("string is not closed");
        char e = Peek();
        Advance();
        switch (e) {
          case '"':
            out->push_back('"');
            break;
          case '\\':
            out->push_back('\\');
            break;
          case '/':
            out->push_back('/');
            break;
          case 'b':
            out->push_back('\b');
            break;
          case 'f':
            out->push_back('\f');
            break;
          case 'n':
            out->push_back('\n');
            break;
          case 'r':
            out->push_back('\r');
            break;
          case 't':
            out->push_back('\t');
            break;
          case 'u': {
            if (i_ + 4 > text_.size()) return Fail("short \\u escape");
            unsigned cp = 0;
            auto [p, ec] = std::from_chars(text_.data() + i_, text_.data() + i_ + 4, cp, 16);
            if (ec != std::errc() || p != text_.data() + i_ + 4) return Fail("bad \\u escape");
            for (int k = 0; k < 4; ++k) Advance();
            AppendUtf8(cp, out);
            break;
          }
          default:
            return Fail(std::string("unknown escape '\\") + e + "'");
        }
        continue;
      }
      out->push_back(c);
      Advance();
    }
  }

  static void AppendUtf8(unsigned cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  Status ParseObject(const std::string& path, Json* out, int depth) {
    *out = Json::object();
    std::map<std::string, SourcePos> seen;
    Advance();  // '{'
    while (true) {
      STRATA_RETURN_IF_ERROR(SkipSpace());
      if (Peek() == '}') {  // empty object or trailing comma
        Advance();
        return Status::Ok();
      }
      if (Peek() != '"') {
        if (AtEnd()) return Fail("the file ends inside an object; a '}' is missing");
        return Fail("expected a quoted key or '}'");
      }
      SourcePos key_pos = Pos();
      std::string key;
      STRATA_RETURN_IF_ERROR(ParseString(&key));
      STRATA_RETURN_IF_ERROR(SkipSpace());
      if (Peek() != ':') return Fail("expected ':' after key \"" + key + "\"");
      Advance();
      STRATA_RETURN_IF_ERROR(SkipSpace());
      std::string child = JoinPath(path, key);
      Json value;
      STRATA_RETURN_IF_ERROR(ParseValue(child, &value, depth + 1));
      if (!key.empty() && key[0] == '_') {
        // A comment key: dropped with everything under it.
      } else if (auto it = seen.find(key); it != seen.end()) {
        return FailAt(key_pos, line_start_of(key_pos),
                      "key \"" + child + "\" is given twice (first at line " +
                          std::to_string(it->second.line) + "); DeepSpeed rejects duplicate keys");
      } else {
        seen[key] = key_pos;
        doc_->positions[child] = key_pos;
        (*out)[key] = std::move(value);
      }
      STRATA_RETURN_IF_ERROR(SkipSpace());
      if (Peek() == ',') {
        Advance();
      } else if (Peek() == '}') {
        Advance();
        return Status::Ok();
      } else if (AtEnd()) {
        return Fail("the file ends inside an object; a '}' is missing");
      } else {
        return Fail("expected ',' or '}' after the value of \"" + child + "\"");
      }
    }
  }

  Status ParseArray(const std::string& path, Json* out, int depth) {
    *out = Json::array();
    Advance();  // '['
    size_t index = 0;
    while (true) {
      STRATA_RETURN_IF_ERROR(SkipSpace());
      if (Peek() == ']') {
        Advance();
        return Status::Ok();
      }
      std::string child = path + "[" + std::to_string(index++) + "]";
      doc_->positions[child] = Pos();
      Json value;
      STRATA_RETURN_IF_ERROR(ParseValue(child, &value, depth + 1));
      out->push_back(std::move(value));
      STRATA_RETURN_IF_ERROR(SkipSpace());
      if (Peek() == ',') {
        Advance();
      } else if (Peek() == ']') {
        Advance();
        return Status::Ok();
      } else if (AtEnd()) {
        return Fail("the file ends inside an array; a ']' is missing");
      } else {
        return Fail("expected ',' or ']' in the array \"" + path + "\"");
      }
    }
  }

  // Start offset of the line `pos` is on (for error excerpts of earlier positions).
  size_t line_start_of(SourcePos pos) const {
    size_t start = 0;
    for (int l = 1; l < pos.line; ++l) start = text_.find('\n', start) + 1;
    return start;
  }

  std::string_view text_;
  std::string_view source_;
  JsonDocument* doc_;
  size_t i_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
};

}  // namespace

std::string JoinPath(std::string_view parent, std::string_view key) {
  std::string p(parent);
  if (!p.empty()) p += '.';
  p += key;
  return p;
}

SourcePos JsonDocument::Find(std::string_view path) const {
  std::string p(path);
  while (true) {
    if (auto it = positions.find(p); it != positions.end()) return it->second;
    if (p.empty()) return {};
    size_t cut = p.find_last_of(".[");
    p = cut == std::string::npos ? std::string() : p.substr(0, cut);
  }
}

Result<JsonDocument> ParseJsonDocument(std::string_view text, std::string_view source_name) {
  JsonDocument doc;
  Parser parser(text, source_name, &doc);
  STRATA_RETURN_IF_ERROR(parser.Run());
  return doc;
}

}  // namespace strata
