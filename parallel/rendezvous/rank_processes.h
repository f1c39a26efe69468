// Internal to `strata launch` (launcher.cpp): the plumbing of its rank
// processes. Starting one (its own process group, output into pipes), its
// output passed on as whole "[rank K] " lines, what its exit status says, and
// the launcher's own signals (caught into a pipe that its poll loop reads;
// SIGPIPE ignored so that a closed stdout never kills the job).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace strata::parallel::launch_internal {

// Writes all of s to fd (waiting out EAGAIN); if fd is gone (a closed
// stdout: `| head`), drops it, saying so once on stderr.
void write_all(int fd, const std::string& s);
// "strata launch: <msg>" on stderr.
void say(const std::string& msg);

// One of a rank's output streams: bytes in, whole prefixed lines out.
struct Stream {
  int fd = -1;      // read end of the pipe; -1 once closed
  int out_fd = -1;  // STDOUT_FILENO or STDERR_FILENO
  std::string prefix;
  std::string pending;  // an incomplete last line

  // Passes on the whole lines of `pending` (and the rest, with
  // flush_partial or once it is too long for a line).
  void emit_lines(bool flush_partial);
  // Reads what is available; returns false at end of file.
  bool read_available();
  void close();
};

// The names a user types (kill -TERM) for the signals that stop a job.
const char* stop_signal_name(int sig);
// "exited with status N" (with the signal's name when killed by one); the
// status a shell would give (128 + signal) in *code.
std::string describe_status(int wstatus, int* code);

// While alive: SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGTSTP are
// written as one byte each to write_fd, and SIGPIPE is ignored; the earlier
// dispositions come back when it is destroyed.
class SignalGuard {
 public:
  explicit SignalGuard(int write_fd);
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  // SIGCHLD, and the signals that stop a job (forwarded to the ranks).
  static constexpr size_t kCount = 6;
  static constexpr int kSignals[kCount] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGTSTP};
  struct sigaction old_[kCount];
  struct sigaction old_pipe_;
};

// Starts one rank: `program` with argv and envp, stdout and stderr into
// out_w and err_w, in a process group of its own. Returns its pid (-1 when
// fork failed); an exec failure makes it print exec_error_prefix and the
// reason, and exit 127 (not found) or 126.
pid_t spawn(const char* program, const std::vector<char*>& argv, const std::vector<char*>& envp, int out_w,
            int err_w, const std::string& exec_error_prefix);

}  // namespace strata::parallel::launch_internal
