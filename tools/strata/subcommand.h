// The `strata` program's subcommands (config, train, export, launch, report, estimate), like git
// or cargo. Each lives in its own cmd_<name>.cc and registers itself at start-up with
// STRATA_SUBCOMMAND, so adding one touches no shared file. A subcommand receives the words after
// its name and returns the process exit code (0 ok, 1 failed, 2 bad usage or invalid input); it
// prints errors as one line "strata <name>: <what>" on stderr.
#pragma once

#include <string>
#include <vector>

namespace strata::cli {

using SubcommandFn = int (*)(const std::vector<std::string>& args);

struct Subcommand {
  const char* name;
  const char* summary;  // one line for `strata --help`
  SubcommandFn run;
};

// Every registered subcommand, sorted by name.
std::vector<Subcommand> Subcommands();

struct SubcommandRegistrar {
  explicit SubcommandRegistrar(Subcommand command);
};

}  // namespace strata::cli

#define STRATA_SUBCOMMAND(ident, name, summary, fn) \
  static ::strata::cli::SubcommandRegistrar strata_subcommand_##ident({name, summary, fn})
