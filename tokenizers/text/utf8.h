// UTF-8 and Unicode helpers the tokenizer pipeline shares: code point iteration, validity,
// Rust's notion of whitespace (what Hugging Face `tokenizers` strips), normalization forms
// through utf8proc, and GPT-2's byte <-> printable-character table (ByteLevel).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace strata::tokenizers::internal {

// Length in bytes of the UTF-8 sequence starting with `lead` (1 for a stray continuation byte).
inline int Utf8SeqLen(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at s[i] of valid UTF-8; *len receives its byte length.
uint32_t DecodeUtf8(std::string_view s, size_t i, int* len);
void AppendUtf8(uint32_t cp, std::string* out);
// Byte offset of the first byte that is not part of valid UTF-8, or std::string_view::npos.
size_t FindInvalidUtf8(std::string_view s);
// Rust's char::is_whitespace (the Unicode White_Space property).
bool IsWhitespace(uint32_t cp);
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string Utf8Lossy(std::string_view bytes);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// `s` (valid UTF-8) in the normal form, by utf8proc.
Result<std::string> Normalize(std::string_view s, NormalForm form);

// GPT-2's byte-level alphabet: byte b -> the UTF-8 of the printable character standing for it.
const std::array<std::string, 256>& ByteToChar();
// The byte a byte-level character stands for, or -1.
int CharToByte(uint32_t cp);

}  // namespace strata::tokenizers::internal
