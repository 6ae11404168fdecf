// A process for the crash tests to kill: trains the tiny Llama (stage 2, fp32, gas 1) and saves
// after every step.
//   checkpoint_crash_child DIR loop STEPS            saves steps 1..STEPS, then exits 0
//   checkpoint_crash_child DIR point NAME NTH TAG    SIGKILLs itself at crash point NAME of the
//                                                    NTH save (TAG "-": DeepSpeed's default tag)
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/checkpoint/checkpoint.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"

namespace {

std::string g_point;
int g_nth = 0;
int g_save = 0;

void CrashHook(std::string_view point) {
  if (g_save == g_nth && point == g_point) ::raise(SIGKILL);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s DIR loop STEPS | DIR point NAME NTH TAG\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1], mode = argv[2];
  int steps = 0;
  std::string tag;
  if (mode == "loop") {
    steps = std::atoi(argv[3]);
  } else if (mode == "point" && argc == 6) {
    g_point = argv[3];
    g_nth = std::atoi(argv[4]);
    tag = std::string(argv[5]) == "-" ? "" : argv[5];
    steps = g_nth;
    SetCheckpointCrashHookForTesting(&CrashHook);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(11, 64, 2, 16, 256);
  testing::EngineRun run = testing::MakeRun(*comm, {2, "none"}, 21, /*gas=*/1);
  if (run.engine == nullptr) return 1;
  for (int s = 0; s < steps; ++s) {
    testing::TrainAndGather(*run.engine, data, 1, 1, nullptr, static_cast<size_t>(s));
    ++g_save;
    if (Status st = run.engine->SaveCheckpoint(dir, tag); !st.ok()) {
      std::fprintf(stderr, "save: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
