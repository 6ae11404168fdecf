// A `strata` process a test starts, signals and waits for (tests of what a user does after a
// kill or a preemption): its stdout and stderr go to files the test reads afterwards.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace strata::testing {

class ChildProcess {
 public:
  // Starts `argv` (argv[0] a path) with stdout to `out_path` and stderr to `err_path`, and
  // `env` ("NAME=value") added to this process's environment.
  ChildProcess(const std::vector<std::string>& argv, const std::string& out_path,
               const std::string& err_path, const std::vector<std::string>& env = {});
  ~ChildProcess();  // SIGKILLs and reaps a child still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig) const;
  // Waits for the end: the exit code, or 128 + signal for a child killed by a signal.
  int Wait();
  // True once the child has ended (reaps it; Wait() then returns at once).
  bool Ended();
  bool killed_by_signal() const { return killed_by_signal_; }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  bool killed_by_signal_ = false;
  int code_ = -1;
};

// The whole text of a file ("" if it does not exist).
std::string ReadText(const std::string& path);

}  // namespace strata::testing
