#include "engine/config/strata/cpu_memory.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/units.h"
#include "engine/comm/launch/launch_env.h"

namespace strata {

uint64_t AutoCpuMemoryBytes(uint64_t mem_available_bytes, int local_ranks) {
  const double share = kCpuMemoryAutoShare * static_cast<double>(mem_available_bytes) /
                       static_cast<double>(local_ranks < 1 ? 1 : local_ranks);
  return static_cast<uint64_t>(std::floor(share));
}

Result<uint64_t> MemAvailableBytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (f >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    f.ignore(256, '\n');
  }
  return NotFoundError("/proc/meminfo has no MemAvailable line (Linux >= 3.14 reports it)");
}

namespace internal {

void ReadCpuMemory(const Section& s, uint64_t* out) {
  ConfigContext* ctx = s.ctx();
  const std::string path = s.KeyPath("cpu_memory");
  const Json* v = s.Get("cpu_memory");
  if (v == nullptr || !v->is_string() || v->get_ref<const std::string&>() != "auto") {
    if (s.Bytes("cpu_memory", out) == Got::kAbsent) {
      ctx->SetOrigin(path, OriginKind::kDefault, "0: no CPU budget (the plan is only printed)");
    }
    return;
  }
  Result<uint64_t> avail = MemAvailableBytes();
  if (!avail.ok()) {
    ctx->Error(path, "= \"auto\" needs the RAM available at start-up: " + avail.status().message() +
                         "; write a size instead (e.g. \"6G\")");
    return;
  }
  Result<LaunchEnv> env = ReadLaunchEnv();
  if (!env.ok()) {
    ctx->Error(path, "= \"auto\" needs the ranks on this node: " + env.status().message());
    return;
  }
  const int local = env->local_world_size;
  *out = AutoCpuMemoryBytes(*avail, local);
  char share[16];
  std::snprintf(share, sizeof(share), "%.0f%%", kCpuMemoryAutoShare * 100);
  ctx->SetOrigin(path, OriginKind::kAuto,
                 FormatBytes(*out) + " = " + share + " of MemAvailable " + FormatBytes(*avail) +
                     " / " + std::to_string(local) + " rank(s) on this node (" +
                     (env->launched() ? env->source : std::string("no launcher")) + ")");
}

}  // namespace internal
}  // namespace strata
