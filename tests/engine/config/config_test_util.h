// Helpers for the engine/config tests: check a config text and look for a diagnostic.
#pragma once

#include <string>

#include <gmock/gmock.h>

#include "engine/config/config.h"

namespace strata::testing {

inline Config Check(const std::string& text, RunContext run = {}) {
  return CheckConfigText(text, "test.json", run);
}

// Every diagnostic, one formatted line each (for failure messages).
inline std::string AllDiagnostics(const Config& c) {
  std::string s;
  for (const auto& d : c.report.diagnostics) s += FormatDiagnostic(d, c.report.source) + "\n";
  return s;
}

// True if `c` has a diagnostic of `severity` at `path` whose message contains `text`.
inline bool HasDiag(const Config& c, Severity severity, const std::string& path,
                    const std::string& text = "") {
  for (const auto& d : c.report.diagnostics) {
    if (d.severity == severity && d.path == path && d.message.find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace strata::testing
