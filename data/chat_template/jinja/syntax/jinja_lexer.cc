#include "data/chat_template/jinja/syntax/jinja_lexer.h"

#include <cctype>
#include <cstdlib>

namespace strata::data::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

Status Error(int line, const std::string& what) {
  return InvalidArgumentError("chat template line " + std::to_string(line) + ": " + what);
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  Result<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = pos;
      while (start < src_.size()) {
        start = src_.find('{', start);
        if (start == std::string::npos || start + 1 >= src_.size()) {
          start = std::string::npos;
          break;
        }
        char c = src_[start + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++start;
      }
      if (start == std::string::npos) {
        Emit(Token::Kind::kText, src_.substr(pos), pos);
        break;
      }
      std::string text = src_.substr(pos, start - pos);
      char tag = src_[start + 1];
      char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && IsSpace(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && tag != '{') {
        // lstrip_blocks: spaces and tabs between a line's start and a block or comment tag.
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k) blank = blank && IsSpace(text[k]);
          if (blank) text.resize(l_pos);
        }
      }
      if (!text.empty()) Emit(Token::Kind::kText, text, pos);
      size_t p = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      int line = LineAt(start);
      if (tag == '#') {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) return Error(line, "the comment '{#' is never closed");
        bool strip = end > p && src_[end - 1] == '-';
        pos = AfterTagEnd(end + 2, strip);
        line_starting = pos > 0 && src_[pos - 1] == '\n';
        continue;
      }
      bool block = tag == '%';
      Emit(block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, "", start);
      const char* close = block ? "%}" : "}}";
      for (;;) {
        while (p < src_.size() && IsSpace(src_[p])) ++p;
        if (p >= src_.size()) {
          return Error(line, std::string("the tag is never closed with '") + close + "'");
        }
        bool strip = src_.compare(p, 3, std::string("-") + close) == 0;
        if (strip || src_.compare(p, 2, close) == 0) {
          Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "", p);
          pos = AfterTagEnd(p + (strip ? 3 : 2), strip, block);
          line_starting = pos > 0 && src_[pos - 1] == '\n';
          break;
        }
        STRATA_ASSIGN_OR_RETURN(p, ExprToken(p));
      }
    }
    Emit(Token::Kind::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t pos) {
    while (line_pos_ < pos && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }

  void Emit(Token::Kind kind, std::string text, size_t pos) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = LineAt(pos);
    tokens_.push_back(std::move(t));
  }

  // Position after a tag's end: all whitespace skipped for `-`, else one newline for a block
  // (trim_blocks).
  size_t AfterTagEnd(size_t p, bool strip, bool block = true) {
    if (strip) {
      while (p < src_.size() && IsSpace(src_[p])) ++p;
    } else if (block && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  Result<size_t> ExprToken(size_t p) {
    int line = LineAt(p);
    char c = src_[p];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = p;
      while (e < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
        ++e;
      Emit(Token::Kind::kName, src_.substr(p, e - p), p);
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t e = p;
      while (e < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
        ++e;
      bool is_float = false;
      if (e + 1 < src_.size() && src_[e] == '.' &&
          std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
        is_float = true;
        ++e;
        while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
      }
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t x = e + 1;
        if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
        if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
          is_float = true;
          e = x;
          while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
        }
      }
      std::string num;
      for (size_t k = p; k < e; ++k) {
        if (src_[k] != '_') num += src_[k];
      }
      Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInt, num, p);
      if (is_float) {
        tokens_.back().float_value = std::strtod(num.c_str(), nullptr);
      } else {
        tokens_.back().int_value = std::strtoll(num.c_str(), nullptr, 10);
      }
      return e;
    }
    if (c == '\'' || c == '"') {
      std::string out;
      size_t k = p + 1;
      for (;;) {
        if (k >= src_.size()) return Error(line, "a string literal is never closed");
        char d = src_[k];
        if (d == c) break;
        if (d == '\\' && k + 1 < src_.size()) {
          char e = src_[k + 1];
          k += 2;
          switch (e) {
            case 'n':
              out += '\n';
              break;
            case 't':
              out += '\t';
              break;
            case 'r':
              out += '\r';
              break;
            case '0':
              out += '\0';
              break;
            case '\\':
              out += '\\';
              break;
            case '\'':
              out += '\'';
              break;
            case '"':
              out += '"';
              break;
            case '\n':
              break;
            case 'x':
            case 'u':
            case 'U': {
              size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
              if (k + n > src_.size())
                return Error(line, "a truncated \\" + std::string(1, e) + " escape");
              AppendUtf8(
                  static_cast<uint32_t>(std::strtoul(src_.substr(k, n).c_str(), nullptr, 16)), out);
              k += n;
              break;
            }
            default:
              out += '\\';
              out += e;
          }
          continue;
        }
        out += d;
        ++k;
      }
      Emit(Token::Kind::kString, out, p);
      return k + 1;
    }
    static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                 "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                 "{",  "}",  ",",  ".",  ":",  "|",  "="};
    for (const char* op : kOps) {
      if (src_.compare(p, std::char_traits<char>::length(op), op) == 0) {
        Emit(Token::Kind::kOp, op, p);
        return p + std::char_traits<char>::length(op);
      }
    }
    return Error(line, std::string("unexpected character '") + c + "'");
  }

  std::string src_;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

Result<std::vector<Token>> Lex(std::string_view source) {
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).Run();
}

}  // namespace strata::data::jinja
