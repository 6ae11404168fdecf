#include "engine/base/step_breakdown.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/units.h"

namespace strata {

StepBreakdown& StepBreakdown::operator+=(const StepBreakdown& o) {
  total_ms += o.total_ms;
  forward_ms += o.forward_ms;
  backward_ms += o.backward_ms;
  step_ms += o.step_ms;
  io_wait_ms += o.io_wait_ms;
  h2d_ms += o.h2d_ms;
  d2h_ms += o.d2h_ms;
  collectives_ms += o.collectives_ms;
  cpu_adam_ms += o.cpu_adam_ms;
  overlapped_adam_ms += o.overlapped_adam_ms;
  h2d_bytes += o.h2d_bytes;
  forward_h2d_bytes += o.forward_h2d_bytes;
  d2h_bytes += o.d2h_bytes;
  nvme_read_bytes += o.nvme_read_bytes;
  nvme_write_bytes += o.nvme_write_bytes;
  grad_region_read_bytes += o.grad_region_read_bytes;
  grad_region_write_bytes += o.grad_region_write_bytes;
  collective_bytes += o.collective_bytes;
  return *this;
}

namespace {

void AppendMs(std::string* out, const char* name, double ms, const char* sep = ", ") {
  if (ms == 0) return;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%s %.1f", out->empty() ? "" : sep, name, ms);
  *out += buf;
}

void AppendBytes(std::string* out, const char* name, uint64_t bytes) {
  if (bytes == 0) return;
  *out += (out->empty() ? "" : ", ") + std::string(name) + " " + FormatBytes(bytes);
}

}  // namespace

std::string StepBreakdown::ToString() const {
  char head[64];
  std::snprintf(head, sizeof(head), "step %.1f ms", total_ms);
  std::string times;
  AppendMs(&times, "fwd", forward_ms);
  AppendMs(&times, "bwd", backward_ms);
  AppendMs(&times, "adam in bwd", overlapped_adam_ms);
  if (step_ms != 0) {
    std::string inner;
    AppendMs(&inner, "adam", cpu_adam_ms);
    AppendMs(&inner, "io wait", io_wait_ms);
    AppendMs(&times, "step", step_ms);
    if (!inner.empty()) times += " (" + inner + ")";
  } else {
    AppendMs(&times, "adam", cpu_adam_ms);
    AppendMs(&times, "io wait", io_wait_ms);
  }
  AppendMs(&times, "h2d", h2d_ms);
  AppendMs(&times, "d2h", d2h_ms);
  AppendMs(&times, "comm", collectives_ms);
  std::string bytes;
  AppendBytes(&bytes, "nvme r", nvme_read_bytes);
  AppendBytes(&bytes, "nvme w", nvme_write_bytes);
  AppendBytes(&bytes, "h2d", h2d_bytes);
  AppendBytes(&bytes, "d2h", d2h_bytes);
  AppendBytes(&bytes, "comm", collective_bytes);
  std::string out = head;
  if (!times.empty()) out += ": " + times;
  if (!bytes.empty()) out += "; " + bytes;
  return out;
}

std::string StepBreakdown::ToJson() const {
  nlohmann::json j = {
      {"total_ms", total_ms},
      {"forward_ms", forward_ms},
      {"backward_ms", backward_ms},
      {"step_ms", step_ms},
      {"io_wait_ms", io_wait_ms},
      {"h2d_ms", h2d_ms},
      {"d2h_ms", d2h_ms},
      {"collectives_ms", collectives_ms},
      {"cpu_adam_ms", cpu_adam_ms},
      {"overlapped_adam_ms", overlapped_adam_ms},
      {"h2d_bytes", h2d_bytes},
      {"forward_h2d_bytes", forward_h2d_bytes},
      {"d2h_bytes", d2h_bytes},
      {"nvme_read_bytes", nvme_read_bytes},
      {"nvme_write_bytes", nvme_write_bytes},
      {"grad_region_read_bytes", grad_region_read_bytes},
      {"grad_region_write_bytes", grad_region_write_bytes},
      {"collective_bytes", collective_bytes},
  };
  return j.dump();
}

}  // namespace strata
