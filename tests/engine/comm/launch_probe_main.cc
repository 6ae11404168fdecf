// launch_probe: the program `strata launch` starts in its tests. Prints what a rank sees, then
// behaves as asked:
//   launch_probe [--fail_rank R --code C] [--kill_rank R]
// The failing/killed rank acts at once; the others sleep long enough to be stopped by the launcher.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/flags.h"

int main(int argc, char** argv) {
  int64_t fail_rank = -1, code = 1, kill_rank = -1;
  strata::FlagParser flags("launch_probe [--fail_rank R --code C] [--kill_rank R]");
  flags.Int("fail_rank", &fail_rank, "rank that exits with --code");
  flags.Int("code", &code, "exit code of --fail_rank", 0, 255);
  flags.Int("kill_rank", &kill_rank, "rank that kills itself with SIGKILL");
  std::vector<std::string> rest;
  if (strata::Status s = flags.Parse(argc, argv, 1, &rest); !s.ok()) {
    std::fprintf(stderr, "launch_probe: %s\n", s.message().c_str());
    return 2;
  }
  auto get = [](const char* n) {
    const char* v = std::getenv(n);
    return std::string(v ? v : "-");
  };
  const int rank = std::atoi(get("RANK").c_str());
  std::printf("probe rank=%s world=%s local=%s/%s master=%s:%s cvd=%s\n", get("RANK").c_str(),
              get("WORLD_SIZE").c_str(), get("LOCAL_RANK").c_str(), get("LOCAL_WORLD_SIZE").c_str(),
              get("MASTER_ADDR").c_str(), get("MASTER_PORT").c_str(),
              get("CUDA_VISIBLE_DEVICES").c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "probe stderr from rank %d\n", rank);
  if (rank == kill_rank) raise(SIGKILL);
  if (rank == fail_rank) return static_cast<int>(code);
  if (fail_rank >= 0 || kill_rank >= 0) std::this_thread::sleep_for(std::chrono::seconds(30));
  return 0;
}
