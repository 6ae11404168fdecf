#include "swap/swap_file_owner.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace strata {

int SwapFileLockHolder(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return -1;
  // A line: "1: FLOCK  ADVISORY  WRITE 12345 08:01:1234567 0 EOF" (device major:minor in hex).
  std::ifstream in("/proc/locks");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, kind, mode, access, pid, file;
    if (!(fields >> id >> kind >> mode >> access >> pid >> file) || kind != "FLOCK") continue;
    if (pid == "->") continue;  // a waiter, listed after the holder
    const size_t a = file.find(':'), b = file.rfind(':');
    if (a == std::string::npos || a == b) continue;
    const unsigned long maj = std::strtoul(file.substr(0, a).c_str(), nullptr, 16);
    const unsigned long min = std::strtoul(file.substr(a + 1, b - a - 1).c_str(), nullptr, 16);
    const unsigned long long ino = std::strtoull(file.substr(b + 1).c_str(), nullptr, 10);
    if (maj == major(st.st_dev) && min == minor(st.st_dev) && ino == st.st_ino) {
      const int p = std::atoi(pid.c_str());
      return p > 0 ? p : -1;
    }
  }
  return -1;
}

std::string DescribeProcess(int pid) {
  if (pid <= 0) return "another process (its pid is not visible from here)";
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
  for (char& c : cmd) {
    if (c == '\0') c = ' ';
  }
  if (cmd.size() > 160) cmd = cmd.substr(0, 157) + "...";
  return "pid " + std::to_string(pid) + (cmd.empty() ? "" : " (" + cmd + ")");
}

}  // namespace strata
