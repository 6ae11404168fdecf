// TokenFile: a training corpus as a sequence of token ids, mapped read-only (mmap) so shards
// larger than RAM are paged in as they are sampled.
//
// Formats:
//   - llm.c (karpathy/llm.c dev/data/data_common.py): a header of 256 little-endian int32 —
//     [0] magic 20240520, [1] version (1: uint16 ids, 2: uint32 ids), [2] token count — then
//     the ids. Recognised by its magic.
//   - nanoGPT (prepare.py's np.memmap(..., dtype=np.uint16)): raw little-endian uint16 ids, no
//     header; raw uint32 ids the same way when the dtype is given.
//   - Plain text, byte-level: every byte is a token id 0-255 (vocabulary 256), so a model can be
//     trained on any text file without a tokenizer.
// kAuto picks llm.c if the magic is there, else raw uint16 for a ".bin" file, else bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace strata::data {

enum class TokenFormat { kAuto, kLlmc, kUint16, kUint32, kBytes };

// "auto", "llmc", "uint16", "uint32", "bytes".
std::string_view TokenFormatName(TokenFormat f);
// Parses the names above; InvalidArgument listing them otherwise.
Result<TokenFormat> ParseTokenFormat(std::string_view name);

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

class TokenFile {
 public:
  // Maps `path`. NotFound if it does not exist; DataLoss for a malformed llm.c header, a token
  // count that disagrees with the file size, a size that is not a whole number of ids, or an
  // empty file. The format must be kLlmc only when the magic is there (InvalidArgument).
  static Result<TokenFile> Open(const std::string& path, TokenFormat format = TokenFormat::kAuto);
  // Byte-level text held in memory that outlives the TokenFile (a text built into a program);
  // `name` stands for path() in messages. DataLoss if `text` is empty.
  static Result<TokenFile> FromText(std::string name, std::string_view text);

  TokenFile(TokenFile&& o) noexcept;
  TokenFile& operator=(TokenFile&& o) noexcept;
  ~TokenFile();

  const std::string& path() const { return path_; }
  // The format actually read (never kAuto).
  TokenFormat format() const { return format_; }
  // Bytes per id: 1 (text), 2 or 4.
  size_t id_bytes() const { return id_bytes_; }
  int64_t size() const { return num_tokens_; }

  // Id at index i (0 <= i < size(), checked by the caller).
  uint32_t operator[](int64_t i) const;
  // Copies ids [begin, begin + n) into out[0..n) as int32. OutOfRange-style InvalidArgument
  // naming the file if the range is outside [0, size()); InvalidArgument naming the position if
  // an id is >= vocab_size (when vocab_size > 0) or does not fit an int32.
  Status Read(int64_t begin, int64_t n, int32_t* out, int64_t vocab_size = 0) const;

 private:
  TokenFile() = default;

  std::string path_;
  TokenFormat format_ = TokenFormat::kAuto;
  const unsigned char* map_ = nullptr;  // null when the ids are not mapped here (FromText)
  size_t map_bytes_ = 0;
  const unsigned char* ids_ = nullptr;
  size_t id_bytes_ = 1;
  int64_t num_tokens_ = 0;
};

}  // namespace strata::data
