#include "tools/strata/subcommand.h"

#include <algorithm>
#include <cstring>

namespace strata::cli {
namespace {
std::vector<Subcommand>& Registry() {
  static std::vector<Subcommand> registry;  // filled during static initialisation
  return registry;
}
}  // namespace

SubcommandRegistrar::SubcommandRegistrar(Subcommand command) { Registry().push_back(command); }

std::vector<Subcommand> Subcommands() {
  std::vector<Subcommand> out = Registry();
  std::sort(out.begin(), out.end(), [](const Subcommand& a, const Subcommand& b) {
    return std::strcmp(a.name, b.name) < 0;
  });
  return out;
}

}  // namespace strata::cli
