// The dp x pp x tp grid of strata estimate (parallel/estimate/grid_cost.h)
// and the memory per device it ranks by (memory_cost.h), against
// hand-computed cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "framework/error.h"
#include "parallel/estimate/data_parallel_cost.h"
#include "parallel/estimate/grid_cost.h"
#include "parallel/estimate/memory_cost.h"
#include "parallel/estimate/pipeline_cost.h"
#include "parallel/estimate/tensor_parallel_cost.h"
#include "parallel/estimate/times_file.h"
#include "tests/test_util.h"

namespace strata::estimate {
namespace {

using parallel::GridShape;
using parallel::PipelineSchedule;

// 1 GB/s: S bytes take S ns.
Link test_link(double latency = 0.0, double bandwidth = 1e9) { return {"test", bandwidth, latency, "test"}; }

LayerProfile layer(const std::string& name, double forward, double backward, double grad_bytes, double param_bytes,
                   double activation_bytes, const std::string& split = "") {
  LayerProfile l;
  l.name = name;
  l.forward = forward;
  l.backward = backward;
  l.grad_bytes = grad_bytes;
  l.param_bytes = param_bytes;
  l.activation_bytes = activation_bytes;
  l.top_bytes = activation_bytes;
  l.bottom_bytes = activation_bytes;
  l.split = split;
  return l;
}

// Four layers; L2 owns 100 bytes of a buffer that is not learnable (300
// bytes of parameters, 200 of gradients); L3 is a loss.
StepProfile four_layers() {
  StepProfile p;
  p.net = "four";
  p.batch = 8;
  p.layers = {layer("L0", 1e-3, 2e-3, 100, 100, 400), layer("L1", 1e-3, 2e-3, 200, 200, 800),
              layer("L2", 1e-3, 2e-3, 200, 300, 400), layer("L3", 1e-3, 2e-3, 0, 0, 0)};
  return p;
}

// four_layers with L1 split by columns and L2 by rows (an MLP block).
StepProfile four_split_layers() {
  StepProfile p = four_layers();
  p.layers[1].split = "COLUMN";
  p.layers[2].split = "ROW";
  return p;
}

std::string names(const std::vector<GridEstimate>& v) {
  std::string s;
  for (const GridEstimate& g : v) s += (s.empty() ? "" : ", ") + g.shape.str();
  return s;
}

TEST(EstimateMemory, GPipeKeepsEveryMicroBatchOneFOneBAtMostTheStagesLeft) {
  const StepProfile p = four_layers();
  const std::vector<int> stage_of = {0, 0, 1, 1};
  MemoryOptions gpipe;
  gpipe.schedule = PipelineSchedule::kGPipe;
  MemoryOptions one_f_one_b;  // 1F1B is the default
  // Stage 0: weights 100 + 200, gradients the same, one momentum copy; it
  // creates 1200 bytes of outputs per batch, 300 per micro-batch of 4, and
  // keeps their gradients too: 600 per micro-batch in flight.
  DeviceMemory m = stage_memory(p, stage_of, 0, 4, gpipe);
  EXPECT_EQ(m.in_flight, 4);
  EXPECT_DOUBLE_EQ(m.weights, 300);
  EXPECT_DOUBLE_EQ(m.gradients, 300);
  EXPECT_DOUBLE_EQ(m.optimizer, 300);
  EXPECT_DOUBLE_EQ(m.activations, 2400);
  EXPECT_DOUBLE_EQ(m.total(), 3300);
  m = stage_memory(p, stage_of, 0, 4, one_f_one_b);  // min(p - 0, m) = 2
  EXPECT_EQ(m.in_flight, 2);
  EXPECT_DOUBLE_EQ(m.activations, 1200);
  EXPECT_DOUBLE_EQ(m.total(), 2100);
  // Stage 1: 300 bytes of weights (the buffer too) but 200 of gradients;
  // 400 bytes of outputs, 200 per micro-batch with their gradients.
  m = stage_memory(p, stage_of, 1, 4, gpipe);
  EXPECT_EQ(m.in_flight, 4);
  EXPECT_DOUBLE_EQ(m.total(), 300 + 200 + 200 + 800);
  m = stage_memory(p, stage_of, 1, 4, one_f_one_b);  // min(2 - 1, 4) = 1
  EXPECT_EQ(m.in_flight, 1);
  EXPECT_DOUBLE_EQ(m.total(), 300 + 200 + 200 + 200);
  // 1F1B's stage 0 holds the most; Adam keeps two copies.
  EXPECT_EQ(largest_stage_memory(p, stage_of, 4, one_f_one_b).stage, 0);
  MemoryOptions adam;
  adam.optimizer_slots = 2;
  EXPECT_DOUBLE_EQ(stage_memory(p, stage_of, 0, 4, adam).optimizer, 600);
  // No pipeline: the whole net, one batch of outputs and their gradients.
  m = stage_memory(p, {0, 0, 0, 0}, 0, 1, one_f_one_b);
  EXPECT_EQ(m.in_flight, 1);
  EXPECT_DOUBLE_EQ(m.total(), 600 + 500 + 500 + 2 * 1600);
}

// The plan by lifetime shares buffers between outputs and gradients whose
// lives do not overlap: the profile's activation scale (planned bytes per
// byte of outputs) replaces Caffe's 2 in every stage and schedule.
TEST(EstimateMemory, ActivationsFollowTheProfilesActivationScale) {
  StepProfile p = four_layers();
  p.activation_scale = 1.25;
  MemoryOptions gpipe;
  gpipe.schedule = PipelineSchedule::kGPipe;
  // Stage 0 creates 1200 bytes per batch, 300 per micro-batch of 4; 4 in flight.
  EXPECT_DOUBLE_EQ(stage_memory(p, {0, 0, 1, 1}, 0, 4, gpipe).activations, 4 * 1.25 * 300);
  EXPECT_DOUBLE_EQ(stage_memory(p, {0, 0, 0, 0}, 0, 1, MemoryOptions{}).activations, 1.25 * 1600);
  p.activation_scale = 0.0;  // a net whose plan holds nothing for its outputs (inference)
  EXPECT_DOUBLE_EQ(stage_memory(p, {0, 0, 0, 0}, 0, 1, MemoryOptions{}).activations, 0.0);
}

TEST(EstimateMemory, SplitLayersHoldOneTthOfTheirWeightsAndColumnOfItsOutputs) {
  const StepProfile p = four_split_layers();
  const StepProfile r = tensor_parallel_rank_profile(p, 2, test_link());
  EXPECT_DOUBLE_EQ(r.layers[1].param_bytes, 100);
  EXPECT_DOUBLE_EQ(r.layers[1].grad_bytes, 100);
  EXPECT_DOUBLE_EQ(r.layers[1].activation_bytes, 400);  // the rank's slice
  EXPECT_DOUBLE_EQ(r.layers[2].param_bytes, 150);
  EXPECT_DOUBLE_EQ(r.layers[2].activation_bytes, 400);  // whole after the allreduce
  EXPECT_DOUBLE_EQ(r.layers[0].param_bytes, 100);       // replicated
  // COLUMN: half its work plus the input-gradient allreduce in backward
  // (2 ranks, 800 bytes: 800 ns); ROW: the partial sums' in forward (400 ns).
  EXPECT_NEAR(r.layers[1].forward, 0.5e-3, 1e-15);
  EXPECT_NEAR(r.layers[1].backward, 1e-3 + 800e-9, 1e-15);
  EXPECT_NEAR(r.layers[2].forward, 0.5e-3 + 400e-9, 1e-15);
  EXPECT_NEAR(r.layers[2].backward, 1e-3, 1e-15);
}

TEST(EstimateGrid, LayoutsHaveTpOnlyWithSplitLayersAndPpUpToTheLayers) {
  StepProfile p = four_layers();
  EXPECT_EQ(grid_layouts(p, 4).size(), 3u);  // 4x1x1, 2x2x1, 1x4x1
  for (const GridShape& s : grid_layouts(p, 8)) {
    EXPECT_EQ(s.tp, 1) << s.str();
    EXPECT_LE(s.pp, 4) << s.str();
    EXPECT_EQ(s.world(), 8) << s.str();
  }
  EXPECT_EQ(grid_layouts(p, 8).size(), 3u);  // pp 1, 2, 4; not 8 stages of 4 layers
  p.layers[1].split = "COLUMN";
  // tp 1: pp 1, 2, 4; tp 2: pp 1, 2; tp 4: pp 1.
  EXPECT_EQ(grid_layouts(p, 4).size(), 6u);
  EXPECT_EQ(grid_layouts(p, 1).size(), 1u);
}

TEST(EstimateGrid, PureLayoutsEqualTheirStrategies) {
  const StepProfile p = four_split_layers();
  const Link link = test_link(1e-5);
  GridOptions o;
  o.micro_batches = 4;
  EXPECT_NEAR(grid_step(p, {4, 1, 1}, link, o).step.step, data_parallel_step(p, 4, link, o.data).step, 1e-15);
  EXPECT_DOUBLE_EQ(grid_step(p, {1, 4, 1}, link, o).step.step, pipeline_step(p, 4, 4, link).step);
  EXPECT_NEAR(grid_step(p, {1, 1, 4}, link, o).step.step, tensor_parallel_step(p, 4, link).step, 1e-15);
  EXPECT_NEAR(grid_step(p, {1, 1, 1}, link, o).step.step, p.compute_seconds(), 1e-15);
  // dp copies each process a batch; a pipeline or tp group processes one.
  EXPECT_DOUBLE_EQ(grid_step(p, {2, 2, 1}, link, o).step.samples, 2.0 * p.batch);
  EXPECT_DOUBLE_EQ(grid_step(p, {1, 2, 2}, link, o).step.samples, p.batch);
}

// Two layers of 1 ms forward and 2 ms backward, 1 MB of gradients each; the
// cut between them carries 1 kB.
StepProfile two_heavy_layers() {
  StepProfile p;
  p.net = "two";
  p.batch = 4;
  p.layers = {layer("L0", 1e-3, 2e-3, 1e6, 1e6, 1e3), layer("L1", 1e-3, 2e-3, 1e6, 1e6, 0)};
  return p;
}

TEST(EstimateGrid, StepMatchesHandComputedCase) {
  const StepProfile p = two_heavy_layers();
  GridOptions o;
  o.micro_batches = 4;
  const Link link = test_link();
  // dp 2: one 2 MB bucket, ready when backward ends (4 ms); a ring of 2 takes
  // 2 MB / 1 GB/s = 2 ms after it: step = 2 + 4 + 2 = 8 ms.
  EXPECT_NEAR(grid_step(p, {2, 1, 1}, link, o).step.step, 8e-3, 1e-12);
  // pp 2, m = 4: a slot is 3 ms / 4 + 2 x 250 ns (the cut both ways); 5 slots.
  const double pipe = 5 * (0.75e-3 + 500e-9);
  EXPECT_NEAR(grid_step(p, {1, 2, 1}, link, o).step.step, pipe, 1e-12);
  // dp 2 x pp 2: each stage's group allreduces its own 1 MB (1 ms) from the
  // moment its last micro-batch's backward (0.5 ms) ends: 1 ms exposed.
  const GridEstimate g = grid_step(p, {2, 2, 1}, link, o);
  EXPECT_NEAR(g.step.step, pipe + 1e-3, 1e-12);
  EXPECT_EQ(g.step.workers, 4);
}

// Servers of 4 devices, their own link 100 times the network's.
NodeTopology four_per_server(int nics) {
  NodeTopology n;
  n.devices_per_node = 4;
  n.intra = test_link(1e-6, 1e11);
  n.nics_per_node = nics;
  return n;
}

TEST(EstimateGrid, ServersPutTpAndPipelinesOnTheirOwnLink) {
  const StepProfile p = four_split_layers();
  const Link network = test_link(1e-5);
  GridOptions o;
  o.micro_batches = 4;
  o.data.nodes = four_per_server(1);
  GridOptions flat = o;
  flat.data.nodes = {};
  // Every layout of 4 workers fits one server: as if the server's link were the only one.
  for (const GridShape& shape : grid_layouts(p, 4)) {
    EXPECT_NEAR(grid_step(p, shape, network, o).step.step, grid_step(p, shape, o.data.nodes.intra, flat).step.step,
                1e-15)
        << shape.str();
  }
  // Pure dp over 4 servers equals the dp-ring strategy's hierarchical allreduce, with 1 or 4 adapters.
  for (int nics : {1, 4}) {
    o.data.nodes = four_per_server(nics);
    EXPECT_NEAR(grid_step(p, {16, 1, 1}, network, o).step.step, data_parallel_step(p, 16, network, o.data).step,
                1e-15)
        << nics << " adapters";
  }
  o.data.nodes = four_per_server(1);
  // tp 4 inside each server: its collectives on the server's link, as a
  // tp group alone there; the dp group's 4 ranks are one per server, a
  // flat ring over the network at a quarter of the one adapter each.
  const GridEstimate inside = grid_step(p, {4, 1, 4}, network, o);
  const double tp_inside = tensor_parallel_step(p, 4, o.data.nodes.intra).step;
  GridOptions dp_only = flat;
  Link quarter = network;
  quarter.bandwidth /= 4;
  const StepProfile rank = tensor_parallel_rank_profile(p, 4, o.data.nodes.intra);
  EXPECT_NEAR(inside.step.step, tp_inside + data_parallel_step(rank, 4, quarter, dp_only.data).exposed, 1e-12);
  // tp 8 straddles two servers: over the network, and less throughput than tp 2 x dp 4.
  const double tp8_network = grid_step(p, {1, 1, 8}, network, flat).step.step;
  ASSERT_LT(grid_step(p, {1, 1, 8}, o.data.nodes.intra, flat).step.step, tp8_network);
  const GridEstimate across = grid_step(p, {2, 1, 8}, network, o);
  EXPECT_GE(across.step.step, tp8_network - 1e-15);
  EXPECT_LT(across.step.throughput(), grid_step(p, {4, 1, 2}, network, o).step.throughput());
  // A faster server link never predicts a slower step.
  for (const GridShape& shape : grid_layouts(p, 16)) {
    GridOptions faster = o;
    faster.data.nodes.intra.bandwidth *= 10;
    EXPECT_LE(grid_step(p, shape, network, faster).step.step, grid_step(p, shape, network, o).step.step + 1e-15)
        << shape.str();
  }
}

TEST(EstimateGrid, RankingFollowsThroughputAndTheLink) {
  const StepProfile p = two_heavy_layers();
  GridOptions o;
  o.micro_batches = 4;
  // Slow link: dp 2 takes 8 ms for 2 batches (4 ms each), the pipeline 3.75 ms for one.
  GridRanking r = rank_grid(p, 2, test_link(), o, 0);
  ASSERT_EQ(r.fitting.size(), 2u);
  EXPECT_TRUE(r.too_big.empty());
  EXPECT_EQ(names(r.fitting), "dp 1 x pp 2 x tp 1, dp 2 x pp 1 x tp 1");
  // A link 1000 times faster: dp 2 takes 6.002 ms for 2 batches (3.001 ms each).
  r = rank_grid(p, 2, test_link(0, 1e12), o, 0);
  EXPECT_EQ(names(r.fitting), "dp 2 x pp 1 x tp 1, dp 1 x pp 2 x tp 1");
  // 4 workers of a two-layer net: 4x1x1 and 2x2x1. dp 4: a ring of 4 takes
  // 3 ms after backward, 4 batches in 9 ms (2.25 ms each); dp 2 x pp 2: 2
  // batches in 3.7525 + 1 ms (2.376 ms each).
  r = rank_grid(p, 4, test_link(), o, 0);
  EXPECT_EQ(names(r.fitting), "dp 4 x pp 1 x tp 1, dp 2 x pp 2 x tp 1");
}

TEST(EstimateGrid, LayoutsThatNeedMoreThanTheMemoryDoNotFit) {
  const StepProfile p = two_heavy_layers();
  GridOptions o;
  o.micro_batches = 4;
  const Link link = test_link();
  // dp 2: the whole net: 2 MB weights + 2 MB gradients + 2 MB momentum + 2 kB
  // of outputs and their gradients. pp 2: half of it on each stage, and 2
  // micro-batches of 250 bytes kept twice on stage 0 (1F1B).
  const double whole = 6e6 + 2e3, half = 3e6 + 1e3;
  EXPECT_DOUBLE_EQ(grid_step(p, {2, 1, 1}, link, o).memory.total(), whole);
  EXPECT_DOUBLE_EQ(grid_step(p, {1, 2, 1}, link, o).memory.total(), half);
  GridRanking r = rank_grid(p, 2, link, o, 4e6);
  EXPECT_EQ(names(r.fitting), "dp 1 x pp 2 x tp 1");
  EXPECT_EQ(names(r.too_big), "dp 2 x pp 1 x tp 1");
  // With the faster link dp 2 would rank first, but it still does not fit.
  r = rank_grid(p, 2, test_link(0, 1e12), o, 4e6);
  EXPECT_EQ(names(r.fitting), "dp 1 x pp 2 x tp 1");
  r = rank_grid(p, 2, link, o, 1e6);
  EXPECT_TRUE(r.fitting.empty());
  EXPECT_EQ(names(r.too_big), "dp 1 x pp 2 x tp 1, dp 2 x pp 1 x tp 1");  // smallest first
  // Exactly the memory it needs fits.
  EXPECT_EQ(rank_grid(p, 2, link, o, half).fitting.size(), 1u);
}

TEST(EstimateGrid, MoreMemoryNeverRemovesALayout) {
  const StepProfile p = four_split_layers();
  GridOptions o;
  o.micro_batches = 4;
  for (PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB}) {
    o.memory.schedule = schedule;
    for (int workers : {1, 2, 4, 8}) {
      std::vector<std::string> before;
      for (double limit = 100; limit <= 1e5; limit *= 1.5) {
        const GridRanking r = rank_grid(p, workers, test_link(1e-6), o, limit);
        std::vector<std::string> now;
        for (const GridEstimate& g : r.fitting) now.push_back(g.shape.str());
        for (const std::string& s : before) {
          EXPECT_NE(std::find(now.begin(), now.end(), s), now.end()) << s << " dropped at " << limit << " bytes";
        }
        EXPECT_EQ(r.fitting.size() + r.too_big.size(), grid_layouts(p, workers).size());
        before = now;
      }
      EXPECT_EQ(before.size(), grid_layouts(p, workers).size()) << "all fit in 100 kB";
    }
  }
}

TEST(EstimateGrid, TimesFileCarriesParamAndActivationBytes) {
  const std::string path = ::testing::TempDir() + "estimate_grid_times.csv";
  write_times_file(path, four_layers(), "test");
  StepProfile q = read_times_file(path);
  ASSERT_EQ(q.layers.size(), 4u);
  EXPECT_EQ(q.layers[2].param_bytes, 300);
  EXPECT_EQ(q.layers[2].grad_bytes, 200);
  EXPECT_EQ(q.layers[1].activation_bytes, 800);
  EXPECT_EQ(q.activation_scale, 2.0);  // four_layers() keeps the default
  StepProfile planned = four_layers();
  planned.activation_scale = 1.234567891;
  write_times_file(path, planned, "test");
  EXPECT_DOUBLE_EQ(read_times_file(path).activation_scale, 1.234567891);
  // A file without the columns: every parameter learnable, no layer in place.
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("layer,forward_ms,backward_ms,grad_bytes,top_bytes\nfc,1,2,4096,512\n", f);
  std::fclose(f);
  q = read_times_file(path);
  EXPECT_EQ(q.layers[0].param_bytes, 4096);
  EXPECT_EQ(q.layers[0].activation_bytes, 512);
  EXPECT_EQ(q.activation_scale, 2.0);  // older files: Caffe's layout
  f = std::fopen(path.c_str(), "w");
  std::fputs("# activation_scale: lots\nlayer,forward_ms,backward_ms,grad_bytes\nfc,1,2,4096\n", f);
  std::fclose(f);
  EXPECT_CONTAINS(test::error_of<ConfigError>([&] { read_times_file(path); }),
                  ":1: '# activation_scale:' must be a number >= 0, got 'lots'");
  std::remove(path.c_str());
}

// Sharded data parallel on dp 4 over a 1 GB/s link without latency, one
// bucket of the 500 gradient bytes: the ring allreduce takes 2 x 3/4 x 500
// ns; OPTIMIZER and GRADIENTS reduce-scatter (3/4 x 500) and allgather the
// weights once after the update (the same bytes in all), PARAMETERS in
// forward and backward (1.5 times them), hidden behind their compute.
// The optimizer state shrinks to 1/4; with PARAMETERS the weights too, plus
// the largest layer's (L2: 300 bytes) gathered whole.
TEST(EstimateGrid, ShardStagesMemoryAndCommunication) {
  const StepProfile p = four_layers();
  GridOptions o;
  const GridShape dp4{4, 1, 1};
  const GridEstimate none = grid_step(p, dp4, test_link(), o);
  const GridEstimate one = grid_step(p, dp4, test_link(), o, parallel::ShardStage::kOptimizer);
  const GridEstimate two = grid_step(p, dp4, test_link(), o, parallel::ShardStage::kGradients);
  const GridEstimate three = grid_step(p, dp4, test_link(), o, parallel::ShardStage::kParameters);
  EXPECT_DOUBLE_EQ(none.step.communication, 750e-9);
  EXPECT_DOUBLE_EQ(one.step.communication, 750e-9);
  EXPECT_DOUBLE_EQ(two.step.communication, 750e-9);
  EXPECT_DOUBLE_EQ(three.step.communication, 1125e-9);
  // Forward 4 ms, backward 8 ms; the one bucket is final when backward
  // ends. The gather after the update shows; stage 3's hide behind the passes.
  EXPECT_NEAR(none.step.step, 12e-3 + 750e-9, 1e-12);
  EXPECT_NEAR(one.step.step, 12e-3 + 375e-9 + 375e-9, 1e-12);
  EXPECT_NEAR(three.step.step, 12e-3 + 375e-9, 1e-12);
  // On a link 1e5 times slower each gather (37.5 ms) outlasts its pass (4 and 8 ms).
  const GridEstimate slow = grid_step(p, dp4, test_link(0.0, 1e4), o, parallel::ShardStage::kParameters);
  EXPECT_NEAR(slow.step.step, 12e-3 + 37.5e-3 + (37.5e-3 - 4e-3) + (37.5e-3 - 8e-3), 1e-9);
  EXPECT_DOUBLE_EQ(none.memory.optimizer, 500);
  EXPECT_DOUBLE_EQ(one.memory.optimizer, 125);
  EXPECT_DOUBLE_EQ(two.memory.optimizer, 125);
  EXPECT_DOUBLE_EQ(three.memory.optimizer, 125);
  EXPECT_DOUBLE_EQ(one.memory.weights, 600 + 125);  // and the slice's weights that the optimizer updates
  EXPECT_DOUBLE_EQ(three.memory.weights, 100 + 125 + 300);  // the buffer, 1/4 of 500, L2 gathered
  // One 25 MiB bucket of all 500 gradient bytes: one slot of it on every
  // stage, and the reduced slice (1/4).
  EXPECT_DOUBLE_EQ(none.memory.gradients, 500);
  EXPECT_DOUBLE_EQ(one.memory.gradients, 500 + 125);
  EXPECT_DOUBLE_EQ(two.memory.gradients, 500 + 125);
  // Buckets of 100 bytes: L2's 200, L1's 200, L0's 100 in launch order.
  // OPTIMIZER keeps all three; GRADIENTS two slots used in turn, of
  // max(200, 100) and 200 bytes.
  GridOptions small = o;
  small.data.bucket_bytes = 100;
  EXPECT_DOUBLE_EQ(grid_step(p, dp4, test_link(), small, parallel::ShardStage::kOptimizer).memory.gradients, 500 + 125);
  EXPECT_DOUBLE_EQ(grid_step(p, dp4, test_link(), small, parallel::ShardStage::kGradients).memory.gradients, 400 + 125);
  EXPECT_EQ(layout_name(three), "dp 4 x pp 1 x tp 1, shard PARAMETERS");
  EXPECT_EQ(layout_name(none), "dp 4 x pp 1 x tp 1");

  // Ranked with every stage: every layout with dp > 1 (dp 4 and dp 2 x pp
  // 2), pp 4 plain.
  o.shards = {parallel::ShardStage::kNone, parallel::ShardStage::kOptimizer, parallel::ShardStage::kGradients,
              parallel::ShardStage::kParameters};
  const GridRanking r = rank_grid(p, 4, test_link(), o, 0);
  EXPECT_EQ(r.fitting.size(), grid_layouts(p, 4).size() + 3 + 3);
  for (const GridEstimate& g : r.fitting) {
    if (g.shard != parallel::ShardStage::kNone) {
      EXPECT_GT(g.shape.dp, 1) << layout_name(g);
    }
  }
  // dp 2 x pp 2 (8 micro-batches): each stage sliced over its dp group of
  // 2. Stage 0 holds L0 and L1 (300 bytes of weights, 300 of gradients),
  // stage 1 L2 and L3 (300 of weights, 200 of gradients). The micro-batches'
  // gradients add up, so GRADIENTS keeps every bucket as OPTIMIZER does.
  const GridShape g22{2, 2, 1};
  const GridEstimate plain22 = grid_step(p, g22, test_link(), o);
  const GridEstimate opt22 = grid_step(p, g22, test_link(), o, parallel::ShardStage::kOptimizer);
  const GridEstimate grad22 = grid_step(p, g22, test_link(), o, parallel::ShardStage::kGradients);
  EXPECT_EQ(plain22.memory.stage, opt22.memory.stage);
  const double stage_grads = plain22.memory.stage == 0 ? 300 : 200;
  EXPECT_DOUBLE_EQ(opt22.memory.optimizer, plain22.memory.optimizer / 2);
  EXPECT_DOUBLE_EQ(opt22.memory.gradients, plain22.memory.gradients + stage_grads / 2);
  EXPECT_DOUBLE_EQ(opt22.memory.weights, plain22.memory.weights + stage_grads / 2);
  EXPECT_DOUBLE_EQ(grad22.memory.gradients, opt22.memory.gradients);
  // Nothing hides this pipeline's exchange after its last micro-batch: an
  // allreduce, or a reduce-scatter and the weights' allgather of the same bytes.
  EXPECT_NEAR(opt22.step.step, plain22.step.step, 1e-12);
  EXPECT_NEAR(opt22.step.communication, plain22.step.communication, 1e-12);
  // PARAMETERS under the pipeline: the weights gathered for each of the 8
  // micro-batches' two passes, 16 allgathers of the stage's weights.
  const GridEstimate three22 = grid_step(p, g22, test_link(), o, parallel::ShardStage::kParameters);
  EXPECT_NEAR(three22.step.communication - opt22.step.communication,
              (16 - 1) * 0.5 * stage_grads / 1e9, 1e-15);
  // With tensor parallelism alone PARAMETERS slices each tp rank's weights over its dp group.
  const GridShape g2t2{2, 1, 2};
  const GridEstimate plain2t2 = grid_step(four_split_layers(), g2t2, test_link(), o);
  const GridEstimate three2t2 = grid_step(four_split_layers(), g2t2, test_link(), o, parallel::ShardStage::kParameters);
  // A tp rank holds L0 100, L1 100 (of 200), L2 150 (of 300) bytes of
  // weights; 300 of them updated: half of those, plus L2's gathered whole.
  EXPECT_DOUBLE_EQ(plain2t2.memory.weights, 350);
  EXPECT_DOUBLE_EQ(three2t2.memory.weights, 350 - 300 + 150 + 150);
  EXPECT_DOUBLE_EQ(three2t2.memory.optimizer, plain2t2.memory.optimizer / 2);

  // PARAMETERS' own total per device: only it fits among the dp-only layouts.
  const GridRanking tight = rank_grid(p, 4, test_link(), o, 100 + 125 + 300 + (500 + 125) + 125 + three.memory.activations);
  bool three_fits = false;
  for (const GridEstimate& g : tight.fitting) {
    if (g.shape.pp == 1) {
      EXPECT_EQ(g.shard, parallel::ShardStage::kParameters) << layout_name(g);
      three_fits = true;
    }
  }
  EXPECT_TRUE(three_fits);
}

}  // namespace
}  // namespace strata::estimate
