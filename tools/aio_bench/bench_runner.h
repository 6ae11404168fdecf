// aio_bench's measurement of one point: stream a file through an AioHandle with two requests in
// flight (double buffering, as the swapper does), time it, verify the data.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "aio/aio_options.h"
#include "core/status.h"

namespace strata::aio_bench {

struct PointSpec {
  IoOp op = IoOp::kRead;
  AioOptions aio;
  std::string file;                  // file to read or write
  uint64_t file_size = 1ull << 30;   // bytes moved
  uint64_t request_size = 64 << 20;  // bytes per AioHandle request
  bool huge_pages = true;            // THP-backed buffers (else 4 KiB pages)
  bool register_buffers = true;      // io_uring registered buffers
  bool verify = true;
};

struct PointResult {
  double seconds = 0;
  double gbps = 0;  // 10^9 bytes per second
  double iops = 0;  // block_size pieces per second
  double lat_p50_us = 0, lat_p99_us = 0;
  std::string engine;  // AioHandle::Describe()
  std::string buffer;  // AlignedBuffer::Describe()
  bool registered = false;
  bool verified = false;
};

// `progress(bytes_done)` is called after each request.
Result<PointResult> RunPoint(const PointSpec& spec,
                             const std::function<void(uint64_t)>& progress = {});

}  // namespace strata::aio_bench
