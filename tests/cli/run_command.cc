#include "tests/cli/run_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace strata::testing {

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  char err_path[] = "/tmp/strata-cli-stderr-XXXXXX";
  int fd = mkstemp(err_path);
  if (fd >= 0) close(fd);
  FILE* p = popen((command + " 2>" + err_path).c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  unlink(err_path);
  return r;
}

}  // namespace strata::testing
