// `strata config check FILE`: checks a DeepSpeed config the way `strata train` reads it and
// prints the resolved values with where each came from, every warning and every error.
// Exit 0 when valid, 2 when not (every error listed) or on bad usage.
#include <cstdio>
#include <string>
#include <vector>

#include "core/flags.h"
#include "engine/config/config.h"
#include "engine/config/config_json.h"
#include "tools/strata/subcommand.h"

namespace strata::cli {
namespace {

constexpr const char* kConfigUsage =
    "strata config check FILE [--world-size N] [--json] [run flags]\n"
    "  Checks a DeepSpeed JSON config as strata train reads it: every value with its origin,\n"
    "  every warning, every error (JSON path, line, column, did-you-mean). Exit 0 valid, 2 not.\n"
    "  The run flags fill in \"auto\" values as strata train's flags and model would.";

int RunCheck(const std::vector<std::string>& args) {
  FlagParser flags(kConfigUsage);
  int64_t world = 1, micro = 0, accum = 0, hidden = 0, total = 0, warmup = -1;
  double lr = 0;
  std::string precision;
  bool json = false;
  flags.Int("world-size", &world, "data-parallel ranks (the batch arithmetic)", 1);
  flags.Bool("json", &json, "print the resolved config as JSON (every key, no \"auto\")");
  flags.Int("micro-batch", &micro, "the run's micro batch per GPU (fills \"auto\")", 1);
  flags.Int("grad-accum", &accum, "the run's gradient accumulation steps (fills \"auto\")", 1);
  flags.Int("hidden-size", &hidden, "the model's hidden size (hidden-size-based \"auto\")", 1);
  flags.Double("lr", &lr, "the run's learning rate (fills \"auto\")");
  flags.Int("total-steps", &total, "the run's optimizer steps (scheduler total_num_steps)", 1);
  flags.Int("warmup-steps", &warmup, "the run's warmup steps (scheduler warmup_num_steps)", 0);
  flags.Choice("precision", &precision, {"fp32", "fp16", "bf16"},
               "the run's precision (fills fp16/bf16 \"enabled\": \"auto\")");
  std::vector<std::string> files;
  if (Status s = flags.Parse(args, &files); !s.ok()) {
    std::fprintf(stderr, "strata config check: %s\n", s.message().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (files.size() != 1) {
    std::fprintf(stderr, "strata config check: expected one config file, got %zu; usage: %s\n",
                 files.size(), "strata config check FILE [--world-size N] [--json]");
    return 2;
  }
  RunContext run;
  run.world_size = world;
  run.require_run_values = false;
  if (flags.WasSet("micro-batch")) run.micro_batch_per_gpu = micro;
  if (flags.WasSet("grad-accum")) run.gradient_accumulation_steps = accum;
  if (flags.WasSet("hidden-size")) run.hidden_size = hidden;
  if (flags.WasSet("lr")) run.learning_rate = lr;
  if (flags.WasSet("total-steps")) {
    run.total_num_steps = total;
    run.require_run_values = true;
  }
  if (flags.WasSet("warmup-steps")) run.warmup_num_steps = warmup;
  if (flags.WasSet("precision")) run.precision = precision;

  Config config = CheckConfigFile(files[0], run);
  const ConfigReport& r = config.report;
  if (json) {
    for (const auto& d : r.diagnostics) {
      std::fprintf(stderr, "%s\n", FormatDiagnostic(d, r.source).c_str());
    }
    if (r.ErrorCount() > 0) return 2;
    std::printf("%s\n", ConfigToJson(config).dump(2).c_str());
    return 0;
  }
  std::fputs(FormatConfigView(config).c_str(), r.ErrorCount() ? stderr : stdout);
  return r.ErrorCount() > 0 ? 2 : 0;
}

int RunConfig(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fprintf(args.empty() ? stderr : stdout, "usage: %s\n", kConfigUsage);
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "check") {
    std::fprintf(stderr, "strata config: unknown action '%s'; the action is 'check'\n",
                 args[0].c_str());
    return 2;
  }
  return RunCheck(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace
}  // namespace strata::cli

STRATA_SUBCOMMAND(config, "config", "check a DeepSpeed config: `strata config check FILE`",
                  strata::cli::RunConfig);
