// The blobs' memory by lifetime (framework/net_plan.cpp, framework/plan/):
// the placement of buffers with lifetimes in one arena, a hand-computed net
// (which value and gradient lives when, the peak, the arena), training that
// gives the same bits with the plan as without it, and the checked mode that
// poisons released buffers, catching a layer that reads more in backward
// than it declares.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/net.h"
#include "framework/plan/lifetime_placement.h"
#include "framework/rng.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "tests/test_util.h"
#include "tests/train_util.h"
#include "tests/undeclared_read_layer.h"

namespace strata {
namespace {

// ------------------------------------------------------------ placement ----

TEST(LifetimePlacement, BuffersThatNeverMeetShareTheirBytes) {
  const Placement p = place_lifetimes({{100, 0, 0}, {200, 1, 1}, {300, 2, 2}}, 1);
  EXPECT_EQ(p.offsets, (std::vector<size_t>{0, 0, 0}));
  EXPECT_EQ(p.arena_bytes, 300u);
  EXPECT_EQ(p.peak_bytes, 300u);
}

TEST(LifetimePlacement, BuffersThatMeetDoNotOverlap) {
  // A [0, 2] and B [1, 3] meet; C [3, 4] meets B only and takes A's place.
  const Placement p = place_lifetimes({{100, 0, 2}, {100, 1, 3}, {100, 3, 4}}, 1);
  EXPECT_EQ(p.offsets, (std::vector<size_t>{0, 100, 0}));
  EXPECT_EQ(p.arena_bytes, 200u);
  EXPECT_EQ(p.peak_bytes, 200u);
}

TEST(LifetimePlacement, OffsetsAreAligned) {
  const Placement p = place_lifetimes({{10, 0, 1}, {10, 0, 1}, {10, 1, 2}}, 64);
  for (size_t o : p.offsets) EXPECT_EQ(o % 64, 0u);
  EXPECT_EQ(p.arena_bytes, 192u);
}

TEST(LifetimePlacement, RandomLifetimesNeverOverlapWhileAlive) {
  Rng rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<Lifetime> b(1 + rng.next_u64() % 40);
    for (Lifetime& l : b) {
      l.bytes = 1 + rng.next_u64() % 5000;
      l.first = static_cast<int>(rng.next_u64() % 30);
      l.last = l.first + static_cast<int>(rng.next_u64() % 10);
    }
    const Placement p = place_lifetimes(b, 256);
    size_t sum = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      sum += (b[i].bytes + 255) / 256 * 256;
      for (size_t j = i + 1; j < b.size(); ++j) {
        const bool meet = b[i].first <= b[j].last && b[j].first <= b[i].last;
        const bool overlap = p.offsets[i] < p.offsets[j] + b[j].bytes && p.offsets[j] < p.offsets[i] + b[i].bytes;
        ASSERT_FALSE(meet && overlap) << "round " << round << ": buffers " << i << " and " << j;
      }
    }
    EXPECT_GE(p.arena_bytes, p.peak_bytes);
    EXPECT_LE(p.arena_bytes, sum);
  }
}

TEST(LifetimePlacement, ALifetimeThatEndsBeforeItStartsIsRefused) {
  EXPECT_THROW(place_lifetimes({{1, 3, 2}}, 1), Error);
}

// -------------------------------------------------------- a net by hand ----

std::unique_ptr<Net> make_net(const std::string& text, BlobMemory memory) {
  NetOptions o;
  o.blob_memory = memory;
  return std::make_unique<Net>(parse_config_text(text, "net.prototxt"), o);
}

// U = 256 bytes (64 floats, the arena's alignment). Steps: forward i = i,
// backward i = 13 - i (7 layers).
//   h1 (2U) value [1, 11]: relu1 reads its output (11), ip2 its input (10)
//           gradient [10, 12]: written by ip2 (10), relu1 (11); read by ip1 (12)
//   h2 (1U) value [3, 9], gradient [8, 10]
//   h3 (1U) value [5, 7] (the loss reads both), gradient [7, 8]
// Kept: x, y (an Input's tops), loss (an output). Alive at once, at most 5U
// (steps 7, 8 and 10); each on its own 8U; the greedy placement: 6U.
const char* kChain = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 1 dim: 64 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h1" inner_product_param { num_output: 128 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "h1" top: "h1" }
layer { name: "ip2" type: "InnerProduct" bottom: "h1" top: "h2" inner_product_param { num_output: 64 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu2" type: "ReLU" bottom: "h2" top: "h2" }
layer { name: "ip3" type: "InnerProduct" bottom: "h2" top: "h3" inner_product_param { num_output: 64 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "h3" bottom: "y" top: "loss" }
)";

TEST(BlobMemory, AChainPlannedByHand) {
  constexpr size_t U = 256;
  auto net = make_net(kChain, BlobMemory::kByLifetime);
  const BlobPlanReport& r = net->blob_plan();
  EXPECT_EQ(r.planned, 6);
  EXPECT_EQ(r.kept, 3);
  EXPECT_EQ(r.separate_bytes, 8 * U);
  EXPECT_EQ(r.peak_bytes, 5 * U);
  EXPECT_EQ(r.arena_bytes, 6 * U);
  // h1's value [1, 11] and h2's [3, 9] meet: they may not share bytes.
  EXPECT_FALSE(net->blob("h1").data.shares_storage_with(net->blob("h2").data));
  EXPECT_FALSE(net->blob("x").data.shares_storage_with(net->blob("h1").data)) << "an input was planned";
}

// A pipeline keeps its boundaries after the net was planned: they must stop
// sharing the first plan's bytes (h3's value and h1's gradient did).
TEST(BlobMemory, BlobsKeptAfterPlanningGetMemoryOfTheirOwn) {
  auto net = make_net(kChain, BlobMemory::kByLifetime);
  net->keep_blobs({"h1", "h3"});
  EXPECT_EQ(net->blob_plan().kept, 5);
  EXPECT_EQ(net->blob_plan().planned, 2);  // h2's value and gradient
  for (const char* kept : {"h1", "h3"}) {
    for (const std::string& other : net->blob_names()) {
      for (const Tensor* t : {&net->blob(other).data, &net->blob(other).diff}) {
        if (t == &net->blob(kept).data) continue;
        EXPECT_FALSE(net->blob(kept).data.shares_storage_with(*t)) << kept << " shares bytes with " << other;
        if (t == &net->blob(kept).diff) continue;
        EXPECT_FALSE(net->blob(kept).diff.shares_storage_with(*t)) << kept << "'s gradient shares with " << other;
      }
    }
  }
  EXPECT_THROW(net->keep_blobs({"no_such_blob"}), ConfigError);
}

TEST(BlobMemory, SeparateGivesEveryBlobItsOwnMemory) {
  auto net = make_net(kChain, BlobMemory::kSeparate);
  EXPECT_EQ(net->blob_plan().planned, 0);
  EXPECT_FALSE(net->blob("h1").data.shares_storage_with(net->blob("h2").diff));
}

// A branch and merge: Split copies (its backward reads no values), Eltwise
// sums (the default: it reads both). The split's tops live until Eltwise's
// backward; the gradients of both branches meet at the split.
TEST(BlobMemory, ABranchAndMergeTrainsTheSameAsSeparate) {
  const std::string text = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 16 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h" inner_product_param { num_output: 16 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "a" type: "InnerProduct" bottom: "h" top: "ha" inner_product_param { num_output: 16 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "b" type: "TanH" bottom: "h" top: "hb" }
layer { name: "sum" type: "Eltwise" bottom: "ha" bottom: "hb" top: "s" }
layer { name: "loss" type: "EuclideanLoss" bottom: "s" bottom: "y" top: "loss" }
)";
  std::vector<std::vector<float>> grads[2];
  int k = 0;
  for (BlobMemory m : {BlobMemory::kSeparate, BlobMemory::kByLifetimeChecked}) {
    auto net = make_net(text, m);
    Rng rng(3);
    for (const char* in : {"x", "y"}) {
      float* d = net->blob(in).data.data<float>();
      for (int64_t i = 0; i < net->blob(in).numel(); ++i) d[i] = static_cast<float>(rng.uniform(-1, 1));
    }
    for (int step = 0; step < 2; ++step) {
      net->zero_param_diffs();
      net->forward_backward();
    }
    for (const NetParam& p : net->params()) grads[k].push_back(test::values(p.blob->diff));
    if (m != BlobMemory::kSeparate) {
      EXPECT_GT(net->blob_plan().planned, 0);
    }
    ++k;
  }
  EXPECT_EQ(grads[0], grads[1]);
}

// ------------------------------------------------------------ inference ----

std::unique_ptr<Net> make_test_net(const std::string& text, BlobMemory memory) {
  NetOptions o;
  o.phase = Phase::kTest;
  o.blob_memory = memory;
  return std::make_unique<Net>(parse_config_text(text, "net.prototxt"), o);
}

std::vector<float> forward_outputs(Net& net, uint64_t seed) {
  Rng rng(seed);
  for (const char* in : {"x", "y"}) {
    float* d = net.blob(in).data.data<float>();
    for (int64_t i = 0; i < net.blob(in).numel(); ++i) d[i] = static_cast<float>(rng.uniform(-1, 1));
  }
  net.forward();
  std::vector<float> out = test::values(net.blob("loss").data);
  const std::vector<float> h3 = test::values(net.blob("h3").data);
  out.insert(out.end(), h3.begin(), h3.end());
  return out;
}

// A TEST net keeps no gradients and each value only until its last forward
// reader: the chain's h1 (2U) [1, 3] (relu1 in place, then ip2), h2 (1U)
// [3, 5] and h3 (1U) [5, 6]: at most 3U at once, and the gradients share one
// idle buffer of the largest one's size (2U). The same outputs as with a
// buffer per blob; backward is refused.
TEST(BlobMemory, ATestNetIsPlannedForForwardOnly) {
  constexpr size_t U = 256;
  auto separate = make_test_net(kChain, BlobMemory::kSeparate);
  auto planned = make_test_net(kChain, BlobMemory::kByLifetime);
  const BlobPlanReport& r = planned->blob_plan();
  EXPECT_TRUE(r.forward_only);
  EXPECT_CONTAINS(r.str(), "values by lifetime (forward only)");
  EXPECT_EQ(r.planned, 6);  // three values, three idle gradients
  EXPECT_EQ(r.peak_bytes, 3 * U + 2 * U);
  EXPECT_LT(r.arena_bytes, r.separate_bytes);
  EXPECT_EQ(forward_outputs(*planned, 5), forward_outputs(*separate, 5));
  const std::string msg = test::error_of<ConfigError>([&] { planned->backward(); });
  EXPECT_CONTAINS(msg, "planned for forward passes only");
  EXPECT_CONTAINS(msg, "force_backward");
  // force_backward: planned as a training net, and backward runs.
  auto forced = make_test_net("force_backward: true\n" + std::string(kChain), BlobMemory::kByLifetime);
  EXPECT_FALSE(forced->blob_plan().forward_only);
  forward_outputs(*forced, 5);
  forced->backward();
}

// A larger batch after the plan: reshape() gives every blob its new shape and
// plans again, so the arena grows with it and the outputs stay right.
TEST(BlobMemory, ReshapeToALargerBatchPlansAgain) {
  auto planned = make_test_net(kChain, BlobMemory::kByLifetime);
  const size_t arena_at_1 = planned->blob_plan().arena_bytes;
  planned->blob("x").resize({4, 64});
  planned->blob("y").resize({4, 64});
  planned->reshape();
  EXPECT_GT(planned->blob_plan().arena_bytes, arena_at_1);
  EXPECT_EQ(planned->blob("h1").shape(), (Shape{4, 128}));
  EXPECT_EQ(planned->blob("h1").data.storage_bytes(), planned->blob_plan().arena_bytes) << "h1 left the arena";
  auto separate = make_test_net(kChain, BlobMemory::kSeparate);
  separate->blob("x").resize({4, 64});
  separate->blob("y").resize({4, 64});
  separate->reshape();
  EXPECT_EQ(forward_outputs(*planned, 9), forward_outputs(*separate, 9));
  // Back to a smaller batch: everything fits where it is.
  const size_t arena_at_4 = planned->blob_plan().arena_bytes;
  planned->blob("x").resize({2, 64});
  planned->blob("y").resize({2, 64});
  planned->reshape();
  EXPECT_EQ(planned->blob_plan().arena_bytes, arena_at_4);
}

// -------------------------------------------------------------- training ----

// With `square`, ip1's output goes through UndeclaredReadForTest (tests/undeclared_read_layer.h) first.
SolverConfig small_solver(const std::string& memory, bool square = false) {
  return test::small_conv_solver(memory, square ? R"(
  layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1raw" inner_product_param { num_output: 16 weight_filler { type: "xavier" } } }
  layer { name: "sq" type: "UndeclaredReadForTest" bottom: "ip1raw" top: "ip1" }
)" : "");
}

TEST(BlobMemory, TrainingByLifetimeGivesTheSameBitsAsSeparate) {
  test::expect_layouts_train_alike([](const std::string& memory) { return small_solver(memory); });
  Solver solver(small_solver("BY_LIFETIME"));
  const BlobPlanReport& r = solver.net().blob_plan();
  EXPECT_LT(r.arena_bytes, r.separate_bytes) << r.str();
  // The scratch is in the arena (activations) by lifetime, its own line (workspace) under SEPARATE.
  const MemoryReport planned = solver.net().memory_report();
  const MemoryReport separate = Solver(small_solver("SEPARATE")).net().memory_report();
  EXPECT_LT(planned.activation_bytes + planned.workspace_bytes, separate.activation_bytes + separate.workspace_bytes);
}

bool any_nan(const std::vector<std::vector<float>>& w) {
  for (const auto& v : w) {
    for (float x : v) {
      if (std::isnan(x)) return true;
    }
  }
  return false;
}

TEST(BlobMemory, CheckedModeCatchesABackwardThatReadsMoreThanItDeclares) {
  ScopedLayerRegistration reg(layer_registration<test::UndeclaredReadLayer>("UndeclaredReadForTest"));
  // ip1's output is read by nothing after the square's forward (ip1's own
  // backward reads its input) but by the square's backward, undeclared.
  std::vector<float> losses;
  const SolverConfig separate = small_solver("SEPARATE", true);
  const SolverConfig checked = small_solver("BY_LIFETIME_CHECKED", true);
  EXPECT_FALSE(any_nan(test::train_to_end(separate, &losses)));
  losses.clear();
  // nonfinite: STOP (the default) ends the run naming where the NaN came from.
  const std::string msg = test::error_of<Error>([&] { test::train_to_end(checked, &losses); });
  EXPECT_CONTAINS(msg, "some gradients are not finite; the first non-finite gradient in backward is that of parameter 'ip1.");
}

// ---------------------------------------------------------------- trace ----

// STRATA_MEMORY_TRACE=1: a line after setup, then one per layer of the first
// two passes whose memory changed (the first forward takes the deferred
// storage), nothing once the passes are traced; any other value is refused.
TEST(BlobMemory, TheMemoryTraceNamesWhatEachLayerTook) {
  ASSERT_EQ(setenv("STRATA_MEMORY_TRACE", "1", 1), 0);
  testing::internal::CaptureStderr();
  auto net = make_net(kChain, BlobMemory::kByLifetime);
  for (int step = 0; step < 2; ++step) net->forward_backward();
  const std::string trace = testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(trace, "memory trace, net 'net', setup: tensors ");
  EXPECT_CONTAINS(trace, "memory trace, net 'net', forward ");
  const size_t lines = static_cast<size_t>(std::count(trace.begin(), trace.end(), '\n'));
  EXPECT_GE(lines, 2u) << trace;
  EXPECT_LE(lines, 1u + 4u * static_cast<size_t>(net->num_layers())) << trace;
  testing::internal::CaptureStderr();
  net->forward_backward();  // the third step: no longer traced
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_EQ(setenv("STRATA_MEMORY_TRACE", "0", 1), 0);
  testing::internal::CaptureStderr();
  make_net(kChain, BlobMemory::kByLifetime)->forward_backward();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "STRATA_MEMORY_TRACE=0 traced";
  ASSERT_EQ(setenv("STRATA_MEMORY_TRACE", "yes", 1), 0);
  const std::string msg = test::error_of<ConfigError>([] { make_net(kChain, BlobMemory::kByLifetime); });
  EXPECT_CONTAINS(msg, "STRATA_MEMORY_TRACE is 'yes'");
  ASSERT_EQ(unsetenv("STRATA_MEMORY_TRACE"), 0);
}

}  // namespace
}  // namespace strata
