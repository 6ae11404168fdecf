#include "tests/cli/resume/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace strata::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& out_path,
                           const std::string& err_path, const std::vector<std::string>& env) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;  // built before fork: the child only execs
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(nullptr);
  pid_ = fork();
  if (pid_ != 0) return;
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out >= 0) dup2(out, STDOUT_FILENO);
  if (err >= 0) dup2(err, STDERR_FILENO);
  execve(args[0], args.data(), envp.data());
  _exit(127);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !done_) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

void ChildProcess::Signal(int sig) const {
  if (pid_ > 0 && !done_) kill(pid_, sig);
}

int ChildProcess::Wait() {
  if (done_ || pid_ <= 0) return code_;
  int st = 0;
  while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  done_ = true;
  killed_by_signal_ = WIFSIGNALED(st);
  code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return code_;
}

bool ChildProcess::Ended() {
  if (done_) return true;
  int st = 0;
  const pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r != pid_) return false;
  done_ = true;
  killed_by_signal_ = WIFSIGNALED(st);
  code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return true;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace strata::testing
