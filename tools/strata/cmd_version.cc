// `strata version`: the version and what this build has compiled in.
#include <cstdio>

#include "strata/config.h"
#include "tools/strata/subcommand.h"

namespace strata::cli {
namespace {

int RunVersion(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "strata version: takes no arguments\n");
    return 2;
  }
  std::printf("strata %s\n", STRATA_VERSION);
  return 0;
}

}  // namespace
}  // namespace strata::cli

STRATA_SUBCOMMAND(version, "version", "print the version", strata::cli::RunVersion);
