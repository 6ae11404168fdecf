// Parsing and printing of byte sizes ("1M", "4KiB", "2G", "1048576") for tools and configs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace strata {

// Accepts a non-negative integer with an optional suffix K, M, G, T (also KiB/MiB/GiB/TiB, KB/MB/GB
// meaning powers of 1024 too, as fio does). "1M" -> 1048576.
Result<uint64_t> ParseByteSize(std::string_view text);

// 1048576 -> "1 MiB", 1536 -> "1.5 KiB", 13 -> "13 B".
std::string FormatBytes(uint64_t bytes);

}  // namespace strata
