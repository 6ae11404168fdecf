#include "bench/scale/mixed_io.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "aio/aio_handle.h"
#include "aio/direct/aligned_buffer.h"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;

// A position in [lo, hi) of the files' bytes laid end to end, advanced a request at a time (never
// across a file's end), wrapping at hi back to lo. Only whole 4096-byte blocks are taken.
class FileCursor {
 public:
  FileCursor(const std::vector<std::pair<std::string, uint64_t>>& files, uint64_t lo, uint64_t hi)
      : files_(files), lo_(lo), hi_(hi), pos_(lo) {}
  // The next piece of at most `request` bytes: {path, offset, size}; size 0 when the range is
  // empty.
  std::tuple<const std::string*, uint64_t, size_t> Next(size_t request) {
    if (hi_ <= lo_) return {nullptr, 0, 0};
    if (pos_ >= hi_) pos_ = lo_;
    uint64_t base = 0;
    for (const auto& [path, size] : files_) {
      const uint64_t blocks = size / 4096 * 4096;
      if (pos_ < base + blocks) {
        const uint64_t off = pos_ - base;
        const uint64_t n = std::min<uint64_t>({request / 4096 * 4096, blocks - off, hi_ - pos_});
        pos_ += n;
        return {&path, off, static_cast<size_t>(n)};
      }
      base += blocks;
    }
    return {nullptr, 0, 0};
  }

 private:
  const std::vector<std::pair<std::string, uint64_t>>& files_;
  uint64_t lo_, hi_, pos_;
};

}  // namespace

// Note [Mixed traffic]
// The step reads sub-groups' state while it writes others', so its reads and writes share the
// disk all along; the bound times them in separate passes (Note [A sustained sweep] in
// bench/overlap/bound_parts.cc). This pass says what the disk gives them together, without
// compute: the step's proportion of writes to reads, four requests of the bound's size in flight,
// through the engine's own aio options. Step / its time for the step's bytes is what the engine
// adds to the disk's time; its time / the bound's NVMe part is what sharing the disk costs.
// The virtual disk here serves blocks read or written a little earlier from the host's cache:
// at 69 layers, the pass run on the bound's files just after the bound's sweep overwrote them
// timed 4.45 GB/s, and the sweep's read pass run just after this pass wrote them 4.11 GB/s,
// where each, run first, timed 1.94 (together) and 1.49 (reads) GB/s. So the two passes take
// disjoint files (the swap files the sweep does not link: bench/scale/size_run.cc), and here the
// reads take the first half of the bytes while the writes overwrite the second.
Result<MixedIo> MeasureMixedIo(const std::string& dir, const AioOptions& options,
                               size_t request_bytes, uint64_t read_bytes, uint64_t write_bytes) {
  std::vector<std::pair<std::string, uint64_t>> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && it->file_size(ec) >= 4096) {
      files.emplace_back(it->path().string(), it->file_size(ec));
    }
  }
  if (files.empty()) return NotFoundError("mixed aio pass: no swap files under " + dir);
  std::sort(files.begin(), files.end());
  uint64_t total = 0;
  for (const auto& f : files) total += f.second / 4096 * 4096;
  request_bytes = std::max<size_t>(4096, request_bytes / 4096 * 4096);

  MixedIo out;
  // Reads the first half, writes overwrite the second: no read meets a block just written (Note
  // [Mixed traffic]).
  const uint64_t half = total / 2 / 4096 * 4096;
  const uint64_t want_r = std::min(read_bytes, half);
  const uint64_t want_w = read_bytes > 0 ? static_cast<uint64_t>(static_cast<double>(write_bytes) *
                                                                 static_cast<double>(want_r) /
                                                                 static_cast<double>(read_bytes))
                                         : 0;
  if (want_r == 0 && want_w == 0) return out;

  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<AioHandle> aio, AioHandle::Create(options));
  constexpr int kInFlight = 4;
  std::vector<AlignedBuffer> bufs;
  std::vector<int> free_bufs;
  for (int i = 0; i < kInFlight; ++i) {
    STRATA_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(request_bytes));
    std::memset(b.data(), 0x5a, request_bytes);
    bufs.push_back(std::move(b));
    free_bufs.push_back(i);
  }
  FileCursor reads(files, 0, half), writes(files, half, total);
  std::deque<std::pair<AioFuture, int>> flight;
  auto retire = [&]() -> Status {
    STRATA_RETURN_IF_ERROR(flight.front().first.Wait().status().WithContext("mixed aio pass"));
    free_bufs.push_back(flight.front().second);
    flight.pop_front();
    return Status::Ok();
  };

  uint64_t sub_r = 0, sub_w = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (sub_r < want_r || sub_w < want_w) {
    if (free_bufs.empty()) STRATA_RETURN_IF_ERROR(retire());
    // The kind further behind its share goes next.
    const bool read =
        sub_w >= want_w ||
        (sub_r < want_r && static_cast<double>(sub_r) * static_cast<double>(want_w) <=
                               static_cast<double>(sub_w) * static_cast<double>(want_r));
    const uint64_t left = read ? want_r - sub_r : want_w - sub_w;
    auto [path, off, n] =
        (read ? reads : writes).Next(static_cast<size_t>(std::min<uint64_t>(request_bytes, left)));
    if (path == nullptr || n == 0) {  // less than a block left, or an empty half
      if (read) {
        sub_r = want_r;
      } else {
        sub_w = want_w;
      }
      continue;
    }
    const int b = free_bufs.back();
    free_bufs.pop_back();
    flight.emplace_back(read ? aio->SubmitRead(*path, bufs[b].data(), n, off)
                             : aio->SubmitWrite(*path, bufs[b].data(), n, off),
                        b);
    (read ? sub_r : sub_w) += n;
  }
  while (!flight.empty()) STRATA_RETURN_IF_ERROR(retire());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.read_bytes = sub_r;
  out.write_bytes = sub_w;
  for (const auto& f : files) STRATA_RETURN_IF_ERROR(aio->Close(f.first));
  return out;
}

}  // namespace strata::bench
