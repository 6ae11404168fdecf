// Runs a shell command for CLI tests and captures its stdout, stderr and exit code.
#pragma once

#include <string>

namespace strata::testing {

struct CommandResult {
  int exit_code = -1;  // the process's exit status, or -1 if it did not exit normally
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `command` with /bin/sh; stderr is captured through a temporary file.
CommandResult RunCommand(const std::string& command);

}  // namespace strata::testing
