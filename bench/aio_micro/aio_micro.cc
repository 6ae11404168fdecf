// bench/aio_micro (Google Benchmark): the per-request cost of AioHandle - synchronous 4 KiB and
// 1 MiB O_DIRECT reads through each engine, with fixed files/registered buffers on and off - and
// the cost of a read whose buffer is unaligned (bounce) or whose offset is unaligned (buffered
// edges). Each read goes once through the path-based call (a file-table lookup per request) and
// once through an opened AioFile (BM_SyncReadFile: no lookup, no allocation). Absolute times,
// for spotting regressions; the ratios that matter are printed by aio_vs_fio and aio_bench.
// BM_Overhead / BM_OverheadFile run the same requests on an engine that completes every piece at
// once without touching the disk: the handle's own cost per request (split, hand-off to the
// worker, completion), free of the disk's noise.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <deque>

#include <benchmark/benchmark.h>

#include "aio/aio_handle.h"
#include "aio/direct/aligned_buffer.h"

namespace {

using strata::AioHandle;
using strata::AioOptions;
using strata::IoEngineKind;

std::string ScratchFile() {
  const char* dir = std::getenv("STRATA_BENCH_DIR");
  static std::string f = std::string(dir ? dir : ".") + "/aio_micro." + std::to_string(getpid());
  return f;
}

constexpr size_t kFileBytes = 64 << 20;

void EnsureFile(AioHandle& h) {
  static bool done = false;
  if (done) return;
  auto buf = std::move(strata::AlignedBuffer::Allocate(kFileBytes)).value();
  if (!h.Pwrite(ScratchFile(), buf.data(), kFileBytes, 0).ok()) std::abort();
  done = true;
}

// range(0): engine (0 io_uring, 1 libaio), range(1): bytes, range(2): 1 = fixed files + buffers,
// range(3): 0 aligned, 1 unaligned buffer, 2 unaligned offset.
void SyncRead(benchmark::State& state, bool opened) {
  AioOptions o;
  o.engine = state.range(0) == 0 ? IoEngineKind::kIoUring : IoEngineKind::kLibaio;
  o.fixed_files = o.registered_buffers = state.range(2) == 1;
  auto h = std::move(AioHandle::Create(o)).value();
  EnsureFile(*h);
  const size_t n = static_cast<size_t>(state.range(1));
  auto buf = std::move(strata::AlignedBuffer::Allocate(n + 4096)).value();
  std::optional<strata::RegisteredBuffer> reg;
  if (state.range(2) == 1) {
    auto r = h->RegisterBuffer(buf.data(), buf.size());
    if (r.ok()) reg = std::move(r).value();
  }
  uint8_t* p = buf.bytes() + (state.range(3) == 1 ? 1 : 0);
  auto file = std::move(h->Open(ScratchFile(), strata::AioOpenMode::kRead)).value();
  uint64_t off = 0;
  for (auto _ : state) {
    uint64_t at = off + (state.range(3) == 2 ? 100 : 0);
    auto r = opened ? file.Pread(p, n, at) : h->Pread(ScratchFile(), p, n, at);
    if (!r.ok()) state.SkipWithError("read failed");
    off = (off + n) % (kFileBytes - 2 * n);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

// Completes every request at once, full size, without I/O.
class NullEngine final : public strata::IoEngine {
 public:
  explicit NullEngine(int qd) : qd_(qd) {}
  std::string_view name() const override { return "null"; }
  int queue_depth() const override { return qd_; }
  strata::Result<int> Submit(std::span<const strata::IoRequest> reqs) override {
    for (const auto& r : reqs) done_.push_back({r.user_data, static_cast<int64_t>(r.size_bytes)});
    return static_cast<int>(reqs.size());
  }
  strata::Result<int> Reap(std::span<strata::IoCompletion> out, int, int64_t) override {
    int n = 0;
    while (n < static_cast<int>(out.size()) && !done_.empty()) {
      out[static_cast<size_t>(n++)] = done_.front();
      done_.pop_front();
    }
    return n;
  }

 private:
  int qd_;
  std::deque<strata::IoCompletion> done_;
};

// range(0): bytes. The file exists (O_DIRECT descriptors are opened) but is never read.
void Overhead(benchmark::State& state, bool opened) {
  AioOptions o;
  o.engine_factory =
      [](int,
         const strata::IoEngineOptions& eo) -> strata::Result<std::unique_ptr<strata::IoEngine>> {
    return std::unique_ptr<strata::IoEngine>(new NullEngine(eo.queue_depth));
  };
  auto h = std::move(AioHandle::Create(o)).value();
  {
    AioOptions real;
    auto w = std::move(AioHandle::Create(real)).value();
    EnsureFile(*w);
  }
  const size_t n = static_cast<size_t>(state.range(0));
  auto buf = std::move(strata::AlignedBuffer::Allocate(n)).value();
  auto file = std::move(h->Open(ScratchFile(), strata::AioOpenMode::kRead)).value();
  for (auto _ : state) {
    auto r = opened ? file.Pread(buf.data(), n, 0) : h->Pread(ScratchFile(), buf.data(), n, 0);
    if (!r.ok()) state.SkipWithError("read failed");
  }
}

void BM_Overhead(benchmark::State& state) { Overhead(state, false); }
void BM_OverheadFile(benchmark::State& state) { Overhead(state, true); }
BENCHMARK(BM_Overhead)->ArgNames({"bytes"})->Arg(4096)->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_OverheadFile)->ArgNames({"bytes"})->Arg(4096)->Arg(1 << 20)->UseRealTime();

void BM_SyncRead(benchmark::State& state) { SyncRead(state, false); }
void BM_SyncReadFile(benchmark::State& state) { SyncRead(state, true); }

void Cases(benchmark::internal::Benchmark* b) {
  b->ArgNames({"libaio", "bytes", "fixed", "unaligned"})
      ->Args({0, 4096, 1, 0})
      ->Args({0, 4096, 0, 0})
      ->Args({1, 4096, 0, 0})
      ->Args({0, 1 << 20, 1, 0})
      ->Args({0, 1 << 20, 0, 0})
      ->Args({1, 1 << 20, 0, 0})
      ->Args({0, 1 << 20, 1, 1})
      ->Args({0, 1 << 20, 1, 2})
      ->UseRealTime();
}
BENCHMARK(BM_SyncRead)->Apply(Cases);
BENCHMARK(BM_SyncReadFile)->Apply(Cases);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove(ScratchFile());
  return 0;
}
