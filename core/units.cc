#include "core/units.h"

#include <cctype>
#include <charconv>
#include <cstdio>

namespace strata {
namespace {

// "'text'", built by appending: GCC 12 at -O3 reports a false -Wrestrict overlap for
// "'" + std::string(text) (its inlined insert at offset 0).
std::string Quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out += text;
  out += '\'';
  return out;
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  uint64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin) {
    return InvalidArgumentError(Quoted(text) +
                                " is not a byte size (expected e.g. 4096, 512K, 1M, 2G)");
  }
  std::string suffix;
  for (const char* p = ptr; p != end; ++p) suffix += static_cast<char>(std::toupper(*p));
  uint64_t mult = 1;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    mult = 1ull << 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    mult = 1ull << 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    mult = 1ull << 30;
  } else if (suffix == "T" || suffix == "TB" || suffix == "TIB") {
    mult = 1ull << 40;
  } else {
    return InvalidArgumentError(Quoted(text) +
                                ": unknown size suffix (allowed: K, M, G, T, optionally +iB)");
  }
  if (value != 0 && mult > UINT64_MAX / value) {
    return InvalidArgumentError(Quoted(text) + " overflows 64 bits");
  }
  return value * mult;
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else if (v == static_cast<double>(static_cast<uint64_t>(v))) {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace strata
