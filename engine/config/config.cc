#include "engine/config/config.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "engine/config/deepspeed/deepspeed_keys.h"
#include "engine/config/reader/section_reader.h"

namespace strata {
namespace {

Status ErrorsToStatus(const Config& c) {
  std::string m = std::to_string(c.report.ErrorCount()) + " error(s) in DeepSpeed config " +
                  c.report.source + ":";
  for (const auto& d : c.report.diagnostics) {
    if (d.severity == Severity::kError) m += "\n" + FormatDiagnostic(d, c.report.source);
  }
  return InvalidArgumentError(std::move(m));
}

}  // namespace

Config CheckConfigText(std::string_view text, std::string_view source_name, const RunContext& run) {
  Config c;
  c.report.source = std::string(source_name);
  Result<JsonDocument> doc = ParseJsonDocument(text, source_name);
  if (!doc.ok()) {
    // The message already says file:line:column; keep it whole.
    c.report.diagnostics.push_back({Severity::kError, "", {}, doc.status().message()});
    return c;
  }
  if (!doc->root.is_object()) {
    c.report.diagnostics.push_back(
        {Severity::kError, "", {1, 1}, "a DeepSpeed config is a JSON object ({...})"});
    return c;
  }
  internal::ConfigContext ctx(*doc, run, &c.report);
  if (run.world_size < 1) ctx.Error("", "the world size must be at least 1");
  internal::Section top(&ctx, &doc->root, "");

  // The strata section first: unknown_keys decides how the top level is checked.
  internal::ReadStrataSection(top, &c.strata, &c.aio);
  internal::ReadBatch(top, &c.batch);
  internal::ReadTrainingScalars(top, &c.training);
  internal::ReadOptimizer(top, &c.optimizer);
  internal::ReadScheduler(top, c.optimizer.lr, &c.scheduler);
  internal::ReadPrecision(top, &c.fp16, &c.bf16);
  internal::ReadZero(top, &c.zero);
  internal::ReadActivationCheckpointing(top, &c.activation_checkpointing);
  internal::CheckUnimplementedDeepSpeedKeys(top);
  std::vector<std::string_view> extra;
  if (top.Get("zero_optimization") && top.Get("zero_optimization")->is_boolean()) {
    extra.push_back("allgather_size");
  }
  internal::CheckUnknownTopLevelKeys(top, c.strata.unknown_keys_error, extra);
  // File order (diagnostics without a position last), so a reader walks the file once.
  std::stable_sort(c.report.diagnostics.begin(), c.report.diagnostics.end(),
                   [](const Diagnostic& a, const Diagnostic& b) {
                     auto key = [](const Diagnostic& d) {
                       return std::pair(d.pos.line == 0 ? 1 << 30 : d.pos.line, d.pos.column);
                     };
                     return key(a) < key(b);
                   });
  return c;
}

Config CheckConfigFile(const std::string& path, const RunContext& run) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    Config c;
    c.report.source = path;
    Status s = ErrnoToStatus(errno, "open DeepSpeed config " + path);
    c.report.diagnostics.push_back({Severity::kError, "", {}, s.message()});
    return c;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return CheckConfigText(text.str(), path, run);
}

Result<Config> LoadConfigText(std::string_view text, std::string_view source_name,
                              const RunContext& run) {
  Config c = CheckConfigText(text, source_name, run);
  if (c.report.ErrorCount() > 0) return ErrorsToStatus(c);
  return c;
}

Result<Config> LoadConfig(const std::string& path, const RunContext& run) {
  Config c = CheckConfigFile(path, run);
  if (c.report.ErrorCount() > 0) return ErrorsToStatus(c);
  return c;
}

}  // namespace strata
