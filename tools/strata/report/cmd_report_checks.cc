#include "tools/strata/report/cmd_report_checks.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/units.h"
#include "cpu_adam/simd/simd_isa.h"
#include "offload/device/registry.h"
#include "offload/numa.h"
#include "strata/config.h"

#if STRATA_WITH_MPI
#include <mpi.h>
#endif

namespace strata::cli {

const char* CheckLevelName(CheckLevel level) {
  switch (level) {
    case CheckLevel::kOk:
      return "ok";
    case CheckLevel::kWarning:
      return "warning";
    case CheckLevel::kMissing:
      return "missing";
  }
  return "?";
}

namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A value from /proc/meminfo in bytes ("MemTotal"), 0 if absent.
uint64_t MemInfoBytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string k;
  uint64_t kib = 0;
  std::string unit;
  while (in >> k >> kib >> unit) {
    if (k == key + ":") return kib * 1024;
  }
  return 0;
}

// CAP_IPC_LOCK (bit 14) in the effective set: mlock is then not bound by RLIMIT_MEMLOCK.
bool HasCapIpcLock() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps >> 14) & 1;
    }
  }
  return false;
}

void AddBuildChecks(std::vector<CheckResult>* out) {
  out->push_back({"build",
                  "strata",
                  CheckLevel::kOk,
                  std::string(STRATA_VERSION) + ", built with g++ " + __VERSION__,
                  "",
                  {{"version", STRATA_VERSION}}});
  const bool cuda = STRATA_WITH_CUDA != 0;
  out->push_back({"build",
                  "CUDA",
                  cuda ? CheckLevel::kOk : CheckLevel::kMissing,
                  cuda ? "compiled in (CudaDevice, kernels for the configured architectures)"
                       : "not compiled in: no CUDA compiler was found when configuring",
                  cuda ? "" : "install the CUDA toolkit under /usr/local/cuda and reconfigure",
                  {{"compiled", cuda}}});
  const bool nccl = STRATA_WITH_NCCL != 0;
  out->push_back({"build",
                  "NCCL",
                  nccl ? CheckLevel::kOk : CheckLevel::kMissing,
                  nccl ? "compiled in (comm_backend nccl)"
                       : (cuda ? "not compiled in: nccl.h / libnccl not found next to CUDA"
                               : "not compiled in: needs CUDA"),
                  nccl ? "" : "install NCCL under /usr/local/cuda and reconfigure",
                  {{"compiled", nccl}}});
#if STRATA_WITH_MPI
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, static_cast<size_t>(len));
  if (size_t nl = v.find_first_of(",\n"); nl != std::string::npos) v.resize(nl);
  out->push_back({"build",
                  "MPI",
                  CheckLevel::kOk,
                  "compiled in: " + v,
                  "",
                  {{"compiled", true}, {"library", v}}});
#else
  out->push_back({"build",
                  "MPI",
                  CheckLevel::kMissing,
                  "not compiled in: no MPI found when configuring (multi-rank runs unavailable)",
                  "apt-get install libopenmpi-dev openmpi-bin and reconfigure",
                  {{"compiled", false}}});
#endif
}

void AddDeviceChecks(std::vector<CheckResult>* out) {
  if (!DeviceKindBuilt(DeviceKind::kCuda)) {
    out->push_back({"devices",
                    "GPU",
                    CheckLevel::kWarning,
                    "none: this build has no CUDA; the host-emulated device is used",
                    "training runs for real but at CPU speed; build with CUDA on a GPU machine",
                    {{"cuda_devices", 0}}});
    return;
  }
  DeviceOptions options;
  options.kind = DeviceKind::kCuda;
  Result<std::unique_ptr<Device>> dev = CreateDevice(options);
  if (!dev.ok()) {
    out->push_back({"devices",
                    "GPU",
                    CheckLevel::kWarning,
                    "none: the host-emulated device is used (" + dev.status().message() + ")",
                    "training runs for real but at CPU speed; a CUDA GPU is needed for speed",
                    {{"cuda_devices", 0}}});
    return;
  }
  out->push_back({"devices",
                  "GPU",
                  CheckLevel::kOk,
                  (*dev)->name(),
                  "",
                  {{"cuda_devices", 1}, {"name", (*dev)->name()}}});
}

void AddCpuChecks(std::vector<CheckResult>* out) {
  nlohmann::json usable = nlohmann::json::object();
  std::string paths;
  for (SimdIsa isa : {SimdIsa::kScalar, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    bool ok = CpuSupports(isa);
    usable[std::string(SimdIsaName(isa))] = ok;
    if (ok) paths += (paths.empty() ? "" : ", ") + std::string(SimdIsaName(isa));
  }
  Result<SimdIsa> chosen = ResolveSimdIsa(SimdIsa::kAuto);
  if (!chosen.ok()) {
    out->push_back({"cpu",
                    "cpu_adam SIMD",
                    CheckLevel::kWarning,
                    "usable: " + paths + "; " + chosen.status().message(),
                    "unset STRATA_SIMD or set it to one of the usable paths",
                    {{"usable", usable}}});
  } else {
    bool vector = *chosen != SimdIsa::kScalar;
    out->push_back(
        {"cpu",
         "cpu_adam SIMD",
         vector ? CheckLevel::kOk : CheckLevel::kWarning,
         "usable: " + paths + "; chosen: " + std::string(SimdIsaName(*chosen)) +
             (CpuHasAvx512Bf16() ? " (+avx512_bf16)" : "") + "; CPU: " + CpuSimdFeatures(),
         vector ? "" : "no AVX2 on this CPU: CPU Adam runs scalar, several times slower",
         {{"usable", usable}, {"chosen", SimdIsaName(*chosen)}, {"features", CpuSimdFeatures()}}});
  }
  Result<const HostTopology*> topo = HostTopology::Get();
  if (!topo.ok()) {
    out->push_back({"cpu",
                    "topology",
                    CheckLevel::kWarning,
                    "hwloc could not load the topology: " + topo.status().message(),
                    "pinned buffers are not NUMA-placed",
                    {}});
  } else {
    const HostTopology* t = *topo;
    out->push_back({"cpu",
                    "topology",
                    CheckLevel::kOk,
                    t->Describe() + " (hwloc)",
                    "",
                    {{"numa_nodes", t->numa_node_count()}, {"cores", t->core_count()}}});
  }
}

void AddMemoryChecks(std::vector<CheckResult>* out) {
  uint64_t total = MemInfoBytes("MemTotal"), avail = MemInfoBytes("MemAvailable");
  out->push_back({"memory",
                  "RAM",
                  CheckLevel::kOk,
                  FormatBytes(total) + " total, " + FormatBytes(avail) + " available",
                  "",
                  {{"total_bytes", total}, {"available_bytes", avail}}});

  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  const bool unlimited = lim.rlim_cur == RLIM_INFINITY;
  const bool cap = HasCapIpcLock();
  nlohmann::json data = {
      {"memlock_limit_bytes", unlimited ? nlohmann::json(nullptr) : nlohmann::json(lim.rlim_cur)},
      {"cap_ipc_lock", cap}};
  if (unlimited) {
    out->push_back({"memory", "locked memory", CheckLevel::kOk,
                    "ulimit -l unlimited: pinned buffers can be as large as RAM allows", "", data});
  } else if (cap) {
    out->push_back({"memory", "locked memory", CheckLevel::kOk,
                    "ulimit -l " + FormatBytes(lim.rlim_cur) +
                        ", but CAP_IPC_LOCK (e.g. root) lifts it: pinned buffers are not capped",
                    "", data});
  } else {
    out->push_back({"memory", "locked memory", CheckLevel::kWarning,
                    "ulimit -l " + FormatBytes(lim.rlim_cur) +
                        ": pinned (page-locked) buffers above that fail, and Strata falls back "
                        "to pageable memory with one line (slower copies, no DMA)",
                    "raise it: `ulimit -l unlimited`, or memlock in /etc/security/limits.conf",
                    data});
  }

  std::string thp = ReadFirstLine("/sys/kernel/mm/transparent_hugepage/enabled");
  const bool thp_off = thp.find("[never]") != std::string::npos;
  out->push_back({"memory",
                  "transparent huge pages",
                  thp.empty() || thp_off ? CheckLevel::kWarning : CheckLevel::kOk,
                  thp.empty() ? "unknown (no /sys/kernel/mm/transparent_hugepage)" : thp,
                  thp.empty() || thp_off
                      ? "aio buffers on 4 KiB pages measured ~2x slower here: set it to madvise"
                      : "",
                  {{"setting", thp}}});
}

}  // namespace

std::vector<CheckResult> RunReportChecks(const ReportOptions& options) {
  std::vector<CheckResult> out;
  AddBuildChecks(&out);
  AddDeviceChecks(&out);
  AddIoChecks(options, &out);
  AddCpuChecks(&out);
  AddMemoryChecks(&out);
  return out;
}

}  // namespace strata::cli
