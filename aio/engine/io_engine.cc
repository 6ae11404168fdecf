// Engine registry: names, parsing and the `auto` choice.
#include "aio/engine/io_engine.h"

#include <atomic>

#include "aio/engine/io_engine_backends.h"
#include "core/log.h"

namespace strata {

std::string_view IoEngineKindName(IoEngineKind kind) {
  switch (kind) {
    case IoEngineKind::kAuto:
      return "auto";
    case IoEngineKind::kIoUring:
      return "io_uring";
    case IoEngineKind::kLibaio:
      return "libaio";
  }
  return "?";
}

Result<IoEngineKind> ParseIoEngineKind(std::string_view name) {
  if (name == "auto") return IoEngineKind::kAuto;
  if (name == "io_uring") return IoEngineKind::kIoUring;
  if (name == "libaio") return IoEngineKind::kLibaio;
  return InvalidArgumentError("unknown aio engine '" + std::string(name) +
                              "'; allowed: io_uring, libaio, auto");
}

Result<std::unique_ptr<IoEngine>> CreateIoEngine(IoEngineKind kind,
                                                 const IoEngineOptions& options) {
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return InvalidArgumentError("aio queue_depth " + std::to_string(options.queue_depth) +
                                " is out of range [1, 4096]");
  }
  switch (kind) {
    case IoEngineKind::kIoUring:
      return internal::CreateUringEngine(options);
    case IoEngineKind::kLibaio:
      return internal::CreateLibaioEngine(options);
    case IoEngineKind::kAuto:
      break;
  }
  auto uring = internal::CreateUringEngine(options);
  if (uring.ok()) return uring;
  static std::atomic<bool> said{false};
  LogOnce(said, LogLevel::kWarning,
          "aio: io_uring unavailable (" + uring.status().message() + "), using libaio");
  return internal::CreateLibaioEngine(options);
}

}  // namespace strata
