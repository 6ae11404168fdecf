// strata: one program, subcommands like git or cargo (`strata --help` lists them).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/json_config.h"
#include "tools/strata/subcommand.h"

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "usage: strata <command> [args]   (strata <command> --help for its flags)\n\n"
               "commands:\n");
  for (const auto& c : strata::cli::Subcommands()) {
    std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  std::string closest;
  int closest_d = 3;
  for (const auto& c : strata::cli::Subcommands()) {
    if (name == c.name) return c.run(args);
    int d = strata::EditDistance(name, c.name);
    if (d < closest_d) closest_d = d, closest = c.name;
  }
  std::fprintf(stderr, "strata: unknown command '%s'%s; `strata --help` lists the commands\n",
               name.c_str(), closest.empty() ? "" : (" (did you mean '" + closest + "'?)").c_str());
  return 2;
}
