#include "tests/process_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

extern char** environ;

namespace strata::test {

pid_t spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const std::string& log_path) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    const size_t name_len = eq ? static_cast<size_t>(eq - *e) : std::strlen(*e);
    bool overridden = false;
    for (const auto& x : env) overridden |= x.compare(0, name_len + 1, std::string(*e, name_len) + "=") == 0;
    if (!overridden) envp.push_back(*e);
  }
  for (const auto& x : env) envp.push_back(const_cast<char*>(x.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  return pid;
}

int wait_for_process(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace strata::test
