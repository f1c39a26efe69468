// The nccl backend. On a GPU: two ranks as processes sharing one GPU (each
// its own NCCL_HOSTID, NCCL over sockets on loopback), started by
// re-running this test binary with STRATA_NCCL_TEST_WORKER set, which
// registers the NcclWorker.Rank test that runs in them: every collective x
// dtype x reduce op with exact results, async forms, empty tensors, the CPU
// tensor error, and a timeout that aborts and names the rank. Elsewhere the
// GPU tests are skipped with the reason (no NCCL build: one skipped test
// says so); the configuration errors are checked everywhere.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/error.h"
#include "framework/tensor.h"
#include "parallel/backends/communicator_factory.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/rendezvous/env.h"
#include "parallel/backends/nccl_communicator.h"
#include "parallel/rendezvous/store.h"
#include "tests/test_util.h"

#if defined(STRATA_HAVE_NCCL) && defined(STRATA_WITH_CUDA)
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "framework/cuda/device_api.h"
#include "parallel/socket/socket.h"
#include "tests/parallel_bad_calls.h"
#include "tests/process_util.h"
#endif

namespace strata::parallel {
namespace {

using test::error_of;

TEST(NcclConfig, DataParallelConfigAcceptsNccl) {
  EXPECT_EQ(parse_dp_backend("nccl", "--dp-backend"), BackendChoice::kNccl);
  EXPECT_CONTAINS(error_of<ConfigError>([] { parse_dp_backend("nccl2", "--dp-backend"); }), "nccl");
}

TEST(NcclConfig, UnknownBackendListsNccl) {
  EXPECT_CONTAINS(error_of<ConfigError>([] { parse_backend_choice("nickel", "backend"); }), "nccl");
}

TEST(NcclConfig, OneRankIsLocalWhateverTheBackend) {
  RankEnv env;  // a world of one
  CommunicatorOptions opts;
  opts.backend = BackendChoice::kNccl;
  EXPECT_EQ(create_communicator(env, opts)->backend_name(), "local");
}

#if !defined(STRATA_HAVE_NCCL) || !defined(STRATA_WITH_CUDA)

TEST(NcclBackend, NotBuilt) {
  EXPECT_FALSE(nccl_backend_built());
  RankEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.hostname = "test-host";
  CommunicatorOptions opts;
  opts.backend = BackendChoice::kNccl;
  const std::string msg = error_of<ConfigError>([&] { create_communicator(env, opts); });
  EXPECT_CONTAINS(msg, "without NCCL");
  EXPECT_CONTAINS(msg, "tcp");
  EXPECT_CONTAINS(msg, "rank 1 of 2 on test-host");
  // auto with CUDA tensors falls back to tcp here (which then wants its store address).
  opts.backend = BackendChoice::kAuto;
  opts.device = Device::cuda(0);
  EXPECT_CONTAINS(error_of<ConfigError>([&] { create_communicator(env, opts); }), "tcp backend");
  GTEST_SKIP() << "this build has no nccl backend (needs CUDA and NCCL at cmake time): "
                  "the NCCL collective tests do not apply";
}

#else  // STRATA_HAVE_NCCL && STRATA_WITH_CUDA

using Clock = std::chrono::steady_clock;

// ---- the worker: one rank, in a child process -----------------------------------

const char* worker_mode() { return std::getenv("STRATA_NCCL_TEST_WORKER"); }

// Values on the host as doubles, whatever the dtype.
Tensor device_tensor(const std::vector<double>& v, DType dtype) {
  Tensor h({static_cast<int64_t>(v.size())}, dtype);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::kF32: h.data<float>()[i] = static_cast<float>(v[i]); break;
      case DType::kF16: h.data<uint16_t>()[i] = float_to_f16(static_cast<float>(v[i])); break;
      case DType::kBF16: h.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v[i])); break;
      case DType::kI32: h.data<int32_t>()[i] = static_cast<int32_t>(v[i]); break;
      case DType::kU8: h.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]); break;
    }
  }
  return h.to(Device::cuda(0));
}

std::vector<double> host_values(const Tensor& d) {
  const Tensor h = d.to(Device::cpu());
  std::vector<double> v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (h.dtype()) {
      case DType::kF32: v[i] = h.data<float>()[i]; break;
      case DType::kF16: v[i] = f16_to_float(h.data<uint16_t>()[i]); break;
      case DType::kBF16: v[i] = bf16_to_float(h.data<uint16_t>()[i]); break;
      case DType::kI32: v[i] = h.data<int32_t>()[i]; break;
      case DType::kU8: v[i] = h.data<uint8_t>()[i]; break;
    }
  }
  return v;
}

bool is_integer(DType t) { return t == DType::kI32 || t == DType::kU8; }

// Small non-negative integers: exact in every dtype, sums of two ranks too.
double value(int64_t i, int rank) { return static_cast<double>(i % 7 + 3 * rank); }

std::vector<double> values(int64_t n, int rank, int64_t offset = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(i + offset, rank);
  return v;
}

void expect_values(const Tensor& d, const std::vector<double>& expected, const std::string& what) {
  const std::vector<double> got = host_values(d);
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i]) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << expected[i];
      return;
    }
  }
}

double reduce_expected(ReduceOp op, int64_t i, int world, DType dtype, int64_t offset = 0) {
  double sum = 0, lo = 1e30, hi = -1e30;
  for (int r = 0; r < world; ++r) {
    const double x = value(i + offset, r);
    sum += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  switch (op) {
    case ReduceOp::kSum: return sum;
    case ReduceOp::kAverage: return is_integer(dtype) ? std::trunc(sum / world) : sum / world;
    case ReduceOp::kMin: return lo;
    case ReduceOp::kMax: return hi;
  }
  return 0;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

void check_collectives(Communicator& comm, DType dtype, int64_t n) {
  const int rank = comm.rank(), world = comm.world_size();
  const std::string tag = std::string(dtype_name(dtype)) + " x " + std::to_string(n);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax}) {
    std::vector<double> expected(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) expected[static_cast<size_t>(i)] = reduce_expected(op, i, world, dtype);
    Tensor t = device_tensor(values(n, rank), dtype);
    comm.allreduce(t, op);
    expect_values(t, expected, "allreduce " + std::string(op_name(op)) + " " + tag);

    Tensor a = device_tensor(values(n, rank), dtype);
    auto work = comm.allreduce_async(a, op);
    work->wait();
    EXPECT_TRUE(work->is_done());
    expect_values(a, expected, "allreduce_async " + std::string(op_name(op)) + " " + tag);

    const int root = world - 1;
    Tensor r = device_tensor(values(n, rank), dtype);
    comm.reduce(r, op, root);
    if (rank == root) expect_values(r, expected, "reduce " + std::string(op_name(op)) + " " + tag);

    // reduce_scatter: rank k gets the reduced block k of world x n.
    Tensor in = device_tensor(values(n * world, rank), dtype);
    Tensor out({n}, dtype, Device::cuda(0));
    comm.reduce_scatter(in, out, op);
    std::vector<double> block(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) block[static_cast<size_t>(i)] = reduce_expected(op, i, world, dtype, rank * n);
    expect_values(out, block, "reduce_scatter " + std::string(op_name(op)) + " " + tag);
  }

  for (int root = 0; root < world; ++root) {
    Tensor b = device_tensor(values(n, rank), dtype);
    comm.broadcast(b, root);
    expect_values(b, values(n, root), "broadcast root " + std::to_string(root) + " " + tag);
    Tensor c = device_tensor(values(n, rank), dtype);
    comm.broadcast_async(c, root)->wait();
    expect_values(c, values(n, root), "broadcast_async root " + std::to_string(root) + " " + tag);
  }

  // allgather / gather: block k holds rank k's input.
  std::vector<double> gathered;
  for (int k = 0; k < world; ++k) {
    const std::vector<double> v = values(n, k);
    gathered.insert(gathered.end(), v.begin(), v.end());
  }
  Tensor in = device_tensor(values(n, rank), dtype);
  Tensor all({n * world}, dtype, Device::cuda(0));
  comm.allgather(in, all);
  expect_values(all, gathered, "allgather " + tag);
  for (int root = 0; root < world; ++root) {
    Tensor g({rank == root ? n * world : 0}, dtype, Device::cuda(0));
    comm.gather(in, g, root);
    if (rank == root) expect_values(g, gathered, "gather root " + std::to_string(root) + " " + tag);

    // scatter: the root's world x n values, block k to rank k.
    Tensor src = rank == root ? device_tensor(values(n * world, root), dtype) : Tensor({0}, dtype, Device::cuda(0));
    Tensor dst({n}, dtype, Device::cuda(0));
    comm.scatter(src, dst, root);
    expect_values(dst, values(n, root, rank * n), "scatter root " + std::to_string(root) + " " + tag);
  }

  // send/recv: 0 -> 1, then 1 -> 0 (unbuffered: never both sending first).
  if (rank <= 1) {
    Tensor p = device_tensor(values(n, rank), dtype);
    if (rank == 0) {
      comm.send(p, 1, 5);
      comm.recv(p, 1, 6);
      expect_values(p, values(n, 1), "recv from 1 " + tag);
    } else {
      Tensor q({n}, dtype, Device::cuda(0));
      comm.recv(q, 0, 5);
      expect_values(q, values(n, 0), "recv from 0 " + tag);
      comm.send(p, 0, 6);
    }
  }
  comm.barrier();
}

void run_collectives_worker() {
  const RankEnv env = detect_rank_env();
  ASSERT_EQ(env.world_size, 2);
  CommunicatorOptions opts;
  opts.backend = BackendChoice::kAuto;  // CUDA tensors and an NCCL build: auto is nccl
  opts.device = Device::cuda(0);
  auto comm = create_communicator(env, opts);
  ASSERT_EQ(comm->backend_name(), "nccl");
  ASSERT_EQ(comm->rank(), env.rank);
  ASSERT_EQ(comm->world_size(), 2);

  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{65539}}) {
      check_collectives(*comm, dtype, n);
      if (::testing::Test::HasFailure()) return;
    }
  }

  // Empty tensors: nothing to move, and no error.
  Tensor empty({0}, DType::kF32, Device::cuda(0));
  comm->allreduce(empty, ReduceOp::kSum);
  comm->allreduce_async(empty, ReduceOp::kSum)->wait();

  // CPU tensors: a clear error that says to use tcp, and no collective started.
  Tensor cpu({4});
  const std::string msg = error_of<ConfigError>([&] { comm->allreduce(cpu, ReduceOp::kSum); });
  EXPECT_CONTAINS(msg, "CPU tensor");
  EXPECT_CONTAINS(msg, "tcp");
  EXPECT_CONTAINS(msg, "rank " + std::to_string(env.rank));
  Tensor small({3}, DType::kF32, Device::cuda(0)), big({5}, DType::kF32, Device::cuda(0));
  EXPECT_CONTAINS(error_of<ShapeError>([&] { comm->allgather(small, big); }), "world_size");
  // The wrong calls every backend must answer alike (tests/parallel_bad_calls.h).
  for (const std::string& problem :
       parallel_test::run_bad_calls(*comm, parallel_test::bad_calls(2, env.rank, Device::cuda(0)))) {
    ADD_FAILURE() << problem;
  }

  // Still usable after the argument errors.
  Tensor one = device_tensor({1.0}, DType::kF32);
  comm->allreduce(one, ReduceOp::kSum);
  expect_values(one, {2.0}, "allreduce after errors");
  std::printf("rank %d: all nccl checks passed\n", env.rank);
}

// Rank 0 allreduces alone: after the timeout it must abort and name itself.
void run_timeout_worker() {
  const RankEnv env = detect_rank_env();
  CommunicatorOptions opts;
  opts.backend = BackendChoice::kNccl;
  opts.device = Device::cuda(0);
  auto comm = create_communicator(env, opts);
  comm->barrier();
  comm->set_timeout(std::chrono::seconds(2));
  if (env.rank == 0) {
    Tensor t = device_tensor({1.0, 2.0}, DType::kF32);
    const auto start = Clock::now();
    const std::string msg = error_of<Error>([&] { comm->allreduce(t, ReduceOp::kSum); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
    EXPECT_CONTAINS(msg, "rank 0 of 2 on " + env.hostname);
    EXPECT_CONTAINS(msg, "allreduce");
    EXPECT_CONTAINS(msg, "within 2 s");  // "did not finish" (or "did not start" if NCCL was still connecting)
    EXPECT_CONTAINS(error_of<Error>([&] { comm->barrier(); }), "aborted");
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(4));  // silent past rank 0's timeout
  }
  std::printf("rank %d: timeout checks done\n", env.rank);
}

// Registered only in the child processes (STRATA_NCCL_TEST_WORKER set), so a
// normal run or test listing never sees it.
class NcclWorkerTest : public ::testing::Test {
 public:
  void TestBody() override {
    const std::string mode = worker_mode();
    if (mode == "collectives") {
      run_collectives_worker();
    } else if (mode == "timeout") {
      run_timeout_worker();
    } else {
      FAIL() << "unknown STRATA_NCCL_TEST_WORKER mode " << mode;
    }
  }
};

const bool worker_registered = [] {
  if (!worker_mode()) return false;
  ::testing::RegisterTest("NcclWorker", "Rank", nullptr, nullptr, __FILE__, __LINE__,
                          []() -> ::testing::Test* { return new NcclWorkerTest; });
  return true;
}();

// ---- the parent: spawns the ranks -------------------------------------------------

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Two ranks of this binary in `mode`, sharing GPU 0. Each claims its own
// host to NCCL (NCCL_HOSTID), so they talk over sockets on loopback instead
// of refusing to share a GPU.
void run_two_ranks(const std::string& mode) {
  STRATA_SKIP_WITHOUT_GPU("the NCCL tests need one");
  const std::string self = self_path();
  ASSERT_FALSE(self.empty());
  test::TempDir dir("strata_nccl");
  const int port = pick_free_port("127.0.0.1");
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int r = 0; r < 2; ++r) {
    logs.push_back(dir.path() + "/rank" + std::to_string(r) + ".log");
    pids.push_back(test::spawn_process({self, "--gtest_filter=NcclWorker.Rank"},
                         {"STRATA_NCCL_TEST_WORKER=" + mode, "STRATA_RANK=" + std::to_string(r),
                          "STRATA_WORLD_SIZE=2", "STRATA_LOCAL_RANK=" + std::to_string(r),
                          "STRATA_LOCAL_WORLD_SIZE=2", "STRATA_MASTER=127.0.0.1:" + std::to_string(port),
                          "STRATA_TOKEN=nccl-test-token", "STRATA_TIMEOUT_S=60",
                          "NCCL_HOSTID=strata-nccl-test-rank" + std::to_string(r), "NCCL_P2P_DISABLE=1",
                          "NCCL_SHM_DISABLE=1", "NCCL_IB_DISABLE=1", "NCCL_SOCKET_IFNAME=lo",
                          "NCCL_DEBUG=WARN"},
                         logs.back()));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(180);
  for (int r = 0; r < 2; ++r) {
    const int status = test::wait_for_process(pids[static_cast<size_t>(r)], deadline);
    EXPECT_EQ(status, 0) << "rank " << r << " (" << (status == -1 ? "killed at the deadline" : "exit status")
                         << "); its output:\n" << read_text(logs[static_cast<size_t>(r)]);
  }
}

TEST(NcclProcesses, EveryCollectiveDtypeAndOp) {
  ASSERT_TRUE(nccl_backend_built());
  run_two_ranks("collectives");
}

TEST(NcclProcesses, TimeoutAbortsAndNamesTheRank) { run_two_ranks("timeout"); }

// Without a GPU, asking for nccl is a clear error (rank 0 alone: its own store).
TEST(NcclConfig, NoDeviceIsAClearError) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present: covered by NcclProcesses";
  RankEnv env;
  env.world_size = 2;
  env.hostname = "test-host";
  env.master_host = "127.0.0.1";
  env.master_port = pick_free_port("127.0.0.1");
  env.token = "t";
  env.timeout = std::chrono::seconds(10);
  CommunicatorOptions opts;
  opts.backend = BackendChoice::kNccl;
  const std::string msg = error_of<ConfigError>([&] { create_communicator(env, opts); });
  EXPECT_CONTAINS(msg, "no GPU");
  EXPECT_CONTAINS(msg, "rank 0 of 2 on test-host");
}

#endif  // STRATA_HAVE_NCCL && STRATA_WITH_CUDA

}  // namespace
}  // namespace strata::parallel
