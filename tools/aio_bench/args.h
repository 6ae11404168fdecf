// aio_bench's command line: the flags (through core/flags.h) and what they mean for a run.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "tools/aio_bench/bench_runner.h"

namespace strata::aio_bench {

struct Args {
  std::string path;  // --path DIR: a scratch file in DIR, laid out, measured and removed
  std::string file;  // --file FILE: this file, kept
  std::string op = "both";
  std::string sweep;  // "", "quick" or "full"
  std::string json_out;
  PointSpec base;  // the point measured, or the base of a sweep
  bool json = false, emit_config = false, quiet = false;
  bool help = false;      // --help given: print help_text and exit 0
  std::string help_text;  // filled when help is set
};

// Parses the words after the program name. InvalidArgument naming the flag and what it allows.
// "--sweep" without a value means "--sweep full" (kept from before the flag parser).
Status ParseArgs(const std::vector<std::string>& words, Args* args);

}  // namespace strata::aio_bench
