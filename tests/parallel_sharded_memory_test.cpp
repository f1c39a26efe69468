// Sharded data parallel's memory (parallel/data_parallel/sharded_update.h,
// gradient_slots.h): what each rank holds by the start line's formula,
// worked by hand for every stage and buffer layout; the gradient slots'
// plan; and the formula against the process's own count of its tensors at
// 1, 2 and 4 ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "framework/memory_cap.h"
#include "framework/solver/solver.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/data_parallel/grad_buckets.h"
#include "parallel/data_parallel/gradient_slots.h"
#include "parallel/data_parallel/sharded_update.h"
#include "tests/parallel_sharded_test_util.h"
#include "tests/parallel_test_util.h"
#include "tests/test_util.h"

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;
using namespace sharded_test;
using parallel_test::expect_no_errors;
using parallel_test::make_world;
using parallel_test::run_ranks;

TEST_F(ShardedTraining, MemoryAccountingPerStage) {
  Spec spec;
  Solver solver(make_config(dir_, spec));
  const std::vector<NetParam>& params = solver.net().params();
  const std::vector<GradBucket> buckets = assign_buckets(solver.net(), 4, BucketReach::kAllUpdated);
  ASSERT_EQ(buckets.size(), 4u);
  const int slots = 2;  // Adam's
  // Rank 0 of 3 owns ceil(n / 3) of each bucket: fc2.weight 60 -> 20,
  // fc2.bias 4 -> 2, fc1.weight 120 -> 40, fc1.bias 15 -> 5; 67 in all.
  ShardBuffers whole;  // OPTIMIZER: a slot per bucket, world blocks each
  whole.slots = plan_gradient_slots(solver.net(), buckets, 3, false);
  EXPECT_EQ(whole.slots.slot_numel, (std::vector<int64_t>{60, 6, 120, 15}));
  ShardBuffers turns;  // GRADIENTS, PARAMETERS: fc2's two buckets, then fc1's in the same two slots
  turns.slots = plan_gradient_slots(solver.net(), buckets, 3, true);
  EXPECT_EQ(turns.slots.slot_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(turns.slots.slot_numel, (std::vector<int64_t>{120, 15}));

  const ShardMemory none = memory_of(ShardStage::kNone, buckets, params, 0, 3, whole, slots);
  EXPECT_EQ(none.net_gradients, 199u * 4u);
  EXPECT_EQ(none.reduce_buffers, 0u) << "plain data parallel reduces in the net's gradients";
  EXPECT_EQ(none.optimizer_state, 2u * 199u * 4u);

  const ShardMemory one = memory_of(ShardStage::kOptimizer, buckets, params, 0, 3, whole, slots);
  EXPECT_EQ(one.parameters, 199u * 4u);
  EXPECT_EQ(one.net_gradients, (60u + 6u + 120u + 15u) * 4u);
  EXPECT_EQ(one.reduce_buffers, 67u * 4u) << "the slice's gradients (its weights are views of the net's)";
  EXPECT_EQ(one.optimizer_state, 2u * 67u * 4u);

  const ShardMemory two = memory_of(ShardStage::kGradients, buckets, params, 0, 3, turns, slots);
  EXPECT_EQ(two.net_gradients, (120u + 15u) * 4u) << "two slots, not every gradient";
  EXPECT_EQ(two.reduce_buffers, one.reduce_buffers);
  EXPECT_EQ(two.optimizer_state, one.optimizer_state);

  // Stage 3: the weights are the slice, plus what is whole while layers
  // run, gathered in place (no buffers of their own): fc1's weight and bias
  // (120 + 15 values) while fc1 runs, and fc2's weight (60) on its way, the
  // most at once; at fc2, 60 + 6 whole and fc1's 120 on its way is less.
  const ShardMemory three = memory_of(ShardStage::kParameters, buckets, params, 0, 3, turns, slots);
  EXPECT_EQ(three.parameters, 67u * 4u);
  EXPECT_EQ(three.gathered, (120u + 15u + 60u) * 4u);
  EXPECT_EQ(three.net_gradients, two.net_gradients);
  EXPECT_EQ(three.reduce_buffers, 67u * 4u);
  // A wire on another device (GPU gradients over tcp): the slice's weights are a copy.
  ShardBuffers host_wire = turns;
  host_wire.same_device = false;
  host_wire.in_place = false;
  EXPECT_EQ(memory_of(ShardStage::kGradients, buckets, params, 0, 3, host_wire, slots).reduce_buffers,
            2u * 67u * 4u + (120u + 15u) * 4u);
  EXPECT_EQ(three.optimizer_state, one.optimizer_state);

  // Through wire buffers (fp16 on the wire): stage 2 keeps two, used in
  // turn, with their reduced blocks, and the weights' allgather lands in f32.
  ShardBuffers wired = turns;
  wired.compression = GradCompression::kFP16;
  wired.in_place = false;
  const ShardMemory two16 = memory_of(ShardStage::kGradients, buckets, params, 0, 3, wired, slots);
  EXPECT_EQ(two16.reduce_buffers, two.reduce_buffers + (120u + 15u + 40u + 5u) * 2u + 3u * 40u * 4u);
  EXPECT_CONTAINS(memory_line(three), "gathered while layers run");
  EXPECT_CONTAINS(memory_line(one), "optimizer state");
}

// The slot plan by hand: a parameter shared by layers 5 and 2 keeps its
// bucket open from layer 5's backward to layer 2's, so bucket 2 (opened at
// layer 3) cannot have bucket 0's slot; three slots are needed.
TEST(GradientSlots, FewestSlotsWithWhichEachBucketFindsItsSlotFree) {
  std::vector<NetParam> params(5);
  const int last_backward[5] = {2, 4, 3, 1, -1};  // p4: no backward reaches it
  for (int i = 0; i < 5; ++i) {
    params[static_cast<size_t>(i)].blob = std::make_shared<Blob>(Shape{10 + i});
    params[static_cast<size_t>(i)].last_backward_layer = last_backward[i];
  }
  std::vector<GradBucket> buckets(5);
  for (int i = 0; i < 5; ++i) {
    buckets[static_cast<size_t>(i)].params = {i};
    buckets[static_cast<size_t>(i)].offsets = {0};
    buckets[static_cast<size_t>(i)].numel = 10 + i;
  }
  const std::vector<std::vector<int>> writers = {{2, 5}, {4}, {3}, {1}, {}};
  const GradientSlotPlan plan = plan_gradient_slots(buckets, writers, params, 2, true);
  EXPECT_EQ(plan.opened_at, (std::vector<int>{5, 4, 3, 1, -1}));
  EXPECT_EQ(plan.launched_after, (std::vector<int>{2, 2, 2, 1, -1}));
  EXPECT_EQ(plan.slot_of, (std::vector<int>{0, 1, 2, 0, 1}));
  // world 2: blocks ceil(n / 2) = 5, 6, 6, 7, 7 -> slots of 2 blocks.
  EXPECT_EQ(plan.slot_numel, (std::vector<int64_t>{14, 14, 12}));
  // Without the shared parameter two slots do.
  params[0].last_backward_layer = 5;
  const GradientSlotPlan two = plan_gradient_slots(buckets, {{5}, {4}, {3}, {1}, {}}, params, 2, true);
  EXPECT_EQ(two.slot_numel.size(), 2u);
  const GradientSlotPlan own = plan_gradient_slots(buckets, writers, params, 2, false);
  EXPECT_EQ(own.slot_of, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(own.total_numel(), 10 + 12 + 12 + 14 + 14);
}

// What the process's tensors take is what memory_of says: after a step,
// the bytes in use (framework/memory_cap.h, every tensor the ranks
// allocated) differ between a sharded run and a plain one by exactly the
// formula's difference, at 1, 2 and 4 ranks, every stage.
TEST_F(ShardedTraining, MemoryInUseFollowsTheFormula) {
  auto total = [](const ShardMemory& m) { return m.parameters + m.net_gradients + m.reduce_buffers + m.optimizer_state; };
  for (int world : {1, 2, 4}) {
    Spec spec;
    spec.type = "Adam";
    spec.batch = 24 / world;
    auto comms = make_world(world, "zero_mem", AllreduceAlgorithm::kAuto, 20s);
    const SolverConfig config = make_config(dir_, spec);
    // One step of every rank with `stage`; the ranks' tensors in use after it, and what memory_of says they hold.
    auto run = [&](ShardStage stage, size_t* formula) {
      std::vector<std::unique_ptr<Solver>> solvers(static_cast<size_t>(world));
      std::vector<std::unique_ptr<DataParallel>> dps(static_cast<size_t>(world));
      expect_no_errors(run_ranks(world, [&](int rank) {
        SolverOptions o;
        o.rank = rank;
        o.world_size = world;
        o.comm = comms[static_cast<size_t>(rank)].get();
        auto& solver = solvers[static_cast<size_t>(rank)];
        solver = std::make_unique<Solver>(config, o);
        dps[static_cast<size_t>(rank)] =
            std::make_unique<DataParallel>(*solver, *comms[static_cast<size_t>(rank)], dp_config(stage, kTinyBuckets));
        solver->step();
      }));
      *formula = 0;
      for (int rank = 0; rank < world; ++rank) {
        const Net& net = solvers[static_cast<size_t>(rank)]->net();
        if (const ShardedUpdate* s = dps[static_cast<size_t>(rank)]->sharded()) {
          *formula += total(s->memory(rank));
          EXPECT_EQ(s->slot_bytes(), s->memory(rank).net_gradients);
          EXPECT_EQ(net.memory_report().grad_bytes, 0u) << "the net keeps no gradient of its own";
        } else {
          const std::vector<GradBucket>& buckets = dps[static_cast<size_t>(rank)]->buckets();
          *formula += total(memory_of(ShardStage::kNone, buckets, net.params(), rank, world, ShardBuffers{}, 2));
        }
      }
      return memory_in_use();
    };
    // Plain data parallel's flat gradient buffer puts each of fc2.weight 60,
    // fc2.bias 4, fc1.weight 120, fc1.bias 15 at a 64-value boundary: 320
    // values where the formula counts 199.
    const int64_t plain_padding = static_cast<int64_t>(world) * (320 - 199) * 4;
    // Twice: the first round lets whatever the process makes once (on first
    // use, and kept) be made, so the second compares the runs alone.
    for (int round = 0; round < 2; ++round) {
      size_t plain_formula = 0;
      const size_t plain = run(ShardStage::kNone, &plain_formula);
      for (ShardStage stage : {ShardStage::kOptimizer, ShardStage::kGradients, ShardStage::kParameters}) {
        SCOPED_TRACE(std::to_string(world) + " ranks, shard " + shard_stage_name(stage));
        size_t formula = 0;
        const size_t sharded = run(stage, &formula);
        if (round == 0) continue;
        EXPECT_EQ(static_cast<int64_t>(sharded) - static_cast<int64_t>(plain),
                  static_cast<int64_t>(formula) - static_cast<int64_t>(plain_formula) - plain_padding);
        if (world == 4 && stage != ShardStage::kOptimizer) {
          EXPECT_LT(sharded, plain) << "4 ranks sharding gradients hold less than plain data parallel";
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::parallel
