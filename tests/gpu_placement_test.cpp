// The check in front of NCCL that every rank of a communicator holds a GPU
// of its own (parallel/backends/gpu_placement.h): runs without a GPU, on
// placements as ranks would publish them.
#include <gtest/gtest.h>

#include "framework/error.h"
#include "parallel/backends/gpu_placement.h"

namespace strata::parallel {
namespace {

TEST(GpuPlacement, TwoRanksOnOneGpuAreRefusedWithWhatToDo) {
  const std::vector<GpuPlacement> ranks = {{"node-a", "0000:1a:00.0", 0, 1}, {"node-a", "0000:1a:00.0", 0, 1}};
  const std::string msg = duplicate_gpu_problem(ranks);
  EXPECT_NE(msg.find("ranks 0 and 1 are both on GPU cuda:0 (0000:1a:00.0) of host node-a"), std::string::npos) << msg;
  EXPECT_NE(msg.find("that host runs 2 ranks and has 1 GPU"), std::string::npos) << msg;
  EXPECT_NE(msg.find("strata launch --nproc 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--dp-backend tcp"), std::string::npos) << msg;
}

TEST(GpuPlacement, DistinctGpusOrHostsAreFine) {
  // One GPU per rank; the same bus id on two hosts; per-rank NCCL_HOSTID
  // (the tests' way to run two ranks on one GPU over sockets).
  EXPECT_EQ(duplicate_gpu_problem({{"a", "0000:1a:00.0", 0, 2}, {"a", "0000:1b:00.0", 1, 2}}), "");
  EXPECT_EQ(duplicate_gpu_problem({{"a", "0000:1a:00.0", 0, 1}, {"b", "0000:1a:00.0", 0, 1}}), "");
  EXPECT_EQ(duplicate_gpu_problem({{"test-rank0", "0000:1a:00.0", 0, 1}, {"test-rank1", "0000:1a:00.0", 0, 1}}), "");
  // CUDA_VISIBLE_DEVICES per rank: index 0 everywhere, different GPUs.
  EXPECT_EQ(duplicate_gpu_problem({{"a", "0000:1a:00.0", 0, 1}, {"a", "0000:3d:00.0", 0, 1}}), "");
}

TEST(GpuPlacement, RoundTripsThroughTheStoreText) {
  const GpuPlacement p{"host-7", "0000:1a:00.0", 3, 8};
  const GpuPlacement q = decode_gpu_placement(encode_gpu_placement(p));
  EXPECT_EQ(q.host, p.host);
  EXPECT_EQ(q.gpu, p.gpu);
  EXPECT_EQ(q.device, 3);
  EXPECT_EQ(q.host_gpus, 8);
  EXPECT_THROW(decode_gpu_placement("no separators"), Error);
}

}  // namespace
}  // namespace strata::parallel
