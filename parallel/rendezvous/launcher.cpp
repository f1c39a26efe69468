#include "parallel/rendezvous/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "framework/error.h"
#include "parallel/rendezvous/rank_processes.h"
#include "parallel/rendezvous/store.h"
#include "parallel/socket/socket.h"

extern char** environ;

namespace strata::parallel {

namespace {

using namespace launch_internal;
using std::chrono::milliseconds;

// How long a rank's output pipes are still read after it exits (a process
// it left behind may hold them open).
constexpr milliseconds kDrainAfterExit{2000};
// How long parameter-server workers may still run after every server ended:
// a worker that said goodbye exits within moments.
constexpr milliseconds kOrphanGrace{10000};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;
  bool dropped = false;  // a parameter-server worker the job gave up, killed by this launcher
  int status = 0;  // exit code, or 128 + signal
  Deadline drain_until = Deadline::max();
  Stream out, err;
};

bool valid_master(const std::string& m) {
  const size_t colon = m.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == m.size()) return false;
  const std::string port = m.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const int p = std::stoi(port);
  return p >= 1 && p <= 65535;
}

}  // namespace

std::string random_token() {
  unsigned char bytes[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail<IoError>("cannot open /dev/urandom for a random STRATA_TOKEN: ", std::strerror(errno));
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::read(fd, bytes + got, sizeof(bytes) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail<IoError>("cannot read /dev/urandom for a random STRATA_TOKEN");
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

LaunchOptions resolve_launch_options(LaunchOptions o) {
  if (o.nproc < 1) fail<ConfigError>("strata launch: --nproc must be at least 1, got ", o.nproc);
  if (o.nnodes < 1) fail<ConfigError>("strata launch: --nnodes must be at least 1, got ", o.nnodes);
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    fail<ConfigError>("strata launch: --node-rank must be in 0..", o.nnodes - 1, " for --nnodes ", o.nnodes,
                      ", got ", o.node_rank);
  }
  if (o.timeout_s < 1) fail<ConfigError>("strata launch: --timeout must be at least 1 second, got ", o.timeout_s);
  if (o.servers < 0) fail<ConfigError>("strata launch: --servers must be 0 or more, got ", o.servers);
  if (o.servers > 0 && o.nnodes > 1) {
    fail<ConfigError>("strata launch: --servers starts parameter servers on a single node; across nodes start the "
                      "ranks with mpirun or srun and give `strata train --ps-servers K` (the last K ranks serve)");
  }
  if (o.command.empty()) {
    fail<ConfigError>("strata launch: no command given; usage: strata launch --nproc N -- COMMAND ARGS...");
  }
  if (o.token.empty()) {
    const char* t = std::getenv("STRATA_TOKEN");
    if (t && *t) o.token = t;
  }
  if (o.nnodes > 1) {
    if (o.master.empty()) {
      fail<ConfigError>("strata launch: --nnodes ", o.nnodes, " needs --master HOST:PORT, the address of node 0 "
                        "(where rank 0 serves the store), the same on every node");
    }
    if (o.token.empty()) {
      fail<ConfigError>("strata launch: --nnodes ", o.nnodes, " needs STRATA_TOKEN: export the same secret on "
                        "every node, e.g. STRATA_TOKEN=$(openssl rand -hex 16)");
    }
  }
  if (!o.master.empty() && !valid_master(o.master)) {
    fail<ConfigError>("strata launch: --master '", o.master, "' is not HOST:PORT with a port in 1..65535");
  }
  if (o.heartbeat_s >= 0 && o.heartbeat_s < 0.01) {
    fail<ConfigError>("strata launch: --heartbeat must be at least 0.01 seconds, got ", o.heartbeat_s);
  }
  if (o.heartbeat_timeout_s > 0) {
    double interval = o.heartbeat_s;
    if (interval < 0) {
      const char* v = std::getenv("STRATA_HEARTBEAT_S");
      interval = v && *v ? std::atof(v) : 1.0;
    }
    if (o.heartbeat_timeout_s < 2 * interval) {
      fail<ConfigError>("strata launch: --heartbeat-timeout ", o.heartbeat_timeout_s,
                        " must be at least twice the heartbeat interval (", interval,
                        " s), so that one late heartbeat does not fail the job; 0 turns heartbeats off");
    }
  }
  if (o.token.empty()) o.token = random_token();
  return o;
}

namespace {

std::string seconds_value(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

std::vector<std::string> rank_environment(const LaunchOptions& o, int local_rank) {
  const std::string store_host = o.store_host == StoreHost::kLauncher ? "launcher" : "rank0";
  std::vector<std::string> env = {"STRATA_RANK=" + std::to_string(o.node_rank * o.nproc + local_rank),
                                  "STRATA_WORLD_SIZE=" + std::to_string(o.nproc * o.nnodes + o.servers),
                                  "STRATA_LOCAL_RANK=" + std::to_string(local_rank),
                                  "STRATA_LOCAL_WORLD_SIZE=" + std::to_string(o.nproc + o.servers),
                                  "STRATA_MASTER=" + o.master,
                                  "STRATA_TOKEN=" + o.token,
                                  "STRATA_STORE_HOST=" + store_host,
                                  "STRATA_TIMEOUT_S=" + std::to_string(o.timeout_s)};
  if (o.servers > 0) env.push_back("STRATA_PS_SERVERS=" + std::to_string(o.servers));
  if (o.heartbeat_s >= 0) env.push_back("STRATA_HEARTBEAT_S=" + seconds_value(o.heartbeat_s));
  if (o.heartbeat_timeout_s >= 0) {
    env.push_back("STRATA_HEARTBEAT_TIMEOUT_S=" + seconds_value(o.heartbeat_timeout_s));
  }
  return env;
}

namespace {

// A single-node launch serves the store itself, on a port the system picks
// as it binds: the ranks, started next, get that address. Its thread keeps
// the launcher's signals blocked, so that they reach the main loop.
std::unique_ptr<StoreServer> serve_store(LaunchOptions& o) {
  sigset_t ours, previous;
  sigemptyset(&ours);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&ours, sig);
  pthread_sigmask(SIG_BLOCK, &ours, &previous);
  std::unique_ptr<StoreServer> server;
  try {
    server = std::make_unique<StoreServer>("127.0.0.1", 0, o.token);
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  o.master = "127.0.0.1:" + std::to_string(server->port());
  o.store_host = StoreHost::kLauncher;
  return server;
}

}  // namespace

int launch(const LaunchOptions& options) {
  LaunchOptions o = resolve_launch_options(options);
  std::unique_ptr<StoreServer> store;  // outlives every rank (declared before them)
  if (o.master.empty()) store = serve_store(o);

  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // In the child, /proc/self/exe is still the launcher's executable (fork
  // keeps it), even if the file was replaced since it started.
  const bool own = !o.own_command.empty() && o.command[0] == o.own_command;
  const char* program = own ? "/proc/self/exe" : o.command[0].c_str();

  // The inherited environment minus any STRATA_* variables we set.
  std::vector<std::string> base_env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    static const char* kOurs[] = {"STRATA_RANK",  "STRATA_WORLD_SIZE", "STRATA_LOCAL_RANK",
                                  "STRATA_LOCAL_WORLD_SIZE", "STRATA_MASTER", "STRATA_TOKEN",
                                  "STRATA_STORE_HOST", "STRATA_TIMEOUT_S"};
    const bool ours = std::find(std::begin(kOurs), std::end(kOurs), name) != std::end(kOurs) ||
                      (name == "STRATA_HEARTBEAT_S" && o.heartbeat_s >= 0) ||
                      (name == "STRATA_HEARTBEAT_TIMEOUT_S" && o.heartbeat_timeout_s >= 0);
    if (!ours) base_env.push_back(kv);
  }

  int sig_pipe[2];
  if (::pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) fail<Error>("strata launch: pipe: ", std::strerror(errno));
  // Declared before the guard so that the handlers are restored before the pipe closes.
  const Socket sig_read(sig_pipe[0], "signal pipe"), sig_write(sig_pipe[1], "signal pipe");
  SignalGuard guard(sig_pipe[1]);

  const int local_ranks = o.nproc + o.servers;
  std::vector<Child> children(local_ranks);
  auto signal_ranks = [&](int sig) {
    for (auto& c : children) {
      // A rank that exited may have left processes behind that hold its pipes.
      if (c.pid > 0 && (!c.exited || c.out.fd >= 0 || c.err.fd >= 0)) ::kill(-c.pid, sig);
    }
  };

  int started = 0;
  try {
    for (int local = 0; local < local_ranks; ++local) {
      Child& c = children[local];
      c.rank = o.node_rank * o.nproc + local;
      std::vector<std::string> env = base_env;
      for (auto& kv : rank_environment(o, local)) env.push_back(kv);
      std::vector<char*> envp;
      for (auto& kv : env) envp.push_back(const_cast<char*>(kv.c_str()));
      envp.push_back(nullptr);
      int out_p[2], err_p[2];
      if (::pipe2(out_p, O_CLOEXEC) != 0) fail<Error>("strata launch: pipe: ", std::strerror(errno));
      if (::pipe2(err_p, O_CLOEXEC) != 0) {
        ::close(out_p[0]);
        ::close(out_p[1]);
        fail<Error>("strata launch: pipe: ", std::strerror(errno));
      }
      const std::string exec_error =
          "strata launch: rank " + std::to_string(c.rank) + ": cannot run '" + o.command[0] + "': ";
      const pid_t pid = spawn(program, argv, envp, out_p[1], err_p[1], exec_error);
      const int fork_errno = errno;
      ::close(out_p[1]);
      ::close(err_p[1]);
      if (pid < 0) {
        ::close(out_p[0]);
        ::close(err_p[0]);
        fail<Error>("strata launch: cannot start rank ", c.rank, ": fork: ", std::strerror(fork_errno));
      }
      setpgid(pid, pid);  // also here, so signals sent before the child runs reach its group
      c.pid = pid;
      const std::string prefix = "[rank " + std::to_string(c.rank) + "] ";
      c.out = Stream{out_p[0], STDOUT_FILENO, prefix, ""};
      c.err = Stream{err_p[0], STDERR_FILENO, prefix, ""};
      set_nonblocking(c.out.fd);
      set_nonblocking(c.err.fd);
      ++started;
    }
  } catch (...) {
    for (int i = 0; i < started; ++i) {
      ::kill(-children[i].pid, SIGKILL);
      ::waitpid(children[i].pid, nullptr, 0);
      children[i].out.close();
      children[i].err.close();
    }
    throw;
  }

  int failed_rank = -1, failed_status = 0;
  bool interrupted = false, terminated = false, killed = false, silent_handled = false;
  int interrupt_signal = SIGINT;
  int first_nonzero = 0;
  int lost_workers = 0;  // parameter-server workers killed while the others went on
  size_t lost_seen = 0;  // entries of store->lost_ranks() acted on
  Deadline kill_at = Deadline::max();
  // Once every parameter server has ended, the workers still running have
  // said goodbye (and are exiting) or were dropped by the servers: those
  // left after this deadline are given up and killed.
  Deadline orphans_at = Deadline::max();
  bool orphans_handled = false;
  const auto is_worker = [&](const Child& c) { return o.servers > 0 && c.rank < o.nproc; };
  // Worker 0 tests, logs and writes the snapshots: the job cannot go on
  // without it. The store holds the path of its last snapshot.
  const auto worker0_note = [&](int rank) -> std::string {
    if (o.servers == 0 || rank != 0) return "";
    const std::optional<std::string> snap = store ? store->peek(kLastSnapshotKey) : std::nullopt;
    std::string note = "; parameter-server worker 0 tests, logs and writes the snapshots, so the job cannot go on "
                       "without it: ";
    if (snap && !snap->empty()) {
      note += "resume from its last snapshot with strata train ... --snapshot " + *snap;
    } else {
      note += "it had written no snapshot yet";
    }
    return note;
  };

  // Ctrl-Z (SIGTSTP): the ranks live in process groups of their own, out of
  // the terminal's reach, so the launcher stops them, then itself; `fg` (a
  // SIGCONT to the launcher) continues it here, and it continues them. The
  // store, inside this process, restarts the ranks' heartbeat clocks after
  // its own stall, so nobody is named silent for the time the job slept.
  auto suspend_job = [&]() {
    say("suspended (Ctrl-Z): the ranks are stopped too; `fg` (or kill -CONT " + std::to_string(::getpid()) +
        ") continues the job");
    signal_ranks(SIGSTOP);
    ::raise(SIGSTOP);
    signal_ranks(SIGCONT);
    say("continued: the ranks go on");
  };

  auto stop_others = [&]() {
    signal_ranks(SIGTERM);
    if (kill_at == Deadline::max()) kill_at = deadline_after(o.kill_grace);
  };

  for (;;) {
    // Reap every rank that has exited. Of those found together, one killed
    // by a signal goes first: it is more likely the cause than one that
    // exited with an error because that peer died (a worker reports its
    // dead server within microseconds of the server's end).
    std::vector<std::pair<Child*, int>> reaped;
    for (auto& c : children) {
      if (c.exited) continue;
      int ws = 0;
      if (::waitpid(c.pid, &ws, WNOHANG) == c.pid) reaped.emplace_back(&c, ws);
    }
    std::stable_partition(reaped.begin(), reaped.end(),
                          [](const std::pair<Child*, int>& e) { return WIFSIGNALED(e.second); });
    for (auto& [child, ws] : reaped) {
      Child& c = *child;
      c.exited = true;
      c.drain_until = deadline_after(kDrainAfterExit);
      const std::string what = describe_status(ws, &c.status);
      if (c.status == 0) continue;
      // A parameter-server worker that was killed, or given up and killed
      // here (its status is then not the job's, also while the job stops on
      // a signal): the servers drop it and train on with the others, unless
      // none is left. Not worker 0: the job cannot go on without it.
      if (is_worker(c) && c.rank != 0 && failed_rank < 0 &&
          (c.dropped || (WIFSIGNALED(ws) && !interrupted && !terminated))) {
        ++lost_workers;
        if (lost_workers < o.nproc) {
          say("worker rank " + std::to_string(c.rank) + " " + what + "; the parameter servers go on with the " +
              std::to_string(o.nproc - lost_workers) + " other worker" + (o.nproc - lost_workers == 1 ? "" : "s"));
          continue;
        }
      }
      if (first_nonzero == 0) first_nonzero = c.status;
      if (failed_rank < 0 && !interrupted && !terminated) {
        // The store may already know the cause: another rank that reported
        // its error (this one stopped because of it) or went silent.
        const std::optional<JobFailure> cause = store ? store->failure() : std::nullopt;
        failed_status = c.status;
        if (cause && cause->rank != c.rank && cause->kind != JobFailureKind::kConnectionLost) {
          failed_rank = cause->rank;
          say("rank " + std::to_string(c.rank) + " " + what + " after the job failed: " + cause->message +
              worker0_note(cause->rank) + "; stopping the other ranks");
        } else {
          failed_rank = c.rank;
          say("rank " + std::to_string(c.rank) + " " + what + worker0_note(c.rank) + "; stopping the other ranks");
        }
        stop_others();
      } else if (failed_rank >= 0 && WIFSIGNALED(ws) && !interrupted && !terminated &&
                 WTERMSIG(ws) != SIGTERM && !(killed && WTERMSIG(ws) == SIGKILL)) {
        // Killed by a signal this launcher did not send: another cause of
        // the failure, maybe the first, that would otherwise go unnamed.
        say("rank " + std::to_string(c.rank) + " " + what + ", a signal this launcher did not send");
      }
    }
    bool all_done = true;
    for (auto& c : children) {
      if (!c.exited || c.out.fd >= 0 || c.err.fd >= 0) all_done = false;
    }
    if (all_done) break;

    // A parameter-server worker whose heartbeats stopped was given up: kill
    // it (a stopped process does not act on SIGTERM), so that the servers
    // drop it at once and nothing waits for it.
    if (store && !terminated) {
      const std::vector<JobFailure> lost = store->lost_ranks();
      for (; lost_seen < lost.size(); ++lost_seen) {
        const JobFailure& f = lost[lost_seen];
        if (f.kind != JobFailureKind::kSilent) continue;  // it exited; its status is reaped below
        for (auto& c : children) {
          if (c.rank == f.rank && !c.exited) {
            say(f.message + "; killing it: the parameter servers drop it and go on without it");
            c.dropped = true;
            ::kill(-c.pid, SIGKILL);
          }
        }
      }
    }
    // (After a failure the others are stopped anyway, SIGKILL included.)
    if (o.servers > 0 && orphans_at == Deadline::max() && failed_rank < 0 && !terminated) {
      bool servers_done = true;
      for (auto& c : children) servers_done = servers_done && (is_worker(c) || c.exited);
      if (servers_done) orphans_at = deadline_after(kOrphanGrace);
    }
    if (!orphans_handled && failed_rank < 0 && !terminated && Clock::now() >= orphans_at) {
      orphans_handled = true;
      for (auto& c : children) {
        if (!is_worker(c) || c.exited) continue;
        say("worker rank " + std::to_string(c.rank) + " is still running " + format_duration(kOrphanGrace) +
            " after every parameter server ended (they gave it up: it is stopped or hung); killing it");
        c.dropped = true;
        ::kill(-c.pid, SIGKILL);
      }
    }

    // A rank whose heartbeats stopped cannot stop itself: kill it now (its
    // exit then stops the others, which also hear of it from the store).
    if (store && !silent_handled && !interrupted && !terminated) {
      const std::optional<JobFailure> f = store->failure();
      if (f && f->kind == JobFailureKind::kSilent) {
        silent_handled = true;
        for (auto& c : children) {
          if (c.rank == f->rank && !c.exited) {
            say(f->message + "; killing it");
            ::kill(-c.pid, SIGKILL);
          }
        }
      }
    }

    const Deadline now = Clock::now();
    if (!killed && now >= kill_at) {
      killed = true;
      int left = 0;
      for (auto& c : children) left += c.exited ? 0 : 1;
      if (left) say("ranks still running after " + format_duration(o.kill_grace) + "; sending SIGKILL");
      signal_ranks(SIGKILL);
    }
    for (auto& c : children) {
      if (c.exited && now >= c.drain_until) {
        if (c.out.fd >= 0) c.out.read_available();
        if (c.err.fd >= 0) c.err.read_available();
        c.out.close();
        c.err.close();
      }
    }

    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    fds.push_back({sig_pipe[0], POLLIN, 0});
    Deadline next = killed ? Deadline::max() : kill_at;
    if (!orphans_handled) next = std::min(next, orphans_at);
    for (auto& c : children) {
      for (Stream* s : {&c.out, &c.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
      if (c.exited) next = std::min(next, c.drain_until);
    }
    // SIGCHLD lands in the signal pipe, so exits wake the poll; the cap is a
    // safety net, and how often the store's failure record is looked at.
    const int cap = store ? 250 : 1000;
    const int timeout = std::min(next == Deadline::max() ? cap : std::max(1, remaining_ms(next)), cap);
    const int r = ::poll(fds.data(), fds.size(), timeout);
    if (r < 0 && errno != EINTR) fail<Error>("strata launch: poll: ", std::strerror(errno));
    if (r <= 0) continue;

    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t n;
      while ((n = ::read(sig_pipe[0], sigs, sizeof(sigs))) > 0) {
        for (ssize_t i = 0; i < n; ++i) {
          const int sig = sigs[i];
          if (sig == SIGTSTP) {
            suspend_job();
            continue;
          }
          if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP && sig != SIGUSR1) continue;
          // The first: every rank gets it and stops as it does on Ctrl-C
          // (`strata train` finishes the iteration the ranks agree on and
          // writes a snapshot). The second: the ranks are stopped now.
          if (!interrupted) {
            interrupted = true;
            interrupt_signal = sig;
            const std::string name = stop_signal_name(sig);
            say((sig == SIGINT ? std::string("interrupted") : name) + "; forwarding " + name +
                " to the ranks and waiting for them to stop (a second signal stops them now)");
            signal_ranks(sig);
          } else if (!terminated) {
            say(std::string(stop_signal_name(sig)) + " again; stopping the ranks now");
            terminated = true;
            stop_others();
          }
        }
      }
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      if (!fds[i + 1].revents) continue;
      if (!streams[i]->read_available()) streams[i]->close();
    }
  }

  if (failed_rank >= 0) return failed_status;
  if (terminated) return first_nonzero ? first_nonzero : 128 + SIGTERM;
  if (interrupted) return first_nonzero ? first_nonzero : 128 + interrupt_signal;
  if (lost_workers > 0) {
    say("finished with " + std::to_string(o.nproc - lost_workers) + " of " + std::to_string(o.nproc) +
        " workers (" + std::to_string(lost_workers) + " lost)");
    return 0;
  }
  return first_nonzero;
}

}  // namespace strata::parallel
