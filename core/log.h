// One-line diagnostics on stderr, prefixed "strata: ". Used for the one line every fallback
// prints (e.g. "aio: io_uring unavailable (...), using libaio"), never for hot-path tracing.
#pragma once

#include <atomic>
#include <string_view>

namespace strata {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Default kInfo; STRATA_LOG_LEVEL=debug|info|warning|error
// in the environment overrides it. Thread-safe.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

// Thread-safe; each call writes exactly one line.
void Log(LogLevel level, std::string_view message);
inline void LogInfo(std::string_view m) { Log(LogLevel::kInfo, m); }
inline void LogWarning(std::string_view m) { Log(LogLevel::kWarning, m); }
inline void LogError(std::string_view m) { Log(LogLevel::kError, m); }

// Logs `message` the first time `flag` is seen false, then never again for that flag.
void LogOnce(std::atomic<bool>& flag, LogLevel level, std::string_view message);

}  // namespace strata
