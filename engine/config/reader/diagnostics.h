// What the config checker reports: diagnostics (errors, warnings, notes) that name the JSON path
// and point at a line and column, and the origin of every resolved value (the file, a default,
// "auto" and what it resolved to, a deprecated key).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/reader/json_document.h"

namespace strata {

enum class Severity {
  kError,    // the config cannot be used
  kWarning,  // used, but something is ignored or was spelt the old way
  kNote,     // a DeepSpeed feature Strata accepts and does not use
};

std::string_view SeverityName(Severity s);

struct Diagnostic {
  Severity severity = Severity::kError;
  std::string path;  // JSON path, "" for the whole file
  SourcePos pos;
  std::string message;
};

// "<source>:<line>:<column>: <severity>: <path>: <message>" (position and path left out when
// unknown).
std::string FormatDiagnostic(const Diagnostic& d, std::string_view source);

enum class OriginKind {
  kFile,        // written in the file
  kDefault,     // DeepSpeed's (or Strata's) default
  kAuto,        // "auto" in the file, resolved as `detail` says
  kDeprecated,  // set through an old key (`detail` names it)
  kDerived,     // computed from other keys (`detail` shows how)
  kRun,         // from the run (strata train flags / the model), `detail` says which
};

std::string_view OriginKindName(OriginKind k);

struct Origin {
  OriginKind kind = OriginKind::kDefault;
  std::string detail;
};

// Everything the checker found about one file.
struct ConfigReport {
  std::string source;
  std::vector<Diagnostic> diagnostics;    // in file order
  std::map<std::string, Origin> origins;  // resolved key path -> where its value came from

  size_t Count(Severity s) const;
  size_t ErrorCount() const { return Count(Severity::kError); }
  // "file" / "default" / "auto → hidden² = 16777216" ..., "default" for an unknown path.
  std::string DescribeOrigin(std::string_view path) const;
};

}  // namespace strata
