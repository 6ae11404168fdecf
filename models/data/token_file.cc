#include "models/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

namespace strata::data {
namespace {

int32_t LoadI32(const unsigned char* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 |
                              static_cast<uint32_t>(p[3]) << 24);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string_view TokenFormatName(TokenFormat f) {
  switch (f) {
    case TokenFormat::kAuto:
      return "auto";
    case TokenFormat::kLlmc:
      return "llmc";
    case TokenFormat::kUint16:
      return "uint16";
    case TokenFormat::kUint32:
      return "uint32";
    case TokenFormat::kBytes:
      return "bytes";
  }
  return "?";
}

Result<TokenFormat> ParseTokenFormat(std::string_view name) {
  for (TokenFormat f : {TokenFormat::kAuto, TokenFormat::kLlmc, TokenFormat::kUint16,
                        TokenFormat::kUint32, TokenFormat::kBytes}) {
    if (name == TokenFormatName(f)) return f;
  }
  return InvalidArgumentError("unknown token file format '" + std::string(name) +
                              "'; formats: auto, llmc, uint16, uint32, bytes");
}

TokenFile::TokenFile(TokenFile&& o) noexcept { *this = std::move(o); }

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  if (this != &o) {
    if (map_ != nullptr) munmap(const_cast<unsigned char*>(map_), map_bytes_);
    path_ = std::move(o.path_);
    format_ = o.format_;
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    ids_ = std::exchange(o.ids_, nullptr);
    id_bytes_ = o.id_bytes_;
    num_tokens_ = std::exchange(o.num_tokens_, 0);
  }
  return *this;
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

Result<TokenFile> TokenFile::Open(const std::string& path, TokenFormat format) {
  TokenFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "token file: open " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "token file: stat " + path);
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  if (bytes == 0) {
    ::close(fd);
    return DataLossError("token file " + path + " is empty");
  }
  void* m = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) return ErrnoToStatus(err, "token file: mmap " + path);
  f.map_ = static_cast<const unsigned char*>(m);
  f.map_bytes_ = bytes;
  // Sampling jumps around the file; read-ahead would only waste I/O on a large shard.
  madvise(m, bytes, MADV_RANDOM);

  const bool has_magic = bytes >= 4 && LoadI32(f.map_) == kLlmcMagic;
  if (format == TokenFormat::kAuto) {
    format = has_magic                ? TokenFormat::kLlmc
             : EndsWith(path, ".bin") ? TokenFormat::kUint16
                                      : TokenFormat::kBytes;
  }
  f.format_ = format;
  const std::string where = "token file " + path;
  if (format == TokenFormat::kLlmc) {
    if (!has_magic || bytes < kLlmcHeaderBytes) {
      return InvalidArgumentError(where + ": no llm.c header (magic " + std::to_string(kLlmcMagic) +
                                  " in a 1024-byte header); give the format (uint16, uint32, "
                                  "bytes) instead");
    }
    const int32_t version = LoadI32(f.map_ + 4);
    if (version != 1 && version != 2) {
      return DataLossError(where + ": llm.c header version " + std::to_string(version) +
                           " (1: uint16 ids, 2: uint32 ids)");
    }
    f.id_bytes_ = version == 1 ? 2 : 4;
    const int32_t count = LoadI32(f.map_ + 8);
    const size_t payload = bytes - kLlmcHeaderBytes;
    if (count <= 0 || payload != static_cast<size_t>(count) * f.id_bytes_) {
      return DataLossError(where + ": llm.c header says " + std::to_string(count) + " tokens (" +
                           std::to_string(static_cast<int64_t>(count) * f.id_bytes_) +
                           " bytes) but " + std::to_string(payload) +
                           " bytes follow the header (truncated?)");
    }
    f.ids_ = f.map_ + kLlmcHeaderBytes;
    f.num_tokens_ = count;
    return f;
  }
  f.id_bytes_ = format == TokenFormat::kUint16 ? 2 : format == TokenFormat::kUint32 ? 4 : 1;
  if (bytes % f.id_bytes_ != 0) {
    return DataLossError(where + ": " + std::to_string(bytes) + " bytes is not a whole number of " +
                         std::string(TokenFormatName(format)) + " ids (truncated?)");
  }
  f.ids_ = f.map_;
  f.num_tokens_ = static_cast<int64_t>(bytes / f.id_bytes_);
  return f;
}

Result<TokenFile> TokenFile::FromText(std::string name, std::string_view text) {
  if (text.empty()) return DataLossError("token text " + name + " is empty");
  TokenFile f;
  f.path_ = std::move(name);
  f.format_ = TokenFormat::kBytes;
  f.ids_ = reinterpret_cast<const unsigned char*>(text.data());
  f.id_bytes_ = 1;
  f.num_tokens_ = static_cast<int64_t>(text.size());
  return f;
}

uint32_t TokenFile::operator[](int64_t i) const {
  const unsigned char* p = ids_ + static_cast<size_t>(i) * id_bytes_;
  switch (id_bytes_) {
    case 1:
      return p[0];
    case 2:
      return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
    default:
      return static_cast<uint32_t>(LoadI32(p));
  }
}

Status TokenFile::Read(int64_t begin, int64_t n, int32_t* out, int64_t vocab_size) const {
  if (begin < 0 || n < 0 || begin > num_tokens_ || n > num_tokens_ - begin) {
    return InvalidArgumentError("token file " + path_ + ": range [" + std::to_string(begin) + ", " +
                                std::to_string(begin + n) + ") is outside its " +
                                std::to_string(num_tokens_) + " tokens");
  }
  const uint64_t limit = vocab_size > 0
                             ? static_cast<uint64_t>(vocab_size)
                             : static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t id = (*this)[begin + i];
    if (id >= limit) {
      return InvalidArgumentError("token file " + path_ + ": token " + std::to_string(id) +
                                  " at position " + std::to_string(begin + i) +
                                  " is outside the vocabulary of " + std::to_string(limit) +
                                  (vocab_size > 0 ? " (the model's vocab_size)" : " ids"));
    }
    out[i] = static_cast<int32_t>(id);
  }
  return Status::Ok();
}

}  // namespace strata::data
