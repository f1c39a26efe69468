// The same wrong calls (tests/parallel_bad_calls.h) against every backend
// this process can build: the same exception type and message parts from
// each, and a communicator that stays usable afterwards. The mpi backend runs
// the list in tests/parallel_mpi_worker.cpp (under mpirun), nccl in
// tests/parallel_nccl_test.cpp's worker (where a GPU exists).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/communicator.h"
#include "parallel/backends/host_staging_communicator.h"
#include "tests/parallel_bad_calls.h"
#include "tests/parallel_test_util.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata::parallel_test {
namespace {

void expect_no_problems(const std::vector<std::string>& problems) {
  for (const std::string& p : problems) ADD_FAILURE() << p;
}

// Every rank runs the list alone (the checks are local), then all ranks
// allreduce together: the errors left the communicators usable.
void check_world(std::vector<std::unique_ptr<Communicator>>& comms, Device device) {
  const int world = static_cast<int>(comms.size());
  for (int r = 0; r < world; ++r) {
    expect_no_problems(run_bad_calls(*comms[static_cast<size_t>(r)], bad_calls(world, r, device)));
  }
  expect_no_errors(run_ranks(world, [&](int r) {
    Tensor x = filled(4, DType::kF32, r);
    comms[static_cast<size_t>(r)]->allreduce(x, ReduceOp::kSum);
    for (int64_t i = 0; i < 4; ++i) {
      expect_eq(get_value(x, i), expected_reduce(i, world, DType::kF32, ReduceOp::kSum), "allreduce after the errors",
                i);
    }
  }));
}

TEST(ParallelCommChecks, Local) {
  LocalCommunicator local;
  expect_no_problems(run_bad_calls(local, bad_calls(1, 0, Device::cpu())));
  Tensor t({3});
  local.allreduce(t, ReduceOp::kSum);
}

TEST(ParallelCommChecks, TcpThreeRanks) {
  auto comms = make_world(3, "checks-tcp");
  check_world(comms, Device::cpu());
}

TEST(ParallelCommChecks, TcpTwoRanks) {
  auto comms = make_world(2, "checks-tcp2");
  check_world(comms, Device::cpu());
}

TEST(ParallelCommChecks, HostStagingOverTcp) {
  auto tcp = make_world(2, "checks-staging");
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& c : tcp) comms.push_back(std::make_unique<parallel::HostStagingCommunicator>(std::move(c)));
  check_world(comms, Device::cpu());
}

#ifdef STRATA_WITH_CUDA
// CUDA tensors: the staging wrapper takes them and answers as for host
// tensors; tcp alone refuses them with a ConfigError saying what to do.
TEST(ParallelCommChecks, CudaTensors) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: this machine has no GPU (or no driver)";
  auto tcp = make_world(2, "checks-cuda");
  Tensor t({4}, DType::kF32, Device::cuda(0));
  try {
    tcp[0]->allreduce(t, ReduceOp::kSum);
    ADD_FAILURE() << "tcp took a CUDA tensor";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("create_communicator"), std::string::npos) << e.what();
  }
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& c : tcp) comms.push_back(std::make_unique<parallel::HostStagingCommunicator>(std::move(c)));
  check_world(comms, Device::cuda(0));
}
#endif

}  // namespace
}  // namespace strata::parallel_test
