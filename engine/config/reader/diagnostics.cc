#include "engine/config/reader/diagnostics.h"

namespace strata {

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kError:
      return "error";
    case Severity::kWarning:
      return "warning";
    case Severity::kNote:
      return "note";
  }
  return "?";
}

std::string_view OriginKindName(OriginKind k) {
  switch (k) {
    case OriginKind::kFile:
      return "file";
    case OriginKind::kDefault:
      return "default";
    case OriginKind::kAuto:
      return "auto";
    case OriginKind::kDeprecated:
      return "deprecated key";
    case OriginKind::kDerived:
      return "derived";
    case OriginKind::kRun:
      return "run";
  }
  return "?";
}

std::string FormatDiagnostic(const Diagnostic& d, std::string_view source) {
  std::string s(source);
  if (d.pos.line > 0) s += ":" + std::to_string(d.pos.line) + ":" + std::to_string(d.pos.column);
  s += ": ";
  s += SeverityName(d.severity);
  s += ": ";
  if (!d.path.empty()) s += d.path + ": ";
  s += d.message;
  return s;
}

size_t ConfigReport::Count(Severity s) const {
  size_t n = 0;
  for (const auto& d : diagnostics) n += d.severity == s ? 1 : 0;
  return n;
}

std::string ConfigReport::DescribeOrigin(std::string_view path) const {
  auto it = origins.find(std::string(path));
  if (it == origins.end()) return "default";
  std::string s(OriginKindName(it->second.kind));
  if (!it->second.detail.empty()) s += ": " + it->second.detail;
  return s;
}

}  // namespace strata
