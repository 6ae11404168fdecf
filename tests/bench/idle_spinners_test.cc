// bench/overlap's sweep beside idle spinners (Note [A sweep beside idle spinners]): the spinners
// run at SCHED_IDLE, as the kernel reports each thread's policy, take CPU time, and are gone when
// the object is.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/overlap/bound_parts.h"

namespace strata::bench {
namespace {

struct TaskStat {
  int policy = -1;
  unsigned long long ticks = 0;  // utime + stime
};

// Every thread of this process as /proc/self/task/<tid>/stat gives it (field 41: the scheduling
// policy; 14 and 15: user and system time in clock ticks).
std::vector<TaskStat> Tasks() {
  std::vector<TaskStat> out;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    // Fields after the command name (which is in parentheses and may hold spaces), from field 3.
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::vector<std::string> fields(2, "");  // fields 1 and 2
    for (std::string x; rest >> x;) fields.push_back(x);
    if (fields.size() < 41) continue;
    TaskStat t;
    t.ticks = std::stoull(fields[13]) + std::stoull(fields[14]);
    t.policy = std::stoi(fields[40]);
    out.push_back(t);
  }
  ::closedir(d);
  return out;
}

int CountPolicy(const std::vector<TaskStat>& tasks, int policy) {
  int n = 0;
  for (const TaskStat& t : tasks) n += t.policy == policy ? 1 : 0;
  return n;
}

TEST(IdleSpinnersTest, SpinAtSchedIdleAndStopWithTheObject) {
  const size_t before = Tasks().size();
  EXPECT_EQ(CountPolicy(Tasks(), SCHED_IDLE), 0);
  {
    IdleSpinners spin(2);
    EXPECT_EQ(spin.idle_threads(), 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::vector<TaskStat> during = Tasks();
    EXPECT_EQ(during.size(), before + 2);
    EXPECT_EQ(CountPolicy(during, SCHED_IDLE), 2);
    unsigned long long idle_ticks = 0;
    for (const TaskStat& t : during) idle_ticks += t.policy == SCHED_IDLE ? t.ticks : 0;
    // This test's thread sleeps: the spinners have the cores (ticks are 10 ms; 300 ms of
    // spinning on two threads is ~60, asked here at a tenth of that).
    EXPECT_GT(idle_ticks, 5U);
  }
  const std::vector<TaskStat> after = Tasks();
  EXPECT_EQ(after.size(), before);
  EXPECT_EQ(CountPolicy(after, SCHED_IDLE), 0);
}

}  // namespace
}  // namespace strata::bench
