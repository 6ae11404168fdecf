#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace strata {
namespace {

LogLevel LevelFromEnv() {
  const char* s = std::getenv("STRATA_LOG_LEVEL");
  if (s == nullptr) return LogLevel::kInfo;
  if (std::strcmp(s, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(s, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(s, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& Level() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

}  // namespace

void SetLogLevel(LogLevel level) { Level().store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(Level().load()); }

void Log(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) < Level().load(std::memory_order_relaxed)) return;
  static std::mutex mu;
  std::string line = "strata: ";
  if (level == LogLevel::kWarning) line += "warning: ";
  if (level == LogLevel::kError) line += "error: ";
  line += message;
  line += '\n';
  std::lock_guard lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void LogOnce(std::atomic<bool>& flag, LogLevel level, std::string_view message) {
  if (!flag.exchange(true)) Log(level, message);
}

}  // namespace strata
