// `strata launch` end to end (the built binary runs small sh scripts as
// ranks), and detect_rank_env for the three launchers it understands.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "framework/error.h"
#include "parallel/backends/communicator_factory.h"
#include "parallel/rendezvous/env.h"
#include "parallel/rendezvous/launcher.h"
#include "tests/test_util.h"

extern char** environ;

namespace strata::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool has_prefix(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// The test's environment without any STRATA_* variable (the suite itself
// may run under a launcher), plus `extra`.
std::vector<std::string> clean_env(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (!has_prefix(*e, "STRATA_")) env.push_back(*e);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// A child process with captured stdout/stderr and a hard time limit.
class Proc {
 public:
  Proc(const std::vector<std::string>& args, const std::vector<std::string>& env) : t0_(Clock::now()) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~Proc() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  double elapsed() const { return seconds_since(t0_); }

  // Reads output until pred() holds or the time is up; returns pred().
  bool read_until(const std::function<bool()>& pred, double timeout_s) {
    const auto t0 = Clock::now();
    while (!pred()) {
      if (seconds_since(t0) > timeout_s || (out_fd_ < 0 && err_fd_ < 0)) return pred();
      pump(50);
    }
    return true;
  }

  // Waits for exit (reading output to the end); SIGKILL after timeout_s.
  // Returns the exit code, 128+N for signal N, or -1 on timeout.
  int wait(double timeout_s) {
    const auto t0 = Clock::now();
    while (out_fd_ >= 0 || err_fd_ >= 0) {
      if (seconds_since(t0) > timeout_s) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        reaped_ = true;
        return -1;
      }
      pump(100);
    }
    int ws = 0;
    for (;;) {
      if (waitpid(pid_, &ws, WNOHANG) == pid_) break;
      if (seconds_since(t0) > timeout_s) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        reaped_ = true;
        return -1;
      }
      usleep(10000);
    }
    reaped_ = true;
    if (WIFEXITED(ws)) return WEXITSTATUS(ws);
    if (WIFSIGNALED(ws)) return 128 + WTERMSIG(ws);
    return -2;
  }

 private:
  void pump(int ms) {
    std::vector<pollfd> fds;
    if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
    if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
    if (fds.empty()) return;
    if (poll(fds.data(), fds.size(), ms) <= 0) return;
    for (auto& p : fds) {
      if (!p.revents) continue;
      char buf[4096];
      const ssize_t n = read(p.fd, buf, sizeof(buf));
      std::string& dst = p.fd == out_fd_ ? out_ : err_;
      if (n > 0) {
        dst.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(p.fd);
        (p.fd == out_fd_ ? out_fd_ : err_fd_) = -1;
      }
    }
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  Clock::time_point t0_;
};

std::vector<std::string> launch_args(const std::vector<std::string>& flags, const std::string& script) {
  std::vector<std::string> a = {STRATA_BINARY, "launch"};
  a.insert(a.end(), flags.begin(), flags.end());
  a.insert(a.end(), {"--", "/bin/sh", "-c", script});
  return a;
}

using strata::test::TempDir;

bool alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

std::optional<pid_t> read_pid(const std::string& path) {
  std::ifstream f(path);
  long pid = 0;
  if (f >> pid && pid > 0) return static_cast<pid_t>(pid);
  return std::nullopt;
}

const char* kPrintEnv =
    "echo \"R=$STRATA_RANK W=$STRATA_WORLD_SIZE L=$STRATA_LOCAL_RANK LW=$STRATA_LOCAL_WORLD_SIZE "
    "M=$STRATA_MASTER T=$STRATA_TOKEN TO=$STRATA_TIMEOUT_S\"; echo \"err-$STRATA_RANK\" >&2";

TEST(ParallelLaunch, ThreeRanksSeeTheirEnvironment) {
  Proc p(launch_args({"--nproc", "3", "--timeout", "42"}, kPrintEnv), clean_env());
  ASSERT_EQ(p.wait(60), 0) << p.out() << p.err();
  const std::regex line_re(
      R"(\[rank (\d)\] R=(\d) W=3 L=(\d) LW=3 M=127\.0\.0\.1:(\d+) T=([0-9a-f]{32}) TO=42)");
  std::set<int> ranks;
  std::set<std::string> tokens, masters;
  const auto out = lines_of(p.out());
  ASSERT_EQ(out.size(), 3u) << p.out();
  for (const auto& line : out) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << line;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_EQ(m[2], m[3]);  // one node: local rank == rank
    ranks.insert(std::stoi(m[1]));
    masters.insert(m[4]);
    tokens.insert(m[5]);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(masters.size(), 1u);
  EXPECT_EQ(tokens.size(), 1u);
  std::set<std::string> err_lines;
  for (const auto& line : lines_of(p.err())) err_lines.insert(line);
  EXPECT_EQ(err_lines, (std::set<std::string>{"[rank 0] err-0", "[rank 1] err-1", "[rank 2] err-2"})) << p.err();
}

// Launches side by side, each with its own store on a port the system
// picked as the launcher bound it: no two can collide, and every rank of
// every launch joins its own store (an allreduce across its ranks).
TEST(ParallelLaunch, ConcurrentLaunchesEachServeTheirOwnStore) {
  constexpr int kLaunches = 4;
  std::vector<std::unique_ptr<Proc>> procs;
  for (int i = 0; i < kLaunches; ++i) {
    procs.push_back(std::make_unique<Proc>(
        std::vector<std::string>{STRATA_BINARY, "launch", "--nproc", "2", "--timeout", "60", "--",
                                 STRATA_PARALLEL_WORKER, "ping", "tree"},
        clean_env({"STRATA_SHM=0"})));
  }
  std::set<std::string> masters;
  for (int i = 0; i < kLaunches; ++i) {
    Proc& p = *procs[static_cast<size_t>(i)];
    ASSERT_EQ(p.wait(120), 0) << "launch " << i << ":\n" << p.out() << p.err();
    for (int r = 0; r < 2; ++r) {
      EXPECT_NE(p.out().find("[rank " + std::to_string(r) + "] rank " + std::to_string(r) + ": ping ok"),
                std::string::npos)
          << p.out() << p.err();
    }
    std::smatch m;
    ASSERT_TRUE(std::regex_search(p.out(), m, std::regex("store 127\\.0\\.0\\.1:(\\d+) \\(launcher\\)")))
        << p.out();
    masters.insert(m[1]);
  }
  EXPECT_EQ(masters.size(), static_cast<size_t>(kLaunches)) << "two launches shared a store port";
}

TEST(ParallelLaunch, MultiNodeRanksAndGivenTokenAndMaster) {
  Proc p(launch_args({"--nproc", "2", "--nnodes", "3", "--node-rank", "1", "--master", "node-a:29500"}, kPrintEnv),
         clean_env({"STRATA_TOKEN=shared-secret"}));
  ASSERT_EQ(p.wait(60), 0) << p.out() << p.err();
  std::set<std::string> out;
  for (const auto& line : lines_of(p.out())) out.insert(line);
  EXPECT_EQ(out, (std::set<std::string>{
                     "[rank 2] R=2 W=6 L=0 LW=2 M=node-a:29500 T=shared-secret TO=300",
                     "[rank 3] R=3 W=6 L=1 LW=2 M=node-a:29500 T=shared-secret TO=300"}))
      << p.out();
}

TEST(ParallelLaunch, MultiNodeWithoutTokenIsAnError) {
  Proc p(launch_args({"--nproc", "2", "--nnodes", "2", "--node-rank", "0", "--master", "node-a:29500"}, "true"),
         clean_env());
  EXPECT_EQ(p.wait(30), 1);
  EXPECT_NE(p.err().find("STRATA_TOKEN"), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("every node"), std::string::npos) << p.err();
}

TEST(ParallelLaunch, BadFlagsAreErrors) {
  {
    Proc p({STRATA_BINARY, "launch", "--nproc", "2"}, clean_env());
    EXPECT_EQ(p.wait(30), 1);
    EXPECT_NE(p.err().find("no command"), std::string::npos) << p.err();
  }
  {
    Proc p({STRATA_BINARY, "launch", "--", "true"}, clean_env());
    EXPECT_EQ(p.wait(30), 1);
    EXPECT_NE(p.err().find("--nproc is required"), std::string::npos) << p.err();
  }
  {
    Proc p(launch_args({"--nproc", "2", "--nnodes", "2", "--node-rank", "2", "--master", "a:1"}, "true"),
           clean_env({"STRATA_TOKEN=x"}));
    EXPECT_EQ(p.wait(30), 1);
    EXPECT_NE(p.err().find("--node-rank"), std::string::npos) << p.err();
  }
  {
    Proc p(launch_args({"--nproc", "1", "--master", "nohostport"}, "true"), clean_env());
    EXPECT_EQ(p.wait(30), 1);
    EXPECT_NE(p.err().find("HOST:PORT"), std::string::npos) << p.err();
  }
}

TEST(ParallelLaunch, HelpListsTheFlags) {
  Proc p({STRATA_BINARY, "launch", "--help"}, clean_env());
  ASSERT_EQ(p.wait(30), 0);
  for (const char* flag : {"--nproc", "--nnodes", "--node-rank", "--master", "--timeout", "STRATA_RANK"}) {
    EXPECT_NE(p.out().find(flag), std::string::npos) << flag << "\n" << p.out();
  }
}

TEST(ParallelLaunch, PartialLinesAreJoinedNotInterleaved) {
  // Each rank writes its line in three pieces with pauses, and ends with an
  // unterminated line.
  const std::string script =
      "printf 'start-%s-' $STRATA_RANK; sleep 0.1; printf 'middle-'; sleep 0.1; printf 'end\\n'; "
      "printf 'tail-%s' $STRATA_RANK";
  Proc p(launch_args({"--nproc", "3"}, script), clean_env());
  ASSERT_EQ(p.wait(60), 0) << p.err();
  std::set<std::string> out;
  for (const auto& line : lines_of(p.out())) out.insert(line);
  EXPECT_EQ(out, (std::set<std::string>{"[rank 0] start-0-middle-end", "[rank 1] start-1-middle-end",
                                        "[rank 2] start-2-middle-end", "[rank 0] tail-0", "[rank 1] tail-1",
                                        "[rank 2] tail-2"}))
      << p.out();
}

TEST(ParallelLaunch, FailingRankStopsTheOthers) {
  TempDir dir("strata_launch_test");
  // Ranks 0 and 2 record their pid and sleep; rank 1 waits until they have,
  // then fails with status 3.
  const std::string d = dir.path();
  const std::string script =
      "if [ \"$STRATA_RANK\" = 1 ]; then "
      "  while [ ! -f " + d + "/pid.0 ] || [ ! -f " + d + "/pid.2 ]; do sleep 0.02; done; "
      "  echo 'rank 1 fails' >&2; exit 3; "
      "fi; "
      "echo $$ > " + d + "/tmp.$STRATA_RANK; mv " + d + "/tmp.$STRATA_RANK " + d + "/pid.$STRATA_RANK; "
      "exec sleep 60";
  Proc p(launch_args({"--nproc", "3"}, script), clean_env());
  const int status = p.wait(40);
  std::vector<pid_t> sleepers;
  for (int r : {0, 2}) {
    if (auto pid = read_pid(d + "/pid." + std::to_string(r))) sleepers.push_back(*pid);
  }
  EXPECT_EQ(status, 3) << p.err();
  EXPECT_LT(p.elapsed(), 15.0);
  EXPECT_NE(p.err().find("[rank 1] rank 1 fails"), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("strata launch: rank 1 exited with status 3; stopping the other ranks"), std::string::npos)
      << p.err();
  ASSERT_EQ(sleepers.size(), 2u);
  for (pid_t pid : sleepers) {
    EXPECT_FALSE(alive(pid)) << "rank process " << pid << " still runs";
    if (alive(pid)) kill(pid, SIGKILL);
  }
}

TEST(ParallelLaunch, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir("strata_launch_test");
  const std::string d = dir.path();
  const std::string script =
      "if [ \"$STRATA_RANK\" = 1 ]; then "
      "  while [ ! -f " + d + "/pid.0 ]; do sleep 0.02; done; exit 5; "
      "fi; "
      "trap '' TERM; echo $$ > " + d + "/tmp.0; mv " + d + "/tmp.0 " + d + "/pid.0; exec sleep 60";
  Proc p(launch_args({"--nproc", "2"}, script), clean_env());
  const int status = p.wait(40);
  const auto pid = read_pid(d + "/pid.0");
  EXPECT_EQ(status, 5) << p.err();
  EXPECT_GT(p.elapsed(), 4.0);  // SIGTERM was ignored: SIGKILL comes after 5 s
  EXPECT_LT(p.elapsed(), 20.0);
  EXPECT_NE(p.err().find("sending SIGKILL"), std::string::npos) << p.err();
  ASSERT_TRUE(pid.has_value());
  EXPECT_FALSE(alive(*pid));
  if (alive(*pid)) kill(*pid, SIGKILL);
}

TEST(ParallelLaunch, RankKilledBySignal) {
  const std::string script = "if [ \"$STRATA_RANK\" = 1 ]; then kill -9 $$; fi; exec sleep 60";
  Proc p(launch_args({"--nproc", "2"}, script), clean_env());
  EXPECT_EQ(p.wait(40), 137) << p.err();
  EXPECT_LT(p.elapsed(), 15.0);
  EXPECT_NE(p.err().find("strata launch: rank 1 exited with status 137 (killed by signal 9"), std::string::npos)
      << p.err();
}

// After the first failure, a rank that a signal from elsewhere kills is
// named too: it may be the cause (a parameter server killed while its
// workers report the lost connection first).
TEST(ParallelLaunch, RankKilledByAnotherSignalAfterTheFailureIsNamed) {
  // Rank 1 fails only once rank 0 ignores SIGTERM: otherwise the
  // launcher's own SIGTERM could end rank 0 first (seen under ASan).
  TempDir dir("strata_launch_test");
  const std::string ready = dir.path() + "/ignoring.0";
  const std::string script =
      "if [ \"$STRATA_RANK\" = 1 ]; then "
      "  while [ ! -f " + ready + " ]; do sleep 0.02; done; exit 3; "
      "fi; "
      "trap '' TERM; touch " + ready + "; sleep 1; kill -9 $$";
  Proc p(launch_args({"--nproc", "2"}, script), clean_env());
  EXPECT_EQ(p.wait(40), 3) << p.err();
  EXPECT_NE(p.err().find("strata launch: rank 1 exited with status 3; stopping the other ranks"), std::string::npos)
      << p.err();
  EXPECT_NE(p.err().find("strata launch: rank 0 exited with status 137 (killed by signal 9, Killed), a signal this "
                         "launcher did not send"),
            std::string::npos)
      << p.err();
}

// The launcher's own SIGTERM is not reported as another cause.
TEST(ParallelLaunch, RanksStoppedByTheLauncherAreNotNamedAsCauses) {
  const std::string script = "if [ \"$STRATA_RANK\" = 1 ]; then exit 3; fi; exec sleep 60";
  Proc p(launch_args({"--nproc", "2"}, script), clean_env());
  EXPECT_EQ(p.wait(40), 3) << p.err();
  EXPECT_EQ(p.err().find("did not send"), std::string::npos) << p.err();
}

TEST(ParallelLaunch, MissingProgramFails) {
  Proc p({STRATA_BINARY, "launch", "--nproc", "2", "--", "/nonexistent/strata-test-program"}, clean_env());
  EXPECT_EQ(p.wait(30), 127) << p.err();
  EXPECT_NE(p.err().find("cannot run '/nonexistent/strata-test-program'"), std::string::npos) << p.err();
}

TEST(ParallelLaunch, CtrlCIsForwardedToEveryRank) {
  const std::string script =
      "trap 'echo stopping-$STRATA_RANK; exit 0' INT; echo ready-$STRATA_RANK; "
      "while :; do sleep 0.05; done";
  Proc p(launch_args({"--nproc", "2"}, script), clean_env());
  const bool ready = p.read_until(
      [&] {
        return p.out().find("[rank 0] ready-0") != std::string::npos &&
               p.out().find("[rank 1] ready-1") != std::string::npos;
      },
      30);
  ASSERT_TRUE(ready) << p.out() << p.err();
  kill(p.pid(), SIGINT);
  EXPECT_EQ(p.wait(30), 130) << p.out() << p.err();
  EXPECT_NE(p.out().find("[rank 0] stopping-0"), std::string::npos) << p.out();
  EXPECT_NE(p.out().find("[rank 1] stopping-1"), std::string::npos) << p.out();
  EXPECT_NE(p.err().find("forwarding SIGINT"), std::string::npos) << p.err();
}

TEST(ParallelLaunch, ResolveOptions) {
  LaunchOptions o;
  o.nproc = 2;
  o.command = {"true"};
  o.token = "t";
  LaunchOptions r = resolve_launch_options(o);
  // No --master: launch() serves the store and fills in its address.
  EXPECT_EQ(r.master, "");
  r.master = "127.0.0.1:4242";
  r.store_host = StoreHost::kLauncher;
  const auto env = rank_environment(r, 1);
  EXPECT_NE(std::find(env.begin(), env.end(), "STRATA_RANK=1"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "STRATA_TOKEN=t"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "STRATA_STORE_HOST=launcher"), env.end());
  o.master = "node-a:29500";
  const auto given = rank_environment(resolve_launch_options(o), 1);
  EXPECT_NE(std::find(given.begin(), given.end(), "STRATA_MASTER=node-a:29500"), given.end());
  EXPECT_NE(std::find(given.begin(), given.end(), "STRATA_STORE_HOST=rank0"), given.end());
  o.master.clear();
  const std::string token = random_token();
  EXPECT_TRUE(std::regex_match(token, std::regex("[0-9a-f]{32}"))) << token;
  EXPECT_NE(token, random_token());
  o.nproc = 0;
  EXPECT_THROW(resolve_launch_options(o), ConfigError);
}

// ---- detect_rank_env ------------------------------------------------------------

// Clears every variable detect_rank_env reads for the test and restores them after.
class ParallelRankEnv : public testing::Test {
 protected:
  void SetUp() override {
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      const std::string name = kv.substr(0, kv.find('='));
      if (has_prefix(name, "STRATA_") || has_prefix(name, "OMPI_COMM_WORLD_") || has_prefix(name, "SLURM_")) {
        saved_[name] = kv.substr(kv.find('=') + 1);
      }
    }
    for (const auto& [name, value] : saved_) unsetenv(name.c_str());
  }
  void TearDown() override {
    for (const auto& name : set_) unsetenv(name.c_str());
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }
  void set(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
    set_.push_back(name);
  }
  std::string error() {
    try {
      detect_rank_env();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  }

 private:
  std::map<std::string, std::string> saved_;
  std::vector<std::string> set_;
};

TEST_F(ParallelRankEnv, NoLauncher) {
  const RankEnv e = detect_rank_env();
  EXPECT_EQ(e.launcher, "none");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.distributed());
  EXPECT_EQ(e.timeout, std::chrono::seconds(300));
}

TEST_F(ParallelRankEnv, StrataLaunch) {
  set("STRATA_RANK", "3");
  set("STRATA_WORLD_SIZE", "4");
  set("STRATA_LOCAL_RANK", "1");
  set("STRATA_LOCAL_WORLD_SIZE", "2");
  set("STRATA_MASTER", "node-a:29500");
  set("STRATA_TOKEN", "secret");
  set("STRATA_TIMEOUT_S", "7");
  const RankEnv e = detect_rank_env();
  EXPECT_EQ(e.launcher, "strata");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_host, "node-a");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.token, "secret");
  EXPECT_EQ(e.timeout, std::chrono::seconds(7));
  EXPECT_TRUE(e.distributed());
  EXPECT_NE(e.describe().find("rank 3 of 4"), std::string::npos);
}

TEST_F(ParallelRankEnv, Mpirun) {
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  set("STRATA_MASTER", "10.0.0.5:1234");
  set("STRATA_TOKEN", "tok");
  const RankEnv e = detect_rank_env();
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_host, "10.0.0.5");
  EXPECT_EQ(e.master_port, 1234);
}

TEST_F(ParallelRankEnv, Srun) {
  set("SLURM_PROCID", "5");
  set("SLURM_NTASKS", "8");
  set("SLURM_LOCALID", "1");
  set("SLURM_NTASKS_PER_NODE", "4");
  set("STRATA_MASTER", "gpu-01:29500");
  set("STRATA_TOKEN", "tok");
  const RankEnv e = detect_rank_env();
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_host, "gpu-01");
}

TEST_F(ParallelRankEnv, Errors) {
  set("STRATA_RANK", "x1");
  set("STRATA_WORLD_SIZE", "2");
  EXPECT_NE(error().find("STRATA_RANK"), std::string::npos) << error();
  set("STRATA_RANK", "2");
  EXPECT_NE(error().find("not below the world size"), std::string::npos) << error();
  set("STRATA_RANK", "1");
  // The master address and token are optional here (the mpi backend needs
  // neither); the tcp backend reports their absence (see below).
  EXPECT_NO_THROW(detect_rank_env());
  set("STRATA_MASTER", "host-without-port");
  EXPECT_NE(error().find("host:port"), std::string::npos) << error();
  set("STRATA_MASTER", "host:295000");
  EXPECT_NE(error().find("no valid port"), std::string::npos) << error();
  set("STRATA_MASTER", "host:29500");
  set("STRATA_TOKEN", "t");
  set("STRATA_TIMEOUT_S", "-5");
  EXPECT_NE(error().find("STRATA_TIMEOUT_S"), std::string::npos) << error();
}

TEST_F(ParallelRankEnv, StoreHost) {
  set("STRATA_RANK", "0");
  set("STRATA_WORLD_SIZE", "2");
  EXPECT_EQ(detect_rank_env().store_host, StoreHost::kRankZero);
  set("STRATA_STORE_HOST", "launcher");
  EXPECT_EQ(detect_rank_env().store_host, StoreHost::kLauncher);
  set("STRATA_STORE_HOST", "rank0");
  EXPECT_EQ(detect_rank_env().store_host, StoreHost::kRankZero);
  set("STRATA_STORE_HOST", "rank1");
  EXPECT_NE(error().find("known: rank0, launcher"), std::string::npos) << error();
}

TEST_F(ParallelRankEnv, TcpBackendNeedsMasterAndToken) {
  set("STRATA_RANK", "1");
  set("STRATA_WORLD_SIZE", "2");
  auto tcp_error = [] {
    try {
      create_communicator(detect_rank_env(), CommunicatorOptions{BackendChoice::kTcp, AllreduceAlgorithm::kAuto});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(tcp_error().find("STRATA_MASTER"), std::string::npos) << tcp_error();
  set("STRATA_MASTER", "127.0.0.1:29500");
  EXPECT_NE(tcp_error().find("STRATA_TOKEN"), std::string::npos) << tcp_error();
}

}  // namespace
}  // namespace strata::parallel
