// The checks behind `strata report`: what this build and machine support for offloaded training
// (ds_report's question), each with a verdict and, when not ok, what to do about it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::cli {

enum class CheckLevel { kOk, kWarning, kMissing };
const char* CheckLevelName(CheckLevel level);  // "ok", "warning", "missing"

struct CheckResult {
  std::string section;  // "build", "devices", "io", "cpu", "memory"
  std::string name;     // e.g. "io_uring"
  CheckLevel level = CheckLevel::kOk;
  std::string detail;                              // what was found
  std::string advice;                              // what to do, for a warning or missing
  nlohmann::json data = nlohmann::json::object();  // machine-readable figures for --json
};

struct ReportOptions {
  std::string path = ".";  // directory whose filesystem is checked for O_DIRECT and space
};

// Runs every check. Never fails as a whole: a check that cannot run reports itself as missing
// or warning with the reason.
std::vector<CheckResult> RunReportChecks(const ReportOptions& options);

// The io section (io_uring and its features, libaio, O_DIRECT and space at options.path),
// appended to `out`; cmd_report_io.cc.
void AddIoChecks(const ReportOptions& options, std::vector<CheckResult>* out);

}  // namespace strata::cli
