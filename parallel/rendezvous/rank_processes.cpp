#include "parallel/rendezvous/rank_processes.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace strata::parallel::launch_internal {

namespace {

// A long line with no newline is passed on in pieces of this size.
constexpr size_t kMaxLine = 64 << 10;

int g_signal_pipe = -1;

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe, &b, 1);
  errno = saved;
}

std::string signal_name(int sig) {
  const char* name = strsignal(sig);
  return name ? name : "unknown signal";
}

}  // namespace

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      // Our own output is gone (its reader ended, e.g. `| head`): the job
      // goes on, its output dropped; said once, where stderr still reads.
      static bool said = false;
      if (fd == STDOUT_FILENO && errno == EPIPE && !said) {
        said = true;
        const std::string note =
            "strata launch: standard output was closed by its reader (e.g. `| head` ended); the job goes on, "
            "the ranks' output is dropped\n";
        [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, note.data(), note.size());
      }
      return;
    }
  }
}

void say(const std::string& msg) { write_all(STDERR_FILENO, "strata launch: " + msg + "\n"); }

void Stream::emit_lines(bool flush_partial) {
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t nl = pending.find('\n', start);
    if (nl == std::string::npos) break;
    out += prefix;
    out.append(pending, start, nl + 1 - start);
    start = nl + 1;
  }
  pending.erase(0, start);
  if (!pending.empty() && (flush_partial || pending.size() >= kMaxLine)) {
    out += prefix + pending + "\n";
    pending.clear();
  }
  // One write per batch of whole lines: lines from different ranks never mix.
  if (!out.empty()) write_all(out_fd, out);
}

bool Stream::read_available() {
  char buf[16 << 10];
  for (int round = 0; round < 8; ++round) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      pending.append(buf, static_cast<size_t>(n));
      emit_lines(false);
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    return false;
  }
  return true;
}

void Stream::close() {
  if (fd < 0) return;
  emit_lines(true);
  ::close(fd);
  fd = -1;
}

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

std::string describe_status(int wstatus, int* code) {
  if (WIFEXITED(wstatus)) {
    *code = WEXITSTATUS(wstatus);
    return "exited with status " + std::to_string(*code);
  }
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    *code = 128 + sig;
    return "exited with status " + std::to_string(*code) + " (killed by signal " + std::to_string(sig) + ", " +
           signal_name(sig) + ")";
  }
  *code = 1;
  return "exited abnormally";
}

SignalGuard::SignalGuard(int write_fd) {
  g_signal_pipe = write_fd;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_NOCLDSTOP;
  for (size_t i = 0; i < kCount; ++i) sigaction(kSignals[i], &sa, &old_[i]);
  // Output piped into a reader that ends (`| head`) must not kill the job:
  // a write then fails with EPIPE and the output is dropped (write_all).
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &old_pipe_);
}

SignalGuard::~SignalGuard() {
  for (size_t i = 0; i < kCount; ++i) sigaction(kSignals[i], &old_[i], nullptr);
  sigaction(SIGPIPE, &old_pipe_, nullptr);
  g_signal_pipe = -1;
}

// Everything the child needs is prepared before fork, so that between fork
// and exec it only makes system calls.
pid_t spawn(const char* program, const std::vector<char*>& argv, const std::vector<char*>& envp, int out_w,
            int err_w, const std::string& exec_error_prefix) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // Child. Its own process group: the terminal's Ctrl-C goes to the
  // launcher only, which forwards it once; and stopping a rank stops
  // everything it started (sh -c 'a; b').
  setpgid(0, 0);
  // If the launcher dies without cleaning up, the ranks must not live on.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, STDIN_FILENO);
  dup2(out_w, STDOUT_FILENO);
  dup2(err_w, STDERR_FILENO);
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) sigaction(sig, &sa, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execvpe(program, argv.data(), envp.data());
  const int err = errno;
  const char* reason = strerror(err);
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, exec_error_prefix.data(), exec_error_prefix.size());
  n = ::write(STDERR_FILENO, reason, std::strlen(reason));
  n = ::write(STDERR_FILENO, "\n", 1);
  _exit(err == ENOENT ? 127 : 126);
}

}  // namespace strata::parallel::launch_internal
