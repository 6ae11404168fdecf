#include "tools/aio_bench/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "aio/aio_handle.h"
#include "aio/direct/aligned_buffer.h"
#include "tools/aio_bench/pattern.h"

namespace strata::aio_bench {
namespace {

double Percentile(std::vector<int64_t>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return static_cast<double>(v[k]) / 1000.0;
}

}  // namespace

Result<PointResult> RunPoint(const PointSpec& spec, const std::function<void(uint64_t)>& progress) {
  AioOptions o = spec.aio;
  o.record_latency = true;
  STRATA_ASSIGN_OR_RETURN(auto handle, AioHandle::Create(o));
  const uint64_t req = std::min(spec.request_size, spec.file_size);
  AlignedBufferOptions bo;
  bo.huge_pages = spec.huge_pages;
  AlignedBuffer bufs[2];
  for (auto& b : bufs) {
    STRATA_ASSIGN_OR_RETURN(b, AlignedBuffer::Allocate(req, bo));
    // Non-zero contents (a zero page could be special-cased somewhere below us).
    std::memset(b.data(), 0x5A, b.size());
  }
  PointResult result;
  std::optional<RegisteredBuffer> regs[2];
  if (spec.register_buffers) {
    for (int i = 0; i < 2; ++i) {
      auto r = handle->RegisterBuffer(bufs[i].data(), bufs[i].size());
      if (!r.ok()) break;
      regs[i] = std::move(r).value();
      result.registered = i == 1;
    }
  }
  handle->TakeLatencies();
  const bool write = spec.op == IoOp::kWrite;
  struct InFlight {
    AioFuture f;
    uint64_t offset = 0, size = 0;
    int buf = 0;
  };
  std::vector<InFlight> q;
  uint64_t next = 0, done = 0;
  int which = 0;
  Status first_error;
  auto start = std::chrono::steady_clock::now();
  auto retire = [&]() {
    InFlight f = q.front();
    q.erase(q.begin());
    auto n = f.f.Wait();
    if (!n.ok() && first_error.ok()) first_error = n.status();
    if (n.ok() && !write && spec.verify && first_error.ok()) {
      first_error = CheckStamps(bufs[f.buf].bytes(), f.size, f.offset, spec.file);
    }
    done += f.size;
    if (progress) progress(done);
  };
  while (next < spec.file_size && first_error.ok()) {
    if (q.size() == 2) retire();
    uint64_t n = std::min(req, spec.file_size - next);
    if (write) Stamp(bufs[which].bytes(), n, next);
    AioFuture f = write ? handle->SubmitWrite(spec.file, bufs[which].data(), n, next)
                        : handle->SubmitRead(spec.file, bufs[which].data(), n, next);
    q.push_back({f, next, n, which});
    next += n;
    which ^= 1;
  }
  while (!q.empty()) retire();
  auto end = std::chrono::steady_clock::now();
  // O_DIRECT writes are on the device when they complete; the sync (outside the timing, as fio
  // does by default) only flushes metadata such as the file size.
  if (write && first_error.ok()) first_error = handle->Sync(spec.file);
  STRATA_RETURN_IF_ERROR(first_error);
  result.seconds = std::chrono::duration<double>(end - start).count();
  result.gbps = static_cast<double>(spec.file_size) / result.seconds / 1e9;
  auto lat = handle->TakeLatencies();
  result.iops = static_cast<double>(lat.size()) / result.seconds;
  result.lat_p50_us = Percentile(lat, 0.50);
  result.lat_p99_us = Percentile(lat, 0.99);
  result.engine = handle->Describe();
  result.buffer = bufs[0].Describe();
  result.verified = !write && spec.verify;
  return result;
}

}  // namespace strata::aio_bench
