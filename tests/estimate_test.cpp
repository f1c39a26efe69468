// The cost model of strata estimate (parallel/estimate/) against
// hand-computed cases, and properties any sound model keeps.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "framework/error.h"
#include "parallel/estimate/collectives_cost.h"
#include "parallel/estimate/data_parallel_cost.h"
#include "parallel/estimate/parameter_server_cost.h"
#include "parallel/estimate/pipeline_cost.h"
#include "parallel/estimate/speedup_chart.h"
#include "parallel/estimate/strategies.h"
#include "parallel/estimate/tensor_parallel_cost.h"
#include "parallel/estimate/times_file.h"

namespace strata::estimate {
namespace {

// 1 GB/s: S bytes take S ns, so the hand arithmetic below stays readable.
Link test_link(double latency) { return {"test", 1e9, latency, "test"}; }

LayerProfile layer(const std::string& name, double forward, double backward, double grad_bytes,
                   double top_bytes = 0) {
  LayerProfile l;
  l.name = name;
  l.forward = forward;
  l.backward = backward;
  l.grad_bytes = grad_bytes;
  l.top_bytes = top_bytes;
  return l;
}

// Three layers; backward runs L2 (1 ms), L1 (2 ms), L0 (3 ms), so their
// gradients are final at 1, 3 and 6 ms. Forward is 1 ms in all.
StepProfile three_layers() {
  StepProfile p;
  p.net = "three";
  p.batch = 10;
  p.layers = {layer("L0", 0.0004, 0.003, 2e6), layer("L1", 0.0003, 0.002, 1e6), layer("L2", 0.0003, 0.001, 1e6)};
  return p;
}

TEST(EstimateCollectives, RingAllreduceMatchesHandComputedCase) {
  // 2(n-1)·alpha + 2(n-1)/n · S/B with n = 4, S = 1 MB, alpha = 10 us: 60 us + 1.5 ms.
  EXPECT_NEAR(ring_allreduce_seconds(4, 1e6, test_link(1e-5)), 1.56e-3, 1e-12);
  EXPECT_NEAR(ring_allreduce_seconds(2, 1e6, test_link(0)), 1e-3, 1e-12);
  EXPECT_EQ(ring_allreduce_seconds(1, 1e6, test_link(1e-5)), 0.0);
  EXPECT_NEAR(ring_allreduce_seconds(8, 0, test_link(1e-5)), 14e-5, 1e-12);  // latency terms only
}

TEST(EstimateCollectives, TreeBroadcastAllgatherReduceScatterMatchHandComputedCases) {
  const Link link = test_link(1e-5);
  EXPECT_EQ(tree_rounds(1), 0);
  EXPECT_EQ(tree_rounds(4), 2);
  EXPECT_EQ(tree_rounds(5), 3);
  // 2·ceil(log2 n)·(alpha + S/B): n = 4 -> 4 · 1.01 ms, n = 5 -> 6 · 1.01 ms.
  EXPECT_NEAR(tree_allreduce_seconds(4, 1e6, link), 4.04e-3, 1e-12);
  EXPECT_NEAR(tree_allreduce_seconds(5, 1e6, link), 6.06e-3, 1e-12);
  EXPECT_NEAR(broadcast_seconds(8, 1e6, link), 3.03e-3, 1e-12);
  // (n-1)·alpha + (n-1)/n · S/B: 30 us + 0.75 ms.
  EXPECT_NEAR(ring_allgather_seconds(4, 1e6, link), 0.78e-3, 1e-12);
  EXPECT_NEAR(ring_reduce_scatter_seconds(4, 1e6, link), 0.78e-3, 1e-12);
  EXPECT_EQ(tree_allreduce_seconds(1, 1e6, link), 0.0);
}

TEST(EstimateDataParallel, BucketsFollowGradientReadyOrder) {
  // A 1.5 MB cap: L2 alone (ready 1 ms), L1 would overflow it (ready 3 ms),
  // L0 is larger than the cap and gets its own (ready 6 ms).
  const auto buckets = gradient_buckets(three_layers(), 1.5e6);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_DOUBLE_EQ(buckets[0].bytes, 1e6);
  EXPECT_NEAR(buckets[0].ready, 1e-3, 1e-12);
  EXPECT_NEAR(buckets[1].ready, 3e-3, 1e-12);
  EXPECT_DOUBLE_EQ(buckets[2].bytes, 2e6);
  EXPECT_NEAR(buckets[2].ready, 6e-3, 1e-12);
  // A 2.5 MB cap puts L2 and L1 together.
  const auto two = gradient_buckets(three_layers(), 2.5e6);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_DOUBLE_EQ(two[0].bytes, 2e6);
  EXPECT_NEAR(two[0].ready, 3e-3, 1e-12);
}

TEST(EstimateDataParallel, OverlapOnHandMadeThreeLayerNet) {
  // Two ranks, alpha 0, 1 GB/s: a ring allreduce of S bytes takes S ns.
  const Link link = test_link(0);
  DataParallelOptions o;
  o.bucket_bytes = 1.5e6;
  // Wire: b0 1->2 ms, b1 3->4 ms, b2 6->8 ms; step = forward 1 + max(backward 6, 8) = 9 ms.
  StepEstimate e = data_parallel_step(three_layers(), 2, link, o);
  EXPECT_NEAR(e.step, 9e-3, 1e-12);
  EXPECT_NEAR(e.exposed, 2e-3, 1e-12);
  EXPECT_NEAR(e.communication, 4e-3, 1e-12);
  EXPECT_DOUBLE_EQ(e.samples, 20);
  // 2.5 MB buckets: b0 (2 MB) 3->5 ms, b1 6->8 ms: also 9 ms.
  o.bucket_bytes = 2.5e6;
  EXPECT_NEAR(data_parallel_step(three_layers(), 2, link, o).step, 9e-3, 1e-12);
  // One 25 MiB bucket is ready only when backward ends: 1 + 6 + 4 = 11 ms,
  // what no overlap costs too.
  o.bucket_bytes = 25.0 * (1 << 20);
  EXPECT_NEAR(data_parallel_step(three_layers(), 2, link, o).step, 11e-3, 1e-12);
  o.overlap = parallel::Overlap::kOff;
  o.bucket_bytes = 1.5e6;
  e = data_parallel_step(three_layers(), 2, link, o);
  EXPECT_NEAR(e.step, 11e-3, 1e-12);
  // FP16 on the wire halves the bytes: 1 + 6 + 2 = 9 ms.
  o.wire_bytes_per_gradient_byte = 0.5;
  EXPECT_NEAR(data_parallel_step(three_layers(), 2, link, o).step, 9e-3, 1e-12);
  // One worker reduces nothing.
  EXPECT_NEAR(data_parallel_step(three_layers(), 1, link, o).step, 7e-3, 1e-12);
}

TEST(EstimateDataParallel, SpeedupAndEfficiencyAreRelativeToOneWorkerAlone) {
  DataParallelOptions o;
  o.bucket_bytes = 1.5e6;
  const StepProfile p = three_layers();
  const StepEstimate e = data_parallel_step(p, 2, test_link(0), o);
  // 20 samples in 9 ms against 10 in 7 ms.
  EXPECT_NEAR(speedup(e, p), 2 * 7.0 / 9.0, 1e-9);
  EXPECT_NEAR(efficiency(e, p), 7.0 / 9.0, 1e-9);
}

StepProfile one_second_step(double grad_bytes) {
  StepProfile p;
  p.batch = 1;
  p.layers = {layer("a", 0.4, 0.6, grad_bytes)};
  return p;
}

TEST(EstimateParameterServer, CentralWorstAndBestMatchHandComputedCases) {
  // C = 1 s, G = 1 GB at 1 GB/s: one exchange (push + pull) t = 2 s.
  const StepProfile p = one_second_step(1e9);
  const Link link = test_link(0);
  // Worst: C + 2·n·G/B = 1 + 8 = 9 s for n = 4.
  EXPECT_NEAR(central_server_step(p, 4, link, ServerArrangement::kWorst).step, 9.0, 1e-9);
  // Best: max(C + t, n·t) = max(3, 8) = 8 s for n = 4; the server is idle-free.
  EXPECT_NEAR(central_server_step(p, 4, link, ServerArrangement::kBest).step, 8.0, 1e-9);
  // ... and compute-bound for one worker: max(3, 2) = 3 s.
  EXPECT_NEAR(central_server_step(p, 1, link, ServerArrangement::kBest).step, 3.0, 1e-9);
  // Latency counts once per push and once per pull: worst = 1 + 2·(0.5 + 4) = 10 s.
  EXPECT_NEAR(central_server_step(p, 4, test_link(0.5), ServerArrangement::kWorst).step, 10.0, 1e-9);
}

TEST(EstimateParameterServer, ShardedServerSharesTheLoad) {
  const StepProfile p = one_second_step(1e9);
  const Link link = test_link(0);
  // K = 2 shards for 4 workers: each shard link carries 2 G per direction: 1 + 4 = 5 s.
  EXPECT_NEAR(sharded_server_step(p, 4, 2, link).step, 5.0, 1e-9);
  // More shards than workers: each worker's own link (G each way) is the limit: 1 + 2 = 3 s.
  EXPECT_NEAR(sharded_server_step(p, 4, 8, link).step, 3.0, 1e-9);
  // One shard is the central worst case.
  EXPECT_NEAR(sharded_server_step(p, 4, 1, link).step,
              central_server_step(p, 4, link, ServerArrangement::kWorst).step, 1e-9);
}

TEST(EstimatePipeline, BubbleFraction) {
  EXPECT_DOUBLE_EQ(bubble_fraction(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(2, 1), 0.5);
  for (int m = 1; m < 64; ++m) EXPECT_LE(bubble_fraction(4, m + 1), bubble_fraction(4, m));
}

TEST(EstimatePipeline, StepIsSlotsTimesSlowestStage) {
  StepProfile p;
  p.batch = 8;
  p.layers = {layer("a", 0.4, 0.6, 0, 0), layer("b", 0.4, 0.6, 0)};
  // Two stages of 1 s each, 4 micro-batches: slot 0.25 s, (4 + 2 - 1) slots.
  EXPECT_NEAR(pipeline_step(p, 2, 4, test_link(0)).step, 1.25, 1e-12);
  EXPECT_NEAR(pipeline_step(p, 2, 4, test_link(0)).samples, 8, 1e-12);
  // 1 MB of activations per micro-batch each way: 2 ms more per slot.
  p.layers[0].top_bytes = 4e6;
  EXPECT_NEAR(pipeline_step(p, 2, 4, test_link(0)).step, 5 * 0.252, 1e-12);
  p.layers[0].top_bytes = 4e9;  // 1 GB per micro-batch: 2 s of transfer per slot
  EXPECT_NEAR(pipeline_step(p, 2, 4, test_link(0)).step, 5 * 2.25, 1e-9);
  // One stage is the net itself.
  EXPECT_NEAR(pipeline_step(p, 1, 4, test_link(0)).step, 2.0, 1e-12);
  const StepEstimate none = pipeline_step(p, 3, 4, test_link(0));
  EXPECT_FALSE(none.feasible);
  EXPECT_NE(none.note.find("2 layers"), std::string::npos) << none.note;
}

// Two layers of forward 2 s, backward 4 s; 2 micro-batches: each stage's
// forward takes 1 s and its backward 2 s per micro-batch. 1F1B ops: stage
// 0 runs F0 F1 B0 B1, stage 1 runs F0 B0 F1 B1.
StepProfile two_stage_net() {
  StepProfile p;
  p.batch = 8;
  p.layers = {layer("a", 2, 4, 0, 0), layer("b", 2, 4, 0)};
  return p;
}

TEST(EstimatePipeline, SimulatedScheduleWithACoreEachMatchesTheSlotFormula) {
  const StepProfile p = two_stage_net();
  // Unshared: s0 F0 [0,1], F1 [1,2]; s1 F0 [1,2], B0 [2,4], F1 [4,5],
  // B1 [5,7]; s0 B0 [4,6], B1 [7,9]: 9 s = (2 + 2 - 1) slots of 3 s.
  for (auto schedule : {parallel::PipelineSchedule::kOneFOneB, parallel::PipelineSchedule::kGPipe}) {
    EXPECT_NEAR(pipeline_step_on_cores(p, 2, 2, test_link(0), 2, schedule).step, 9.0, 1e-9);
    EXPECT_NEAR(pipeline_step_on_cores(p, 2, 2, test_link(0), 2, schedule).step,
                pipeline_step(p, 2, 2, test_link(0)).step, 1e-9);
  }
  // One stage is the net itself, however many cores.
  EXPECT_NEAR(pipeline_step_on_cores(p, 1, 2, test_link(0), 1, parallel::PipelineSchedule::kOneFOneB).step, 12.0,
              1e-9);
}

TEST(EstimatePipeline, StagesSharingOneCoreTakeTheWholeWork) {
  const StepProfile p = two_stage_net();
  // One core, 1F1B: s0 F0 alone [0,1]; s0 F1 and s1 F0 at half speed
  // [1,3]; s1 B0 alone [3,5]; s0 B0 and s1 F1 at half speed until s1 F1
  // ends at 7; s0 B0's last second and s1 B1 at half speed until 9; s1 B1
  // alone [9,10]; s0 B1 alone [10,12]. The core never idles: 12 s, the
  // one-process step, where slowing each stage by stages / cores would say
  // 2 x 9 = 18 s.
  const StepEstimate e = pipeline_step_on_cores(p, 2, 2, test_link(0), 1, parallel::PipelineSchedule::kOneFOneB);
  EXPECT_NEAR(e.step, 12.0, 1e-9);
  EXPECT_NEAR(pipeline_step(on_shared_cores(p, 2, 1), 2, 2, test_link(0)).step, 18.0, 1e-9);
  // A copy of 1 GB each way per micro-batch is 1 s of work on each side:
  // 2 micro-batches x 2 directions x 2 sides x 1 s more on the one core.
  StepProfile big = p;
  big.layers[0].top_bytes = 2e9;
  EXPECT_NEAR(pipeline_step_on_cores(big, 2, 2, test_link(0), 1, parallel::PipelineSchedule::kGPipe).step, 20.0,
              1e-9);
  // One micro-batch is a chain: no two stages ever run at once.
  EXPECT_NEAR(pipeline_step_on_cores(p, 2, 1, test_link(0), 1, parallel::PipelineSchedule::kGPipe).step, 12.0, 1e-9);
}

TEST(EstimatePipeline, SharedCoresLieBetweenTheWorkBoundAndTheSlowedFormula) {
  StepProfile p;
  p.batch = 64;
  for (int i = 0; i < 9; ++i) p.layers.push_back(layer("l" + std::to_string(i), 0.001 * (i % 3 + 1), 0.002, 0, 1e5));
  const double work = p.compute_seconds();
  for (int stages = 2; stages <= 6; ++stages) {
    for (int cores = 1; cores <= stages; ++cores) {
      for (auto schedule : {parallel::PipelineSchedule::kOneFOneB, parallel::PipelineSchedule::kGPipe}) {
        const StepEstimate e = pipeline_step_on_cores(p, stages, 8, test_link(0), cores, schedule);
        EXPECT_GE(e.step, work / cores - 1e-12) << stages << " stages, " << cores << " cores";
        EXPECT_LE(e.step, pipeline_step(on_shared_cores(p, stages, cores), stages, 8, test_link(0)).step + 1e-12)
            << stages << " stages, " << cores << " cores";
        // More cores never predict slower.
        if (cores > 1) {
          EXPECT_LE(e.step, pipeline_step_on_cores(p, stages, 8, test_link(0), cores - 1, schedule).step + 1e-12);
        }
      }
    }
  }
  EXPECT_FALSE(pipeline_step_on_cores(p, 10, 8, test_link(0), 2, parallel::PipelineSchedule::kGPipe).feasible);
}

TEST(EstimatePipeline, HostCoresOptionSimulatesOnlyThePipeline) {
  const StepProfile p = two_stage_net();
  StrategyOptions o;
  o.micro_batches = 2;
  o.host_cores = 1;
  EXPECT_NEAR(estimate_step(Strategy::kPipeline, p, 2, test_link(0), o).step, 12.0, 1e-9);
  // Data parallel: both workers' compute at half speed.
  EXPECT_NEAR(estimate_step(Strategy::kDpNoOverlap, p, 2, test_link(0), o).step, 24.0, 1e-6);
  // 3 workers on 2 cores: one core holds two of them, and the step waits
  // for it: 2 x 12 s, not 1.5 x; 4 workers on 2 cores take no longer.
  o.host_cores = 2;
  EXPECT_NEAR(estimate_step(Strategy::kDpNoOverlap, p, 3, test_link(0), o).step, 24.0, 1e-6);
  EXPECT_NEAR(estimate_step(Strategy::kDpNoOverlap, p, 4, test_link(0), o).step, 24.0, 1e-6);
  EXPECT_NEAR(estimate_step(Strategy::kDpNoOverlap, p, 2, test_link(0), o).step, 12.0, 1e-6);
}

TEST(EstimateTensorParallel, CollectivesPerSplitLayer) {
  StepProfile p;
  p.batch = 4;
  p.layers = {layer("fc1", 0.1, 0.3, 0, 1e6), layer("relu", 0.05, 0.05, 0), layer("fc2", 0.1, 0.3, 0, 1e6)};
  p.layers[0].split = "COLUMN";
  p.layers[0].bottom_bytes = 2e6;
  p.layers[2].split = "ROW";
  const Link link = test_link(0);
  // COLUMN: allreduce of the 2 MB input gradient over 2 ranks: 2 ms; ROW: of the 1 MB top: 1 ms.
  EXPECT_NEAR(tensor_parallel_layer_seconds(p.layers[0], 2, link), 2e-3, 1e-12);
  EXPECT_NEAR(tensor_parallel_layer_seconds(p.layers[2], 2, link), 1e-3, 1e-12);
  EXPECT_EQ(tensor_parallel_layer_seconds(p.layers[1], 2, link), 0.0);
  // Compute: (0.4 + 0.4) / 2 + 0.1 = 0.5 s, plus 3 ms.
  EXPECT_NEAR(tensor_parallel_step(p, 2, link).step, 0.503, 1e-12);
  EXPECT_TRUE(has_split_layers(p));
  p.layers[0].split = "DIAGONAL";
  EXPECT_THROW(tensor_parallel_step(p, 2, link), ConfigError);
}

// More bandwidth or less latency never predicts a slower step; no strategy
// beats ideal scaling; ring allreduce never gets cheaper with more ranks.
TEST(EstimateProperties, Monotonic) {
  StepProfile p = three_layers();
  p.layers[0].top_bytes = 3e5;
  p.layers[1].top_bytes = 2e5;
  p.layers[1].split = "COLUMN";
  p.layers[1].bottom_bytes = 3e5;
  StrategyOptions o;
  o.data.bucket_bytes = 1.5e6;
  o.micro_batches = 4;
  for (Strategy s : all_strategies()) {
    for (int n : {1, 2, 3, 4, 8, 16, 64, 1024}) {
      for (double bw : {1e8, 1e9, 1e10}) {
        for (double alpha : {0.0, 1e-6, 1e-4}) {
          const Link slow{"slow", bw, alpha, ""}, fast{"fast", 2 * bw, alpha, ""}, near{"near", bw, alpha / 2, ""};
          const StepEstimate a = estimate_step(s, p, n, slow, o);
          if (!a.feasible) continue;
          SCOPED_TRACE(std::string(strategy_name(s)) + " n=" + std::to_string(n));
          EXPECT_LE(estimate_step(s, p, n, fast, o).step, a.step + 1e-15);
          EXPECT_LE(estimate_step(s, p, n, near, o).step, a.step + 1e-15);
          EXPECT_LE(speedup(a, p), n + 1e-9);
          EXPECT_GE(a.step, 0.0);
        }
      }
    }
  }
  for (int n = 2; n < 256; ++n) {
    EXPECT_GE(ring_allreduce_seconds(n + 1, 1e6, test_link(1e-6)), ring_allreduce_seconds(n, 1e6, test_link(1e-6)));
    // ... and its bandwidth term stays under 2 S / B.
    EXPECT_LE(ring_allreduce_seconds(n, 1e6, test_link(0)), 2e-3);
  }
  // Without latency, overlapping buckets never loses to one allreduce at the end.
  DataParallelOptions overlap, none;
  overlap.bucket_bytes = none.bucket_bytes = 1.5e6;
  none.overlap = parallel::Overlap::kOff;
  for (int n = 2; n <= 64; n *= 2) {
    EXPECT_LE(data_parallel_step(p, n, test_link(0), overlap).step, data_parallel_step(p, n, test_link(0), none).step);
  }
}

TEST(EstimateNames, UnknownLinkAndStrategySayTheNearest) {
  EXPECT_EQ(link_preset("ib-hdr").bandwidth, 25e9);
  EXPECT_EQ(link_preset("nvlink").bandwidth, 450e9);
  EXPECT_EQ(link_preset("10gbe").bandwidth, 1.25e9);
  EXPECT_EQ(link_preset("shm", 8e9).bandwidth, 4e9);
  try {
    link_preset("ib_hdr");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'ib-hdr'"), std::string::npos) << e.what();
  }
  const auto both = parse_strategies("ps-central,dp-ring");
  ASSERT_EQ(both.size(), 3u);
  EXPECT_EQ(both[0], Strategy::kPsCentralWorst);
  EXPECT_EQ(both[1], Strategy::kPsCentralBest);
  try {
    parse_strategies("dp-rng");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'dp-ring'"), std::string::npos) << e.what();
  }
  EXPECT_GT(measure_memcpy_bandwidth(), 1e8);
}

TEST(EstimateFiles, TimesFileRoundTripsAndNamesBadRows) {
  const std::string path = ::testing::TempDir() + "estimate_times.csv";
  StepProfile p = three_layers();
  p.layers[1].split = "ROW";
  p.layers[1].top_bytes = 4096;
  write_times_file(path, p, "test");
  const StepProfile q = read_times_file(path);
  EXPECT_EQ(q.net, "three");
  EXPECT_EQ(q.batch, 10);
  ASSERT_EQ(q.layers.size(), 3u);
  EXPECT_NEAR(q.layers[0].backward, 0.003, 1e-9);
  EXPECT_EQ(q.layers[1].split, "ROW");
  EXPECT_EQ(q.layers[1].top_bytes, 4096);
  EXPECT_EQ(q.grad_bytes(), p.grad_bytes());

  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("layer,forward_ms,backward_ms,grad_bytes\nconv1,0.5,abc,0\n", f);
  std::fclose(f);
  try {
    read_times_file(path);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("backward_ms"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(EstimateChart, SvgHasOneLinePerStrategyAndEscapesNames) {
  const std::string svg =
      speedup_chart_svg("a & b", {{"dp-ring", {1, 2, 4}, {1, 1.9, 3.5}}, {"x<y", {1, 2}, {1, 1.5}}, {"none", {}, {}}});
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("a &amp; b"), std::string::npos);
  EXPECT_NE(svg.find("x&lt;y"), std::string::npos);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 2u);  // a series with no feasible point draws no line
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// The ideal speedup equals the workers on any axis: on the log2 workers axis
// it is a curve, not the straight segment from the first to the last point
// (which showed an "ideal" of 3.3 at 2 workers of 1..8). Plot area: x from 70
// over 500 px for log2 workers 0..3; y from 420 up over 370 px for 0..10.
TEST(EstimateChart, TheIdealPassesThroughWorkersEqualsSpeedup) {
  const std::string svg = speedup_chart_svg("t", {{"dp-ring", {1, 2, 4, 8}, {1, 2, 4, 8}}});
  const size_t at = svg.find("<path id=\"ideal\"");
  ASSERT_NE(at, std::string::npos) << svg;
  const std::string ideal = svg.substr(at, svg.find("/>", at) - at);
  EXPECT_NE(ideal.find(" L236.7,346.0"), std::string::npos) << "2 workers, speedup 2: " << ideal;
  EXPECT_NE(ideal.find(" L570.0,124.0"), std::string::npos) << "8 workers, speedup 8: " << ideal;
  EXPECT_NE(ideal.find("M70.0,383.0"), std::string::npos) << "1 worker, speedup 1: " << ideal;
  // The strategy predicting the ideal lies on it at every point.
  EXPECT_NE(svg.find("points=\"70.0,383.0 236.7,346.0 403.3,272.0 570.0,124.0 \""), std::string::npos) << svg;
}

// Every legend entry draws a sample of its line; equal predictions stay
// visible as dashes differ.
TEST(EstimateChart, TheLegendShowsEachLinesStyle) {
  const std::string svg = speedup_chart_svg(
      "t", {{"a", {1, 2}, {1, 1.5}}, {"b", {1, 2}, {1, 1.5}}, {"a", {2}, {1.4}, SeriesStyle::kMeasured}});
  size_t samples = 0;
  for (size_t p = svg.find("<line x1=\"582.0\""); p != std::string::npos; p = svg.find("<line x1=\"582.0\"", p + 1)) {
    ++samples;
  }
  EXPECT_EQ(samples, 4u) << svg;  // ideal, a, b, a measured
  EXPECT_NE(svg.find("stroke-dasharray=\"9,5\" points="), std::string::npos) << "b is dashed where a is solid";
}

}  // namespace
}  // namespace strata::estimate
