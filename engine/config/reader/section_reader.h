// Section: typed reads of one object of the config, with DeepSpeed's acceptance rules and
// Strata's diagnostics. Internal to engine/config.
//
// - A read never stops the check: a bad value is reported (path, line, column, what is allowed)
//   and the field keeps its default, so every problem in a file is listed at once.
// - Scalars are coerced the way pydantic does (DeepSpeed's schema): "8" -> 8, "1e-5" -> 1e-5,
//   "true"/"yes"/"on"/1 -> true, and whole floats (5e8) where an integer is meant.
// - "auto" is accepted only where a caller says it can be resolved (auto_ok); elsewhere it is an
//   error naming the key, since nothing would fill it in.
// - Every read records where the value came from (file, default, auto) for `config check`.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/reader/diagnostics.h"
#include "engine/config/reader/json_document.h"
#include "engine/config/reader/run_context.h"

namespace strata::internal {

// The closest of `candidates` to `key` (edit distance, the same words in another order, or one
// containing the other), or "" if none is close.
std::string ClosestKey(std::string_view key, const std::vector<std::string_view>& candidates);

// Shared state of one check: the document, the run, and the report being filled.
class ConfigContext {
 public:
  ConfigContext(const JsonDocument& doc, const RunContext& run, ConfigReport* report)
      : doc_(doc), run_(run), report_(report) {}

  const RunContext& run() const { return run_; }
  const JsonDocument& doc() const { return doc_; }

  void Add(Severity severity, const std::string& path, std::string message);
  void Error(const std::string& path, std::string message) {
    Add(Severity::kError, path, std::move(message));
  }
  void Warning(const std::string& path, std::string message) {
    Add(Severity::kWarning, path, std::move(message));
  }
  void Note(const std::string& path, std::string message) {
    Add(Severity::kNote, path, std::move(message));
  }
  void SetOrigin(const std::string& path, OriginKind kind, std::string detail = "");
  size_t ErrorCount() const { return report_->ErrorCount(); }

 private:
  const JsonDocument& doc_;
  const RunContext& run_;
  ConfigReport* report_;
};

// What a read found.
enum class Got { kAbsent, kValue, kAuto, kInvalid };

class Section {
 public:
  // `node` may be null (section absent) or a non-object (reported by the caller via Object()).
  Section(ConfigContext* ctx, const Json* node, std::string path)
      : ctx_(ctx), node_(node && node->is_object() ? node : nullptr), path_(std::move(path)) {}

  bool present() const { return node_ != nullptr; }
  const std::string& path() const { return path_; }
  ConfigContext* ctx() const { return ctx_; }
  std::string KeyPath(std::string_view key) const { return JoinPath(path_, key); }
  const Json* Get(std::string_view key) const;
  bool Has(std::string_view key) const { return Get(key) != nullptr; }
  bool IsAuto(std::string_view key) const;

  // Every key of the section outside `known` is an error with a "did you mean"; `hints` adds a
  // sentence for keys that belong elsewhere (e.g. "aio" -> "it is a top-level section").
  void CheckKeys(const std::vector<std::string_view>& known,
                 const std::map<std::string_view, std::string_view>& hints = {}) const;

  static constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  Got Int(std::string_view key, int64_t* out, int64_t min_value = 0, int64_t max_value = kMaxInt,
          bool auto_ok = false) const;
  Got Double(std::string_view key, double* out, double min_value = -kInf, double max_value = kInf,
             bool auto_ok = false) const;
  Got Bool(std::string_view key, bool* out, bool auto_ok = false) const;
  // A string restricted to `allowed` (exact, or ignoring case when `ignore_case`).
  Got Enum(std::string_view key, std::string* out, const std::vector<std::string_view>& allowed,
           bool ignore_case = false, bool auto_ok = false) const;
  Got String(std::string_view key, std::string* out) const;
  // A byte count: an integer or a size string ("2G", "512M", see core/units.h).
  Got Bytes(std::string_view key, uint64_t* out) const;

  // The object under `key` (not present when absent; an error when it is not an object).
  Section Object(std::string_view key) const;

 private:
  // Common prologue: absent -> default origin; "auto" -> ok or error. Returns kValue to go on.
  Got Begin(std::string_view key, bool auto_ok, const Json** value) const;

  ConfigContext* ctx_;
  const Json* node_;
  std::string path_;
};

}  // namespace strata::internal
