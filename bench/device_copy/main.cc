// device_copy: how faithfully HostDevice emulates a PCIe link, and what it costs when it does not.
//
//   device_copy [--size BYTES] [--total BYTES] [--link GBPS[,GBPS...]] [--rounds R]
//
// Part 1 (paced): copies of --size bytes, --total bytes per measurement, through a HostDevice
// whose link is set to each --link GB/s (default 25 = PCIe Gen4 x16, and 0 = auto: half the
// memcpy probe, a speed one core can actually feed; above memmove speed pacing cannot help).
// Reports achieved GB/s against the set value for H2D, D2H, H2D and D2H at once (full duplex: each
// should reach the set value) and two H2D streams at once (they share the link: the sum should
// reach it). Part 2 (unpaced): the same H2D/D2H copies with pacing off, against a plain memcpy loop
// on the same buffers, alternating ABBA per round; medians. The ratio shows the stream's own
// overhead. Host buffers come from a PinnedPool (mlocked, NUMA-bound, huge pages) as in the engine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/flags.h"
#include "core/units.h"
#include "offload/device/registry.h"
#include "offload/pinned_pool.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  uint64_t size = uint64_t{64} << 20;
  uint64_t total = uint64_t{1} << 30;
  // Link speeds to pace at, GB/s; 0 = auto: half this machine's memcpy speed, a link the host
  // can emulate (pacing cannot make a copy faster than memmove on one core).
  std::vector<double> links = {25, 0};
  int64_t rounds = 5;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "device_copy: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Check(Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(r).value();
}
void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

// "25,0" -> {25, 0}; every item a number >= 0.
Status ParseLinks(std::string_view text, std::vector<double>* links) {
  links->clear();
  for (size_t pos = 0; pos <= text.size();) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item(text.substr(pos, comma - pos));
    char* end = nullptr;
    const double gbps = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(gbps >= 0)) {
      return InvalidArgumentError("--link " + std::string(text) + ": '" + item +
                                  "' is not a bandwidth in GB/s >= 0 (0 = auto)");
    }
    links->push_back(gbps);
    pos = comma + 1;
  }
  return Status::Ok();
}

Args Parse(int argc, char** argv) {
  Args a;
  FlagParser flags(
      "device_copy [--size BYTES] [--total BYTES] [--link GBPS[,GBPS...]] [--rounds R]");
  flags.Bytes("size", &a.size, "bytes per copy");
  flags.Bytes("total", &a.total, "bytes copied per measurement");
  flags.Custom(
      "link", "GBPS[,GBPS...]", [&a](std::string_view v) { return ParseLinks(v, &a.links); },
      "link speeds to pace at (default 25,0; 0 = half the memcpy probe)");
  flags.Int("rounds", &a.rounds, "measurements per figure (median)", 1, 1000);
  std::vector<std::string> positional;
  Status s = flags.Parse(argc, argv, 1, &positional);
  if (s.ok() && !positional.empty()) {
    s = InvalidArgumentError("unexpected argument '" + positional[0] + "'");
  }
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    std::exit(0);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "device_copy: %s\n%s\n", s.message().c_str(), flags.Help().c_str());
    std::exit(2);
  }
  if (a.size == 0 || a.total < a.size) Die("need 0 < --size <= --total");
  return a;
}

struct Job {
  Stream stream;
  CopyKind kind;
  void* dst;
  const void* src;
};

// Runs total/size copies on each job's stream concurrently; returns GB/s per job.
double RunJobs(const std::vector<Job>& jobs, const Args& a) {
  const size_t n = a.total / a.size;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    for (const Job& j : jobs) Check(j.stream.CopyAsync(j.dst, j.src, a.size, j.kind), "copy");
  }
  for (const Job& j : jobs) Check(j.stream.Synchronize(), "synchronize");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(n * a.size) / s / 1e9;
}

double MemcpyProbe(void* dst, const void* src, const Args& a) {
  const size_t n = a.total / a.size;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < n; ++i) std::memcpy(dst, src, a.size);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(n * a.size) / s / 1e9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int Main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  PinnedPoolOptions po;
  po.buffer_bytes = a.size;
  po.buffer_count = 2;
  po.name = "bench host buffers";
  auto pool = Check(PinnedPool::Create(po), "pinned pool");
  PinnedBuffer h0 = pool->Acquire(), h1 = pool->Acquire();
  std::memset(h0.data(), 1, a.size);
  std::memset(h1.data(), 2, a.size);
  std::printf("device_copy: %s copies, %s per measurement, %d rounds\n",
              FormatBytes(a.size).c_str(), FormatBytes(a.total).c_str(),
              static_cast<int>(a.rounds));
  std::printf("host buffers: %s\n", pool->Describe().c_str());

  auto make_device = [&](double link) {
    DeviceOptions o;
    o.host.memory_bytes = 2 * a.size + (size_t{4} << 20);
    o.host.link_bandwidth_gbps = link;
    return Check(CreateDevice(o), "device");
  };

  // --- Part 1: paced ----------------------------------------------------------------------
  double probe_gbps = 0;
  {
    std::vector<double> p;
    for (int r = 0; r < 3; ++r) p.push_back(MemcpyProbe(h1.data(), h0.data(), a));
    probe_gbps = Median(p);
  }
  for (double link : a.links) {
    if (link <= 0) link = std::max(0.5, std::floor(probe_gbps / 2 * 2) / 2);
    auto dev = make_device(link);
    void* d0 = Check(dev->Allocate(a.size), "allocate");
    void* d1 = Check(dev->Allocate(a.size), "allocate");
    Stream s0 = Check(dev->CreateStream(), "stream");
    Stream s1 = Check(dev->CreateStream(), "stream");
    std::printf("\npaced: %s (memcpy probe %.2f GB/s%s)\n", dev->name().c_str(), probe_gbps,
                link > probe_gbps ? ": link faster than memcpy, expect the memcpy figure" : "");
    std::printf("%-28s %10s %10s %8s\n", "pattern", "GB/s", "set GB/s", "ratio");
    struct Case {
      const char* name;
      std::vector<Job> jobs;
      bool summed;  // jobs share one direction: compare their sum with the link
    };
    const Case cases[] = {
        {"H2D", {{s0, CopyKind::kHostToDevice, d0, h0.data()}}, false},
        {"D2H", {{s0, CopyKind::kDeviceToHost, h0.data(), d0}}, false},
        {"H2D || D2H (each)",
         {{s0, CopyKind::kHostToDevice, d0, h0.data()},
          {s1, CopyKind::kDeviceToHost, h1.data(), d1}},
         false},
        {"2 x H2D streams (sum)",
         {{s0, CopyKind::kHostToDevice, d0, h0.data()},
          {s1, CopyKind::kHostToDevice, d1, h1.data()}},
         true},
    };
    for (const Case& c : cases) {
      std::vector<double> gbps;
      for (int r = 0; r < a.rounds; ++r) {
        const double per_job = RunJobs(c.jobs, a);
        gbps.push_back(c.summed ? per_job * static_cast<double>(c.jobs.size()) : per_job);
      }
      const double m = Median(gbps);
      std::printf("%-28s %10.2f %10.2f %8.3f\n", c.name, m, link, m / link);
    }
    Check(dev->Free(d0), "free");
    Check(dev->Free(d1), "free");
  }

  // --- Part 2: unpaced vs memcpy --------------------------------------------------------------
  {
    auto dev = make_device(0);
    void* d0 = Check(dev->Allocate(a.size), "allocate");
    Stream s0 = Check(dev->CreateStream(), "stream");
    std::vector<double> h2d, d2h, probe;
    for (int r = 0; r < a.rounds; ++r) {
      // ABBA: probe, device, device, probe (alternating which comes first per round).
      const bool probe_first = r % 2 == 0;
      // The probe copies between the very buffers the H2D copy uses (HostDevice memory is host
      // memory), so the ratio is the stream's overhead alone.
      if (probe_first) probe.push_back(MemcpyProbe(d0, h0.data(), a));
      h2d.push_back(RunJobs({{s0, CopyKind::kHostToDevice, d0, h0.data()}}, a));
      d2h.push_back(RunJobs({{s0, CopyKind::kDeviceToHost, h1.data(), d0}}, a));
      if (!probe_first) probe.push_back(MemcpyProbe(d0, h0.data(), a));
    }
    const double p = Median(probe);
    std::printf("\nunpaced: %s\n", dev->name().c_str());
    std::printf("%-28s %10s %10s %8s\n", "pattern", "GB/s", "memcpy", "ratio");
    std::printf("%-28s %10.2f %10.2f %8.3f\n", "H2D (stream worker)", Median(h2d), p,
                Median(h2d) / p);
    std::printf("%-28s %10.2f %10.2f %8.3f\n", "D2H (stream worker)", Median(d2h), p,
                Median(d2h) / p);
    Check(dev->Free(d0), "free");
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
