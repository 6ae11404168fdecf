// `strata report [--path DIR] [--json]`: what this build and machine support, one screen, each
// line ok / warning / missing with what to do (DeepSpeed's ds_report, for offload).
#include <cstdio>
#include <string>
#include <vector>

#include "core/flags.h"
#include "tools/strata/report/cmd_report_checks.h"
#include "tools/strata/subcommand.h"

namespace strata::cli {
namespace {

int RunReport(const std::vector<std::string>& args) {
  ReportOptions options;
  bool json = false;
  FlagParser flags("strata report [--path DIR] [--json]");
  flags.String("path", &options.path,
               "directory whose filesystem is checked (O_DIRECT, block sizes, free space): "
               "where nvme_path will point");
  flags.Bool("json", &json, "print one JSON object instead of the table");
  std::vector<std::string> positional;
  if (Status s = flags.Parse(args, &positional); !s.ok()) {
    std::fprintf(stderr, "strata report: %s\n", s.message().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  if (!positional.empty()) {
    std::fprintf(stderr, "strata report: unexpected argument '%s' (see --help)\n",
                 positional[0].c_str());
    return 2;
  }

  std::vector<CheckResult> checks = RunReportChecks(options);
  int counts[3] = {0, 0, 0};
  for (const CheckResult& c : checks) ++counts[static_cast<int>(c.level)];

  if (json) {
    nlohmann::json j;
    j["checks"] = nlohmann::json::array();
    for (const CheckResult& c : checks) {
      j["checks"].push_back({{"section", c.section},
                             {"name", c.name},
                             {"level", CheckLevelName(c.level)},
                             {"detail", c.detail},
                             {"advice", c.advice},
                             {"data", c.data}});
    }
    j["summary"] = {{"ok", counts[0]}, {"warning", counts[1]}, {"missing", counts[2]}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::string section;
  for (const CheckResult& c : checks) {
    if (c.section != section) {
      section = c.section;
      std::printf("%s%s\n", section == checks.front().section ? "" : "\n", section.c_str());
    }
    std::printf("  %-8s %-28s %s\n", CheckLevelName(c.level), c.name.c_str(), c.detail.c_str());
    if (!c.advice.empty()) std::printf("  %-8s %-28s -> %s\n", "", "", c.advice.c_str());
  }
  std::printf("\n%d ok, %d warning, %d missing\n", counts[0], counts[1], counts[2]);
  return 0;
}

}  // namespace
}  // namespace strata::cli

STRATA_SUBCOMMAND(report, "report", "what this machine and build support (ds_report)",
                  strata::cli::RunReport);
