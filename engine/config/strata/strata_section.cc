#include "engine/config/strata/strata_section.h"

#include <charconv>
#include <functional>

#include "aio/aio_config.h"
#include "engine/config/strata/cpu_memory.h"

namespace strata {

std::string_view DeviceChoiceName(DeviceChoice d) {
  switch (d) {
    case DeviceChoice::kAuto:
      return "auto";
    case DeviceChoice::kHost:
      return "host";
    case DeviceChoice::kCuda:
      return "cuda";
  }
  return "?";
}

namespace internal {
namespace {

const std::vector<std::string_view> kAioBoolKeys = {"single_submit", "overlap_events", "use_gds",
                                                    "aio_allow_buffered", "aio_sqpoll"};

// DeepSpeed's string coercions ("8", "true") before handing a section to aio/aio_config.
void Coerce(Json* section) {
  for (auto& [key, v] : section->items()) {
    if (!v.is_string() || v.get_ref<const std::string&>() == "auto") continue;
    std::string s = v.get<std::string>();
    bool is_bool = false;
    for (auto k : kAioBoolKeys) is_bool |= k == key;
    if (is_bool) {
      if (s == "true" || s == "True" || s == "1" || s == "yes" || s == "on") v = true;
      if (s == "false" || s == "False" || s == "0" || s == "no" || s == "off") v = false;
    } else if (key != "aio_engine") {
      double d = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
      if (ec == std::errc() && end == s.data() + s.size()) v = d;  // else aio_config reports it
    }
  }
}

// The first JSON path under `path` an aio_config message quotes ("config 'aio.queue_depth' = 0
// ..." -> "aio.queue_depth"), or "" if it names none.
std::string NamedPath(const std::string& message, const std::string& path) {
  size_t a = message.find("'" + path);
  if (a == std::string::npos) return "";
  size_t b = message.find('\'', a + 1);
  return b == std::string::npos ? "" : message.substr(a + 1, b - a - 1);
}

// Runs `apply` on `section`, reporting each error and dropping the key it names so the next run
// finds the next problem: every error of the section, not just the first.
void ApplyCollecting(ConfigContext* ctx, const std::string& path, Json section,
                     const std::function<Status(const Json&)>& apply) {
  for (size_t round = 0; round <= section.size() + 1; ++round) {
    Status s = apply(section);
    if (s.ok()) return;
    std::string named = NamedPath(s.message(), path);
    std::string key = named.size() > path.size() + 1 && named.rfind(path + ".", 0) == 0
                          ? named.substr(path.size() + 1)
                          : "";
    ctx->Error(key.empty() ? path : named, s.message());
    if (!key.empty() && section.contains(key)) {
      section.erase(key);
    } else if (section.contains("thread_count")) {  // "sets both ... and thread_count"
      section.erase("thread_count");
    } else {
      return;
    }
  }
}

void ReadAio(const Section& top, AioOptions* aio) {
  ConfigContext* ctx = top.ctx();
  const Json* a = top.Get("aio");
  for (const char* k : {"block_size", "queue_depth", "intra_op_parallelism", "single_submit",
                        "overlap_events", "use_gds"}) {
    const std::string p = std::string("aio.") + k;
    const Json* v = a && a->is_object() && a->contains(k) ? &(*a)[k] : nullptr;
    if (v && v->is_string() && v->get_ref<const std::string&>() == "auto") {
      ctx->SetOrigin(p, OriginKind::kAuto, "default");
    } else {
      ctx->SetOrigin(p, v ? OriginKind::kFile : OriginKind::kDefault);
    }
  }
  if (!a) return;
  if (!a->is_object()) {
    ctx->Error("aio", "must be an object ({...}), got " + a->dump());
    return;
  }
  Json copy = *a;
  Coerce(&copy);
  if (copy.contains("thread_count") && !copy.contains("intra_op_parallelism")) {
    ctx->Warning("aio.thread_count", "the old name of aio.intra_op_parallelism; read as such");
    ctx->SetOrigin("aio.intra_op_parallelism", OriginKind::kDeprecated, "aio.thread_count");
  }
  ApplyCollecting(ctx, "aio", copy, [aio](const Json& j) {
    AioOptions o = *aio;
    Status s = ApplyAioSection(nlohmann::json(j), &o);
    if (s.ok()) *aio = o;
    return s;
  });
}

}  // namespace

void ReadStrataSection(const Section& top, StrataConfig* out, AioOptions* aio) {
  ConfigContext* ctx = top.ctx();
  Section s = top.Object("strata");
  s.CheckKeys({"aio_engine", "aio_allow_buffered", "aio_sqpoll", "swap_checksums", "unknown_keys",
               "comm_backend", "comm_timeout_s", "device", "device_memory", "link_gbps",
               "trace_path", "overlap_step", "deferred_updates", "pinned_memory_limit",
               "lm_head_chunk", "swap_chunk_bytes", "nvme_grad_chunk", "cpu_memory"});
  s.Bool("swap_checksums", &out->swap_checksums);
  std::string unknown = "warn";
  s.Enum("unknown_keys", &unknown, {"warn", "error"});
  out->unknown_keys_error = unknown == "error";
  std::string comm = "auto";
  s.Enum("comm_backend", &comm, {"auto", "local", "mpi", "nccl"});
  out->comm_backend = comm == "local"  ? CommBackend::kLocal
                      : comm == "mpi"  ? CommBackend::kMpi
                      : comm == "nccl" ? CommBackend::kNccl
                                       : CommBackend::kAuto;
  s.Double("comm_timeout_s", &out->comm_timeout_s, 1e-3);
  std::string device = "auto";
  s.Enum("device", &device, {"auto", "host", "cuda"});
  out->device = device == "host"   ? DeviceChoice::kHost
                : device == "cuda" ? DeviceChoice::kCuda
                                   : DeviceChoice::kAuto;
  if (s.Bytes("device_memory", &out->device_memory_bytes) == Got::kValue &&
      out->device_memory_bytes == 0) {
    ctx->Error(s.KeyPath("device_memory"), "must be more than 0 bytes");
  }
  s.Double("link_gbps", &out->link_gbps, 0.0);
  s.String("trace_path", &out->trace_path);
  s.Bool("overlap_step", &out->overlap_step);
  s.Bool("deferred_updates", &out->deferred_updates);
  s.Bytes("pinned_memory_limit", &out->pinned_memory_limit_bytes);
  if (s.Bytes("nvme_grad_chunk", &out->nvme_grad_chunk_bytes) == Got::kValue &&
      out->nvme_grad_chunk_bytes % (16 << 10) != 0) {
    ctx->Error(
        s.KeyPath("nvme_grad_chunk"),
        "must be a multiple of 16 KiB (4096 fp32 gradients), or 0 (gradients in CPU memory)");
  }
  ReadCpuMemory(s, &out->cpu_memory_bytes);  // engine/config/strata/cpu_memory.h
  if (s.Int("lm_head_chunk", &out->lm_head_chunk, 0, Section::kMaxInt, /*auto_ok=*/true) ==
      Got::kAuto) {
    out->lm_head_chunk = StrataConfig::kLmHeadChunkAuto;
  }
  if (const Json* v = s.Get("swap_chunk_bytes"); v != nullptr && v->is_string() && *v == "auto") {
    out->swap_chunk_auto = true;
    ctx->SetOrigin(s.KeyPath("swap_chunk_bytes"), OriginKind::kAuto,
                   "32 MiB chunks in the bytes of buffer_count 64 MiB ones");
  } else if (s.Bytes("swap_chunk_bytes", &out->swap_chunk_bytes) == Got::kValue) {
    out->swap_chunk_auto = false;
    if (out->swap_chunk_bytes < StrataConfig::kSwapChunkMin) {
      ctx->Error(s.KeyPath("swap_chunk_bytes"),
                 "= " + std::to_string(out->swap_chunk_bytes) +
                     " is too small: at least 4096 bytes (or \"auto\", or e.g. \"64M\")");
    }
  }

  for (const char* k : {"aio_engine", "aio_allow_buffered", "aio_sqpoll"}) {
    ctx->SetOrigin(std::string("strata.") + k, s.Has(k) ? OriginKind::kFile : OriginKind::kDefault);
  }
  if (s.present()) {
    Json keys = Json::object();
    for (const char* k : {"aio_engine", "aio_allow_buffered", "aio_sqpoll"}) {
      if (const Json* v = s.Get(k)) keys[k] = *v;
    }
    Coerce(&keys);
    ApplyCollecting(ctx, "strata", keys, [aio](const Json& j) {
      AioOptions o = *aio;
      Status st = ApplyStrataAioKeys(nlohmann::json(j), &o);
      if (st.ok()) *aio = o;
      return st;
    });
  }
  ReadAio(top, aio);
}

}  // namespace internal
}  // namespace strata
