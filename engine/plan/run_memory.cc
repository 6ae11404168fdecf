#include "engine/plan/run_memory.h"

#include <malloc.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

namespace strata {
namespace {

uint64_t ProcStatusBytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line)) {
    if (line.rfind(k, 0) == 0) return std::stoull(line.substr(k.size())) * 1024;  // "kB"
  }
  return 0;
}

// VmRSS from /proc/self/statm (its second field, in pages): cheaper than /proc/self/status.
uint64_t StatmRssBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

PageableSampler::PageableSampler(const Device& device, const TierBudget& budget,
                                 const MemoryBaseline& baseline)
    : device_(device), budget_(budget), baseline_(baseline), thread_([this] {
        std::unique_lock lock(mu_);
        while (!stop_) {
          lock.unlock();
          Sample();
          lock.lock();
          cv_.wait_for(lock, kPeriod, [this] { return stop_; });
        }
      }) {}

PageableSampler::~PageableSampler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PageableSampler::Sample() {
  // The pinned bytes in use now; the device's peak so far (the arena's pages stay touched).
  uint64_t other = budget_.Stats(Tier::kCpu).current_bytes;
  if (device_.kind() == DeviceKind::kHost) other += device_.MemoryStats().peak_bytes;
  const uint64_t rss = StatmRssBytes();
  const uint64_t growth = rss > baseline_.rss_bytes ? rss - baseline_.rss_bytes : 0;
  const uint64_t pageable = growth > other ? growth - other : 0;
  uint64_t seen = peak_.load();
  while (pageable > seen && !peak_.compare_exchange_weak(seen, pageable)) {
  }
}

uint64_t PageableSampler::peak_bytes() {
  Sample();
  return peak_.load();
}

MemoryBaseline MemoryBaseline::Take() {
  // "5" resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
  return MemoryBaseline{CurrentRssBytes()};
}

void KeepLargeBlocksMapped() {
  // Setting the threshold at all turns the dynamic adjustment off (mallopt(3)).
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

uint64_t CurrentRssBytes() { return ProcStatusBytes("VmRSS"); }
uint64_t PeakRssBytes() { return ProcStatusBytes("VmHWM"); }

TierBytes MeasuredPeaks(const Device& device, const TierBudget& budget,
                        const MemoryBaseline& baseline, PageableSampler* sampler) {
  TierBytes t{};
  t[static_cast<size_t>(PlanTier::kDevice)] = device.MemoryStats().peak_bytes;
  t[static_cast<size_t>(PlanTier::kPinnedCpu)] = budget.Stats(Tier::kCpu).peak_bytes;
  t[static_cast<size_t>(PlanTier::kNvme)] = budget.Stats(Tier::kNvme).peak_bytes;
  const uint64_t rss = PeakRssBytes();
  uint64_t other = t[static_cast<size_t>(PlanTier::kPinnedCpu)];
  if (device.kind() == DeviceKind::kHost) other += t[static_cast<size_t>(PlanTier::kDevice)];
  const uint64_t growth = rss > baseline.rss_bytes ? rss - baseline.rss_bytes : 0;
  t[static_cast<size_t>(PlanTier::kPageableCpu)] =
      std::max(growth > other ? growth - other : 0, sampler != nullptr ? sampler->peak_bytes() : 0);
  return t;
}

TierBytes RunCapacities(const Device& device, const TierBudget& budget) {
  TierBytes t{};
  t[static_cast<size_t>(PlanTier::kDevice)] = device.MemoryStats().capacity_bytes;
  const uint64_t cpu = budget.Stats(Tier::kCpu).limit_bytes;
  t[static_cast<size_t>(PlanTier::kPinnedCpu)] = cpu == TierBudget::kUnlimited ? 0 : cpu;
  return t;
}

Status CheckTrainRunFits(const MemoryPlan& plan, const Device& device, const TierBudget& budget) {
  Status s = CheckPlanFits(plan, RunCapacities(device, budget));
  if (s.ok()) return s;
  const std::string& m = s.message();
  const size_t nl = m.find('\n');
  if (nl == std::string::npos) return s;
  std::fprintf(stderr, "%s", m.substr(nl + 1).c_str());
  return OutOfMemoryError(m.substr(0, nl) + "; the per-tier table is above");
}

}  // namespace strata
