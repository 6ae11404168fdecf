// FlagParser: the one command-line parser for tools/ and bench/ ("--name value", "--name=value",
// boolean "--name" / "--no-name", "--" ending the flags). Each flag writes into a caller-owned
// variable; Parse reports every problem as InvalidArgument naming the flag and what it accepts,
// so a tool prints one line and exits non-zero. Byte sizes use core/units.h ("1M", "2G").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

class FlagParser {
 public:
  // `usage` is the first line of Help(), e.g. "strata config check FILE [options]".
  explicit FlagParser(std::string usage);

  // Registers a flag. `name` is without dashes ("block-size"); `help` is one line. `*out` keeps
  // its value as the default (shown in Help) unless the flag is given. Aliases: call again with
  // another name and the same pointer.
  void String(std::string name, std::string* out, std::string help);
  // A string restricted to `allowed`.
  void Choice(std::string name, std::string* out, std::vector<std::string> allowed,
              std::string help);
  void Int(std::string name, int64_t* out, std::string help, int64_t min_value = INT64_MIN,
           int64_t max_value = INT64_MAX);
  void Double(std::string name, double* out, std::string help);
  // A byte size ("64M", "2G", "4096").
  void Bytes(std::string name, uint64_t* out, std::string help);
  // "--name" sets true, "--no-name" sets false, "--name=true|false" too (WasSet tells if given).
  void Bool(std::string name, bool* out, std::string help);
  // A flag whose value is handed to `fn` (e.g. repeatable "--include A --include B").
  void Custom(std::string name, std::string value_name, std::function<Status(std::string_view)> fn,
              std::string help);

  // Parses argv[first..argc). Words that are not flags go to `positional` in order; after "--"
  // every word is positional (and `*after_dashdash`, if given, receives the index in
  // `positional` where they start). "--help"/"-h" sets help_requested() and stops.
  Status Parse(int argc, char** argv, int first, std::vector<std::string>* positional,
               size_t* after_dashdash = nullptr);
  // Same, on a vector of words.
  Status Parse(const std::vector<std::string>& args, std::vector<std::string>* positional,
               size_t* after_dashdash = nullptr);

  bool help_requested() const { return help_requested_; }
  // True if the flag (by its registered name) was given on the command line.
  bool WasSet(std::string_view name) const;
  // The usage line and one line per flag with its default.
  std::string Help() const;

 private:
  struct Flag {
    std::string name, value_name, help, default_text;
    bool is_bool = false;
    bool* bool_out = nullptr;
    std::function<Status(std::string_view)> set;
  };
  Flag* Find(std::string_view name);
  void Add(Flag flag);

  std::string usage_;
  std::vector<Flag> flags_;
  std::vector<std::string> set_;
  bool help_requested_ = false;
};

}  // namespace strata
