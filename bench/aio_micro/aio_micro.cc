// bench/aio_micro (Google Benchmark): the per-request cost of AioHandle - synchronous 4 KiB and
// 1 MiB O_DIRECT reads through each engine, with fixed files/registered buffers on and off - and
// the cost of a read whose buffer is unaligned (bounce) or whose offset is unaligned (buffered
// edges). Absolute times, for spotting regressions; the ratios that matter are printed by
// aio_vs_fio and aio_bench.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <benchmark/benchmark.h>

#include "aio/aio_handle.h"
#include "aio/aligned_buffer.h"

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
void BM_SyncRead(benchmark::State& state) {
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
  uint64_t off = 0;
  for (auto _ : state) {
    uint64_t at = off + (state.range(3) == 2 ? 100 : 0);
    if (!h->Pread(ScratchFile(), p, n, at).ok()) state.SkipWithError("read failed");
    off = (off + n) % (kFileBytes - 2 * n);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

BENCHMARK(BM_SyncRead)
    ->ArgNames({"libaio", "bytes", "fixed", "unaligned"})
    ->Args({0, 4096, 1, 0})
    ->Args({0, 4096, 0, 0})
    ->Args({1, 4096, 0, 0})
    ->Args({0, 1 << 20, 1, 0})
    ->Args({0, 1 << 20, 0, 0})
    ->Args({1, 1 << 20, 0, 0})
    ->Args({0, 1 << 20, 1, 1})
    ->Args({0, 1 << 20, 1, 2})
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove(ScratchFile());
  return 0;
}
