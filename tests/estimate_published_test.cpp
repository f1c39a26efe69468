// What `strata estimate` needs to reproduce published scaling: the
// hierarchical allreduce of servers with several devices
// (parallel/estimate/hierarchical_cost.h) against hand-computed cases and
// monotonic in every bandwidth, and a profile scaled to a published per-device
// throughput (parallel/estimate/profile_scale.h).
#include <gtest/gtest.h>

#include <string>

#include "framework/error.h"
#include "parallel/estimate/data_parallel_cost.h"
#include "parallel/estimate/hierarchical_cost.h"
#include "parallel/estimate/link.h"
#include "parallel/estimate/profile_scale.h"

namespace strata::estimate {
namespace {

// Servers of 4 devices, 10 GB/s and 1 us inside; 1 GB/s and 10 us between.
NodeTopology four_per_server(int nics) {
  NodeTopology t;
  t.devices_per_node = 4;
  t.intra = {"intra", 1e10, 1e-6, "test"};
  t.nics_per_node = nics;
  return t;
}
const Link kNetwork{"net", 1e9, 1e-5, "test"};

TEST(EstimateHierarchical, TwoServersOfFourMatchHandComputedCase) {
  // S = 1 MB, 8 ranks = 2 servers of 4.
  //   reduce-scatter inside: 3·1 us + 3/4 · 1e6 / 1e10 = 78 us; the allgather the same;
  //   one adapter shared by 4 shards: 0.25 GB/s each; allreduce of 250 kB over 2 servers:
  //   2·10 us + 2·(1/2)·250e3 / 0.25e9 = 1.02 ms.  Total 1.176 ms.
  EXPECT_NEAR(hierarchical_allreduce_seconds(AllreduceAlgorithm::kRing, 8, 1e6, kNetwork, four_per_server(1)),
              1.176e-3, 1e-12);
  // Four adapters: each shard gets 1 GB/s, the network part 20 us + 250 us.
  EXPECT_NEAR(hierarchical_allreduce_seconds(AllreduceAlgorithm::kRing, 8, 1e6, kNetwork, four_per_server(4)),
              0.426e-3, 1e-12);
  // Tree between servers: 2·ceil(log2 2)·(10 us + 250e3 / 0.25e9) = 2.02 ms, plus 156 us inside.
  EXPECT_NEAR(hierarchical_allreduce_seconds(AllreduceAlgorithm::kTree, 8, 1e6, kNetwork, four_per_server(1)),
              2.176e-3, 1e-12);
}

TEST(EstimateHierarchical, OneServerIsARingOverTheInsideLink) {
  // 4 ranks fit one server: 2·3·1 us + 2·(3/4)·1e6 / 1e10 = 156 us; the network is not used.
  EXPECT_NEAR(hierarchical_allreduce_seconds(AllreduceAlgorithm::kRing, 4, 1e6, kNetwork, four_per_server(1)),
              1.56e-4, 1e-12);
  EXPECT_EQ(hierarchical_allreduce_seconds(AllreduceAlgorithm::kRing, 1, 1e6, kNetwork, four_per_server(1)), 0.0);
  // Without servers the dispatch is the flat allreduce over the link.
  EXPECT_EQ(allreduce_seconds(AllreduceAlgorithm::kRing, 8, 1e6, kNetwork, NodeTopology{}),
            ring_allreduce_seconds(8, 1e6, kNetwork));
}

TEST(EstimateHierarchical, MoreBandwidthOrAdaptersNeverPredictSlower) {
  for (AllreduceAlgorithm a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree}) {
    for (int ranks = 1; ranks <= 64; ++ranks) {
      for (double bytes : {0.0, 1e3, 1e6, 1e9}) {
        const double base = hierarchical_allreduce_seconds(a, ranks, bytes, kNetwork, four_per_server(1));
        Link faster_net = kNetwork;
        faster_net.bandwidth *= 2;
        NodeTopology faster_inside = four_per_server(1);
        faster_inside.intra.bandwidth *= 2;
        EXPECT_LE(hierarchical_allreduce_seconds(a, ranks, bytes, faster_net, four_per_server(1)), base);
        EXPECT_LE(hierarchical_allreduce_seconds(a, ranks, bytes, kNetwork, faster_inside), base);
        EXPECT_LE(hierarchical_allreduce_seconds(a, ranks, bytes, kNetwork, four_per_server(2)), base);
      }
    }
  }
}

TEST(EstimateHierarchical, BeatsTheFlatRingOnLatencyWithTheSameBandwidthTerm) {
  // 64 ranks in 16 servers, a link as fast inside as between, one adapter:
  // both carry about 2·S/B over the network, the hierarchy with fewer latencies.
  NodeTopology same = four_per_server(1);
  same.intra = kNetwork;
  const double flat = ring_allreduce_seconds(64, 1e3, kNetwork);
  EXPECT_LT(hierarchical_allreduce_seconds(AllreduceAlgorithm::kRing, 64, 1e3, kNetwork, same), flat);
}

TEST(EstimateHierarchical, DataParallelUsesTheServers) {
  StepProfile p;
  p.net = "one";
  p.batch = 8;
  LayerProfile l;
  l.name = "fc";
  l.forward = 1e-3;
  l.backward = 2e-3;
  l.grad_bytes = 1e6;
  p.layers = {l};
  DataParallelOptions o;
  o.overlap = parallel::Overlap::kOff;
  o.nodes = four_per_server(1);
  const StepEstimate e = data_parallel_step(p, 8, kNetwork, o);
  EXPECT_NEAR(e.step, 3e-3 + 1.176e-3, 1e-12);
}

TEST(EstimateHierarchical, LinkPresetsForPublishedSetups) {
  const Link tcp = link_preset("25gbe"), rdma = link_preset("25gbe-rdma");
  EXPECT_EQ(rdma.bandwidth, tcp.bandwidth);
  EXPECT_LT(rdma.latency, tcp.latency);
  EXPECT_EQ(link_preset("50gbe").bandwidth, 50e9 / 8);
  EXPECT_EQ(link_preset("40gbe").bandwidth, 40e9 / 8);
  EXPECT_GT(link_preset("nvlink-p100").bandwidth, link_preset("pcie3").bandwidth);
  EXPECT_GT(link_preset("nvlink").bandwidth, link_preset("nvlink-a100").bandwidth);
}

StepProfile two_layers_with_flops() {
  StepProfile p;
  p.net = "two";
  p.batch = 10;
  LayerProfile a, b;
  a.name = "a";
  a.flops = 1;
  a.backward_flops = 0;  // needs no backward
  a.top_bytes = 40;
  b.name = "b";
  b.flops = 3;
  b.backward_flops = 6;
  b.grad_bytes = 100;
  p.layers = {a, b};
  return p;
}

TEST(EstimateProfileScale, SplitsThePublishedStepByFlops) {
  std::string how;
  // 100 samples/s on a batch of 10: 100 ms, 10 FLOPs in all.
  const StepProfile p = scale_to_throughput(two_layers_with_flops(), {100.0, 0}, &how);
  EXPECT_EQ(p.batch, 10);
  EXPECT_NEAR(p.compute_seconds(), 0.1, 1e-15);
  EXPECT_NEAR(p.layers[0].forward, 0.01, 1e-15);
  EXPECT_EQ(p.layers[0].backward, 0.0);
  EXPECT_NEAR(p.layers[1].forward, 0.03, 1e-15);
  EXPECT_NEAR(p.layers[1].backward, 0.06, 1e-15);
  EXPECT_EQ(p.layers[1].grad_bytes, 100);  // weights do not depend on the batch
  EXPECT_NE(how.find("step 100 ms"), std::string::npos) << how;
  EXPECT_NE(how.find("an assumption"), std::string::npos) << how;
}

TEST(EstimateProfileScale, AnotherBatchScalesStepAndActivations) {
  const StepProfile p = scale_to_throughput(two_layers_with_flops(), {100.0, 20}, nullptr);
  EXPECT_EQ(p.batch, 20);
  EXPECT_NEAR(p.compute_seconds(), 0.2, 1e-15);
  EXPECT_EQ(p.layers[0].top_bytes, 80);
  EXPECT_EQ(p.layers[1].flops, 6);
}

TEST(EstimateProfileScale, WithoutFlopsKeepsTheMeasuredSplit) {
  StepProfile t;
  t.net = "timed";
  t.batch = 4;
  LayerProfile a;
  a.name = "a";
  a.forward = 0.002;
  a.backward = 0.006;
  t.layers = {a, a};
  const StepProfile p = scale_to_throughput(t, {40.0, 0}, nullptr);  // 100 ms
  EXPECT_NEAR(p.layers[1].forward, 0.0125, 1e-15);
  EXPECT_NEAR(p.layers[1].backward, 0.0375, 1e-15);
}

TEST(EstimateProfileScale, RefusesWhatCannotBeScaled) {
  EXPECT_THROW(scale_to_throughput(two_layers_with_flops(), {0.0, 0}, nullptr), ConfigError);
  StepProfile empty;
  empty.net = "nothing";
  empty.layers.resize(2);
  EXPECT_THROW(scale_to_throughput(empty, {100.0, 0}, nullptr), ConfigError);
}

}  // namespace
}  // namespace strata::estimate
