// `strata launch`: DeepSpeed's launcher interface on OpenMPI's mpirun. The flags, hostfile syntax
// and defaults are DeepSpeed's (engine/comm/launch/launch_plan.h turns them into an mpirun
// command); mpirun then starts `strata launch --as_rank ...` once per slot, which sets the
// variables the engine reads (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; MASTER_ADDR/PORT come
// from mpirun -x), CUDA_VISIBLE_DEVICES for its node, pins itself to its share of the cores
// (hwloc), runs the program, writes its log (--log_dir) and reports how it ended. The top level
// forwards SIGINT/SIGTERM to every rank (Note [Signals through mpirun]) and ends with the first
// failing rank's exit code and a line naming it.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/flags.h"
#include "engine/comm/launch/core_binding.h"
#include "engine/comm/launch/launch_env.h"
#include "engine/comm/launch/launch_plan.h"
#include "tools/strata/subcommand.h"

namespace strata::cli {
namespace {

constexpr char kMarker[] = "@@strata-launch ";
volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_forwarded = 0;

// Note [Signals through mpirun]
// mpirun answers SIGTERM and SIGINT by ending the job: SIGTERM to every process, then SIGKILL
// one second later (odls_base_sigkill_timeout) - too soon for `strata train` to finish its step
// and save. SIGUSR1 and SIGUSR2 it forwards to every process and lets them end on their own. So
// the top level sends mpirun SIGUSR1 for a SIGTERM and SIGUSR2 for a SIGINT; each rank's
// `strata launch --as_rank` turns them back into SIGTERM / SIGINT for its program, whose ranks
// then agree on the step to stop after (tools/strata/train/cmd_train_signal.h). mpirun runs in
// a process group of its own, so a terminal's Ctrl-C reaches it only this way (its stdin is
// /dev/null: a background group may not read the terminal); so does each rank's program, as
// mpirun signals a rank's whole group, and the program must not see SIGUSR1 itself (it is
// SIGKILLed if its --as_rank parent dies, as it would have been with the group). A second signal
// goes the same way and ends the program at once.
void ForwardToMpirun(int sig) {
  g_forwarded = sig;
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig == SIGINT ? SIGUSR2 : SIGUSR1);
}

// In a rank: SIGUSR1 / SIGUSR2 from mpirun are the launcher's SIGTERM / SIGINT; a SIGTERM or
// SIGINT of its own (mpirun ending the job) is passed on as it is.
void ForwardToProgram(int sig) {
  const int to = sig == SIGUSR1 ? SIGTERM : sig == SIGUSR2 ? SIGINT : sig;
  g_forwarded = to;
  if (g_child > 0) kill(static_cast<pid_t>(g_child), to);
}

void InstallForwarding(void (*handler)(int), bool user_signals) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (user_signals) {
    sigaction(SIGUSR1, &sa, nullptr);
    sigaction(SIGUSR2, &sa, nullptr);
  }
}

int LaunchFail(const std::string& what, int code = 1) {
  std::fprintf(stderr, "strata launch: %s\n", what.c_str());
  return code;
}

enum class Group { kInherit, kOwnNoStdin, kOwnDiesWithParent };

// Forks and execs argv with stdout/stderr sent to the given fds (-1 = inherit), in a process
// group of its own unless kInherit (Note [Signals through mpirun]): mpirun with stdin /dev/null;
// a rank's program killed (SIGKILL) if its `strata launch --as_rank` dies.
pid_t Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd,
            Group group = Group::kInherit) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (group != Group::kInherit) setpgid(0, 0);
  if (group == Group::kOwnNoStdin) {
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  }
  if (group == Group::kOwnDiesWithParent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);  // the parent died before prctl
  }
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "strata launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
  _exit(127);
}

int Wait(pid_t pid, int* sig) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  *sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + *sig;
}

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w, n -= static_cast<size_t>(w);
  }
}

// Splits a pipe's bytes into lines and hands each (with its '\n') to `on_line`.
template <typename F>
bool Pump(int fd, std::string* partial, F&& on_line) {
  char buf[8192];
  const ssize_t n = read(fd, buf, sizeof(buf));
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) {
    if (!partial->empty()) on_line(*partial + "\n");
    partial->clear();
    return false;
  }
  partial->append(buf, static_cast<size_t>(n));
  for (size_t pos; (pos = partial->find('\n')) != std::string::npos;) {
    on_line(partial->substr(0, pos + 1));
    partial->erase(0, pos + 1);
  }
  return true;
}

// --- one rank, started by mpirun ----------------------------------------------------------------
int RunRank(const std::string& node_slots, bool set_cuda_visible, bool bind_cores,
            const std::string& log_dir, const std::vector<std::string>& program) {
  auto env = ReadLaunchEnv();
  if (!env.ok()) return LaunchFail(env.status().message());
  auto nodes = ParseNodeSlots(node_slots);
  if (!nodes.ok()) return LaunchFail(nodes.status().message(), 2);
  auto where = NodeOfRank(*nodes, env->rank);
  if (!where.ok()) return LaunchFail(where.status().message());
  const int rank = env->rank;
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(env->world_size).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(env->local_rank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(env->local_world_size).c_str(), 1);
  if (set_cuda_visible) {
    std::string list;
    for (int s : (*nodes)[static_cast<size_t>(where->first)].slots) {
      list += (list.empty() ? "" : ",") + std::to_string(s);
    }
    setenv("CUDA_VISIBLE_DEVICES", list.c_str(), 1);
  }
  if (bind_cores) {
    auto bound = BindToCoreShare(env->local_rank, env->local_world_size);
    if (!bound.ok()) {
      std::fprintf(stderr, "strata launch: rank %d: not pinned: %s\n", rank,
                   bound.status().message().c_str());
    }
  }
  int log_fd = -1, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (!log_dir.empty()) {
    const std::string path = log_dir + "/rank_" + std::to_string(rank) + ".log";
    log_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0)
      return LaunchFail("rank " + std::to_string(rank) + ": " + path + ": " + std::strerror(errno));
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
      return LaunchFail(std::string("pipe: ") + std::strerror(errno));
    }
  }
  InstallForwarding(&ForwardToProgram, /*user_signals=*/true);
  const pid_t child = Spawn(program, out_pipe[1], err_pipe[1], Group::kOwnDiesWithParent);
  if (child < 0) return LaunchFail(std::string("fork: ") + std::strerror(errno));
  g_child = child;
  if (log_fd >= 0) {
    close(out_pipe[1]);
    close(err_pipe[1]);
    // The log gets everything; the terminal gets rank 0's output and every rank's errors.
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    std::string out_partial, err_partial;
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    for (int open_fds = 2; open_fds > 0;) {
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        const bool more =
            Pump(fds[i].fd, i == 0 ? &out_partial : &err_partial, [&](const std::string& line) {
              WriteAll(log_fd, line.data(), line.size());
              if (i == 0 && rank == 0) {
                WriteAll(STDOUT_FILENO, line.data(), line.size());
              } else if (i == 1) {
                const std::string l = rank == 0 ? line : prefix + line;
                WriteAll(STDERR_FILENO, l.data(), l.size());
              }
            });
        if (!more) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
        }
      }
    }
    close(log_fd);
  }
  int sig = 0;
  const int code = Wait(child, &sig);
  if (code != 0) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const auto t_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
    std::fprintf(stderr, "%srank=%d code=%d signal=%d forwarded=%d t_ns=%lld host=%s\n", kMarker,
                 rank, code, sig, static_cast<int>(g_forwarded), static_cast<long long>(t_ns),
                 host);
  }
  return code;
}

// --- the launcher
// ---------------------------------------------------------------------------------
struct RankFailure {
  int rank = -1, code = 0, signal = 0;
  bool forwarded = false;
  long long t_ns = 0;
  std::string host;
};

bool ParseMarker(const std::string& line, RankFailure* f) {
  if (line.rfind(kMarker, 0) != 0) return false;
  std::istringstream in(line.substr(sizeof(kMarker) - 1));
  for (std::string kv; in >> kv;) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "rank") f->rank = std::atoi(v.c_str());
    if (k == "code") f->code = std::atoi(v.c_str());
    if (k == "signal") f->signal = std::atoi(v.c_str());
    if (k == "forwarded") f->forwarded = v != "0";
    if (k == "t_ns") f->t_ns = std::atoll(v.c_str());
    if (k == "host") f->host = v;
  }
  return f->rank >= 0;
}

int CountGpus() {
  std::error_code ec;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)e;
    ++n;
  }
  return n;
}

int RunLaunch(const std::vector<std::string>& args) {
  int64_t num_gpus = -1, num_procs = -1, num_nodes = -1, master_port = 29500;
  std::string hostfile = "/job/hostfile", include, exclude, master_addr, log_dir, node_slots;
  bool dry_run = false, bind_cores = true, as_rank = false, set_cuda_visible = false;
  FlagParser flags("strata launch [flags] -- PROGRAM ARGS   (DeepSpeed's launcher, on mpirun)");
  flags.Int("num_gpus", &num_gpus, "GPU ranks per node (default: every visible GPU)", -1, 1 << 16);
  flags.Int("num_procs", &num_procs, "N CPU ranks on this machine (no GPU handling)", -1, 1 << 16);
  flags.Int("num_nodes", &num_nodes, "use the first K hosts of the hostfile", -1, 1 << 16);
  flags.String("hostfile", &hostfile, "'HOST slots=N' lines (used if it exists)");
  flags.String("include", &include, "only these hosts/slots: \"host1:0,1@host2\"");
  flags.String("exclude", &exclude, "all but these hosts/slots: \"host1:0,1@host2\"");
  flags.String("master_addr", &master_addr, "MASTER_ADDR (default: first host)");
  flags.Int("master_port", &master_port, "MASTER_PORT", 1, 65535);
  flags.String("log_dir", &log_dir, "one log per rank (rank_R.log); terminal: rank 0 + errors");
  flags.Bool("bind_cores_to_rank", &bind_cores, "pin each local rank to its share of the cores");
  flags.Bool("dry-run", &dry_run, "print the mpirun command and exit");
  flags.Bool("dry_run", &dry_run, "same as --dry-run");
  flags.Bool("as_rank", &as_rank, "internal: run one rank (mpirun starts this)");
  flags.String("node_slots", &node_slots, "internal: HOST=S,S;... for --as_rank");
  flags.Bool("set_cuda_visible_devices", &set_cuda_visible, "internal: for --as_rank");
  std::vector<std::string> positional;
  if (Status s = flags.Parse(args, &positional); !s.ok()) return LaunchFail(s.message(), 2);
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  if (positional.empty())
    return LaunchFail("no program to launch (strata launch [flags] -- PROGRAM)", 2);
  if (as_rank) return RunRank(node_slots, set_cuda_visible, bind_cores, log_dir, positional);

  LaunchRequest req;
  req.num_gpus = static_cast<int>(num_gpus);
  req.num_procs = static_cast<int>(num_procs);
  req.num_nodes = static_cast<int>(num_nodes);
  req.include = include;
  req.exclude = exclude;
  req.master_addr = master_addr;
  req.master_port = static_cast<int>(master_port);
  req.log_dir = log_dir.empty() ? "" : std::filesystem::absolute(log_dir).string();
  req.bind_cores = bind_cores;
  req.program = positional;
  if (flags.WasSet("hostfile") || std::filesystem::exists(hostfile)) {
    std::ifstream in(hostfile);
    if (!in) return LaunchFail("--hostfile " + hostfile + ": cannot read it", 2);
    std::stringstream text;
    text << in.rdbuf();
    req.hostfile_text = text.str();
    req.hostfile_name = hostfile;
  }
  LaunchHost host;
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"); cvd != nullptr) {
    host.has_cuda_visible_devices = true;
    host.cuda_visible_devices = cvd;
  }
  host.gpu_count = CountGpus();
  cpu_set_t set;
  host.cpu_cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  host.is_root = geteuid() == 0;
  std::error_code ec;
  host.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) host.self_exe = "strata";
  auto plan = MakeLaunchPlan(req, host);
  if (!plan.ok()) return LaunchFail(plan.status().message(), 2);
  for (const auto& note : plan->notes) std::fprintf(stderr, "strata launch: %s\n", note.c_str());
  if (dry_run) {
    std::printf("%s\n", ShellJoin(plan->mpirun_argv).c_str());
    return 0;
  }
  if (!req.log_dir.empty()) {
    std::filesystem::create_directories(req.log_dir, ec);
    if (ec) return LaunchFail("--log_dir " + req.log_dir + ": " + ec.message(), 2);
  }
  std::fprintf(stderr, "strata launch: %d rank(s) on %s, master %s:%d\n", plan->world_size,
               FormatNodeSlots(plan->nodes).c_str(), plan->master_addr.c_str(),
               static_cast<int>(master_port));

  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0)
    return LaunchFail(std::string("pipe: ") + std::strerror(errno));
  InstallForwarding(&ForwardToMpirun, /*user_signals=*/false);
  const pid_t child = Spawn(plan->mpirun_argv, -1, err_pipe[1], Group::kOwnNoStdin);
  if (child < 0) return LaunchFail(std::string("fork: ") + std::strerror(errno));
  g_child = child;
  close(err_pipe[1]);
  std::vector<RankFailure> failures;
  std::string partial;
  while (Pump(err_pipe[0], &partial, [&](const std::string& line) {
    RankFailure f;
    if (ParseMarker(line, &f)) {
      failures.push_back(f);
    } else {
      WriteAll(STDERR_FILENO, line.data(), line.size());
    }
  })) {
  }
  close(err_pipe[0]);
  int sig = 0;
  const int mpirun_code = Wait(child, &sig);
  const RankFailure* first = nullptr;
  for (const auto& f : failures) {
    if (!f.forwarded && (first == nullptr || f.t_ns < first->t_ns)) first = &f;
  }
  if (first != nullptr) {
    std::string how = first->signal != 0 ? "killed by signal " + std::to_string(first->signal) +
                                               " (" + strsignal(first->signal) + ")"
                                         : "exit code " + std::to_string(first->code);
    std::fprintf(stderr, "strata launch: rank %d (%s) failed first: %s; job ended with code %d\n",
                 first->rank, first->host.c_str(), how.c_str(), first->code);
    return first->code;
  }
  if (g_forwarded != 0) {
    std::fprintf(stderr, "strata launch: stopped by signal %d (%s), forwarded to every rank\n",
                 static_cast<int>(g_forwarded), strsignal(g_forwarded));
    return 128 + g_forwarded;
  }
  if (mpirun_code != 0) {
    std::fprintf(stderr, "strata launch: mpirun failed with code %d before any rank reported\n",
                 mpirun_code);
  }
  return mpirun_code;
}

}  // namespace
}  // namespace strata::cli

STRATA_SUBCOMMAND(launch, "launch", "start ranks like the deepspeed launcher (on mpirun)",
                  strata::cli::RunLaunch);
