// The tcp backend across real processes on loopback: strata_parallel_worker
// (tests/parallel_worker.cpp) runs every collective with exact checks in 2,
// 3 and 4 processes with each allreduce algorithm, started by
// `strata launch` when the strata binary has it (else spawned here with the
// STRATA_* environment), and a rank killed mid-collective makes the others
// fail with a message naming the problem.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "parallel/rendezvous/store.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

#ifndef STRATA_PARALLEL_WORKER
#error "STRATA_PARALLEL_WORKER (path of strata_parallel_worker) must be defined by the build"
#endif

namespace {

using Clock = std::chrono::steady_clock;

using strata::test::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `strata launch` exists when `strata launch --help` succeeds.
// STRATA_TEST_SPAWN_DIRECTLY=1 skips it (to test the workers alone).
bool strata_launch_available() {
  static const bool available = [] {
    const char* direct = std::getenv("STRATA_TEST_SPAWN_DIRECTLY");
    if (direct && std::string(direct) == "1") return false;
    TempDir dir("strata_parallel");
    const pid_t pid = strata::test::spawn_process({STRATA_BINARY, "launch", "--help"}, {}, dir.path() + "/help.txt");
    return strata::test::wait_for_process(pid, Clock::now() + std::chrono::seconds(20)) == 0 &&
           read_file(dir.path() + "/help.txt").find("--nproc") != std::string::npos;
  }();
  return available;
}

constexpr const char* kToken = "parallel-process-test-token";

// The environment strata launch would give local rank r, with the store
// served by this test (on `port`) as the launcher serves it.
std::vector<std::string> rank_env(int r, int n, int port, int timeout_s) {
  return {"STRATA_RANK=" + std::to_string(r),
          "STRATA_WORLD_SIZE=" + std::to_string(n),
          "STRATA_LOCAL_RANK=" + std::to_string(r),
          "STRATA_LOCAL_WORLD_SIZE=" + std::to_string(n),
          "STRATA_MASTER=127.0.0.1:" + std::to_string(port),
          "STRATA_TOKEN=" + std::string(kToken),
          "STRATA_STORE_HOST=launcher",
          "STRATA_TIMEOUT_S=" + std::to_string(timeout_s)};
}

struct RankResult {
  int status = 0;
  std::string output;
};

// Spawns n workers ourselves; returns each rank's status and output.
std::vector<RankResult> run_ranks_directly(int n, const std::vector<std::string>& worker_args, const TempDir& dir,
                                           int timeout_s, const std::vector<std::string>& extra_env = {}) {
  // Port 0: the system picks a free one as the server binds it.
  const strata::parallel::StoreServer store("127.0.0.1", 0, kToken);
  const int port = store.port();
  std::vector<pid_t> pids;
  std::vector<std::string> argv = {STRATA_PARALLEL_WORKER};
  argv.insert(argv.end(), worker_args.begin(), worker_args.end());
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env = rank_env(r, n, port, timeout_s);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    pids.push_back(strata::test::spawn_process(argv, env, dir.path() + "/rank" + std::to_string(r) + ".log"));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s + 30);
  std::vector<RankResult> results(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    results[r].status = strata::test::wait_for_process(pids[r], deadline);
    results[r].output = read_file(dir.path() + "/rank" + std::to_string(r) + ".log");
  }
  return results;
}

// (ranks, algorithm, transport): "shm" is the default (shared memory between
// these local ranks), "tcp" sets STRATA_SHM=0.
class ProcessTest : public testing::TestWithParam<std::tuple<int, std::string, std::string>> {};

TEST_P(ProcessTest, EveryCollectiveExact) {
  const int n = std::get<0>(GetParam());
  const std::string algorithm = std::get<1>(GetParam());
  const std::vector<std::string> extra_env =
      std::get<2>(GetParam()) == "tcp" ? std::vector<std::string>{"STRATA_SHM=0"} : std::vector<std::string>{};
  TempDir dir("strata_parallel");
  const std::vector<std::string> worker_args = {"check", algorithm};
  if (strata_launch_available()) {
    std::vector<std::string> argv = {STRATA_BINARY, "launch", "--nproc", std::to_string(n),
                                     "--timeout",   "30",     "--",      STRATA_PARALLEL_WORKER};
    argv.insert(argv.end(), worker_args.begin(), worker_args.end());
    const pid_t pid = strata::test::spawn_process(argv, extra_env, dir.path() + "/launch.log");
    const int status = strata::test::wait_for_process(pid, Clock::now() + std::chrono::seconds(90));
    const std::string out = read_file(dir.path() + "/launch.log");
    EXPECT_EQ(status, 0) << out;
    for (int r = 0; r < n; ++r) {
      const std::string transport = std::get<2>(GetParam()) == "tcp" ? "tcp)" : "tcp + shm (";
      EXPECT_NE(out.find("rank " + std::to_string(r) + ": all checks passed (" + algorithm + ", tcp backend, " + transport),
                std::string::npos)
          << out;
    }
  } else {
    const auto results = run_ranks_directly(n, worker_args, dir, 30, extra_env);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(results[r].status, 0) << "rank " << r << ":\n" << results[r].output;
      EXPECT_NE(results[r].output.find("all checks passed"), std::string::npos) << results[r].output;
    }
  }
}

std::string process_param_name(const testing::TestParamInfo<std::tuple<int, std::string, std::string>>& info) {
  return std::to_string(std::get<0>(info.param)) + "procs_" + std::get<1>(info.param) + "_" + std::get<2>(info.param);
}

INSTANTIATE_TEST_SUITE_P(Loopback, ProcessTest,
                         testing::Combine(testing::Values(2, 3, 4),
                                          testing::Values(std::string("ring"), std::string("tree")),
                                          testing::Values(std::string("shm"), std::string("tcp"))),
                         process_param_name);

// SIGKILL one rank while all are allreducing in a loop: the survivors must
// exit non-zero, within the timeout, saying which peer went away.
TEST(ProcessFailure, KilledRankMakesTheOthersFailWithinTheTimeout) {
  const int n = 3;
  const int timeout_s = 10;
  TempDir dir("strata_parallel");
  // Port 0: the system picks a free one as the server binds it.
  const strata::parallel::StoreServer store("127.0.0.1", 0, kToken);
  const int port = store.port();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pids.push_back(strata::test::spawn_process({STRATA_PARALLEL_WORKER, "loop", "ring", dir.path()},
                                               rank_env(r, n, port, timeout_s),
                                               dir.path() + "/rank" + std::to_string(r) + ".log"));
  }
  // Wait until every rank has finished one allreduce, i.e. they are connected
  // and looping.
  const auto ready_deadline = Clock::now() + std::chrono::seconds(30);
  for (int r = 0; r < n; ++r) {
    struct stat st {};
    while (stat((dir.path() + "/rank" + std::to_string(r)).c_str(), &st) != 0 && Clock::now() < ready_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pids[1], SIGKILL);
  const auto killed_at = Clock::now();
  const auto deadline = killed_at + std::chrono::seconds(timeout_s + 5);
  std::vector<int> status(n);
  for (int r = 0; r < n; ++r) status[r] = strata::test::wait_for_process(pids[r], deadline);
  const double took = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_EQ(status[1], 128 + SIGKILL);
  for (int r : {0, 2}) {
    const std::string out = read_file(dir.path() + "/rank" + std::to_string(r) + ".log");
    EXPECT_EQ(status[r], 1) << "rank " << r << ":\n" << out;
    const bool closed = out.find("closed the connection") != std::string::npos;
    const bool timed_out = out.find("timed out after") != std::string::npos;
    EXPECT_TRUE(closed || timed_out) << out;
    EXPECT_NE(out.find("rank " + std::to_string(r) + " on "), std::string::npos) << out;
  }
  // Rank 2 receives from rank 1 in the ring, through shared memory (the
  // default between local ranks): it must name the dead rank.
  EXPECT_NE(read_file(dir.path() + "/rank2.log").find("rank 1 (127.0.0.1:"), std::string::npos)
      << read_file(dir.path() + "/rank2.log");
  EXPECT_NE(read_file(dir.path() + "/rank2.log").find("[shm]"), std::string::npos) << read_file(dir.path() + "/rank2.log");
  EXPECT_LT(took, timeout_s + 1.0);
}

}  // namespace
