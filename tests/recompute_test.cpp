// Recomputation (`recompute { from: to: }`, framework/net_recompute.cpp): the
// ranges a net file may name and the clear errors for the others; training
// that recomputes gives the same bits as training that keeps every value
// (Dropout's masks included), also with every released buffer poisoned; and
// the plan keeps less alive at once.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/net.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "tests/test_util.h"
#include "tests/train_util.h"

namespace strata {
namespace {

// A convolution stage (conv, in-place ReLU, pooling, Dropout) and a
// transformer block (LayerNorm, attention, residual add, LayerNorm, two
// inner products with GELU between, residual add), then the classifier.
const char* kLayers = R"(
  layer { name: "data" type: "DummyData" top: "data" top: "label"
          dummy_data_param { shape { dim: 4 dim: 2 dim: 12 dim: 12 } shape { dim: 4 }
                             data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 2 } } }
  layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
          convolution_param { num_output: 8 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
  layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
  layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
  layer { name: "drop1" type: "Dropout" bottom: "pool1" top: "pool1" dropout_param { dropout_ratio: 0.3 } }
  layer { name: "tokens" type: "Reshape" bottom: "pool1" top: "tokens" reshape_param { shape { dim: 0 dim: 8 dim: 36 } } }
  layer { name: "ln1" type: "LayerNorm" bottom: "tokens" top: "ln1" }
  layer { name: "attn" type: "MultiHeadAttention" bottom: "ln1" top: "attn" attention_param { num_heads: 4 } }
  layer { name: "add1" type: "Eltwise" bottom: "tokens" bottom: "attn" top: "add1" }
  layer { name: "ln2" type: "LayerNorm" bottom: "add1" top: "ln2" }
  layer { name: "fc1" type: "InnerProduct" bottom: "ln2" top: "fc1" inner_product_param { num_output: 72 axis: 2 weight_filler { type: "xavier" } } }
  layer { name: "gelu" type: "GELU" bottom: "fc1" top: "gelu" }
  layer { name: "fc2" type: "InnerProduct" bottom: "gelu" top: "fc2" inner_product_param { num_output: 36 axis: 2 weight_filler { type: "xavier" } } }
  layer { name: "add2" type: "Eltwise" bottom: "add1" bottom: "fc2" top: "add2" }
  layer { name: "ip" type: "InnerProduct" bottom: "add2" top: "ip" inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
)";

const char* kRanges = R"(
  recompute { from: "conv1" to: "drop1" }
  recompute { from: "ln1" to: "add2" }
)";

SolverConfig solver_config(const std::string& memory, bool recompute) {
  const std::string text = "net_param {\n" + std::string(kLayers) + (recompute ? kRanges : "") + R"(}
type: "Adam" base_lr: 0.01 max_iter: 4 display: 0 snapshot: 0 snapshot_after_train: false random_seed: 7
blob_memory: )" + memory + "\n";
  return parse_solver_config(parse_config_text(text, "solver.prototxt"), "solver.prototxt");
}

TEST(Recompute, TrainsToTheSameBitsAsKeepingEveryValue) {
  std::vector<float> want_losses;
  const auto want = test::train_to_end(solver_config("SEPARATE", false), &want_losses);
  for (float l : want_losses) ASSERT_TRUE(std::isfinite(l));
  // BY_LIFETIME_CHECKED fills each value's first place with NaN once the
  // first forward is done with it: backward must read the recomputed one.
  for (const char* memory : {"SEPARATE", "BY_LIFETIME", "BY_LIFETIME_CHECKED"}) {
    SCOPED_TRACE(memory);
    std::vector<float> losses;
    EXPECT_EQ(test::train_to_end(solver_config(memory, true), &losses), want);
    EXPECT_EQ(losses, want_losses);
  }
}

TEST(Recompute, ThePlanKeepsLessAliveAtOnce) {
  Solver plain(solver_config("BY_LIFETIME", false));
  Solver recomputed(solver_config("BY_LIFETIME", true));
  const BlobPlanReport& a = plain.net().blob_plan();
  const BlobPlanReport& b = recomputed.net().blob_plan();
  EXPECT_EQ(a.recomputed, 0);
  // Made inside the ranges: conv1, pool1; ln1, attn, add1, the two copies of
  // add1 the Split the net inserts after it makes (for ln2 and add2), ln2,
  // fc1, gelu, fc2, add2.
  EXPECT_EQ(b.recomputed, 12);
  EXPECT_LT(b.peak_bytes, a.peak_bytes) << a.str() << "\n" << b.str();
  EXPECT_LT(b.arena_bytes, a.arena_bytes) << a.str() << "\n" << b.str();
  EXPECT_CONTAINS(b.str(), "12 value(s) recomputed in backward");
  ASSERT_EQ(recomputed.net().recompute_ranges().size(), 2u);
  EXPECT_EQ(recomputed.net().layer(recomputed.net().recompute_ranges()[1].first).name(), "ln1");
}

// Attention keeps its projection, probabilities and heads' outputs from
// forward for backward (Layer::kept): planned by lifetime they are a place in
// the arena instead of the layer's own memory, and in a recompute range the
// place holds only from the recompute to the backward.
TEST(Recompute, WhatALayerKeepsForBackwardIsPlacedInTheArena) {
  Solver separate(solver_config("SEPARATE", false));
  Solver planned(solver_config("BY_LIFETIME", false));
  const Net& net = planned.net();
  ASSERT_GT(net.layer(net.layer_index("attn")).kept_bytes(), 0u);
  ASSERT_GT(net.layer(net.layer_index("ln1")).kept_bytes(), 0u);  // mean and 1/std
  size_t kept = 0;  // every layer's: attention's q, k, v and context, LayerNorm's statistics
  for (int i = 0; i < net.num_layers(); ++i) kept += net.layer(i).kept_bytes();
  EXPECT_EQ(separate.net().memory_report().layer_bytes - net.memory_report().layer_bytes, kept);
  EXPECT_EQ(net.memory_report().layer_bytes,
            Solver(solver_config("BY_LIFETIME", true)).net().memory_report().layer_bytes);
}

std::string net_error(const std::string& ranges) {
  const std::string text = std::string(kLayers) + ranges;
  return test::error_of<ConfigError>([&] {
    NetOptions o;
    Net net(parse_config_text(text, "net.prototxt"), o);
  });
}

TEST(Recompute, RangesThatCannotBeRecomputedAreRefusedSayingWhy) {
  EXPECT_CONTAINS(net_error(R"(recompute { from: "pool1" to: "conv1" })"), "'pool1' comes after 'conv1' in the net");
  EXPECT_CONTAINS(net_error(R"(recompute { from: "conv1" to: "drop1" } recompute { from: "drop1" to: "ln1" })"),
                  "layer 'drop1' is already in the range from 'conv1'; recompute ranges must not overlap");
  EXPECT_CONTAINS(net_error(R"(recompute { from: "data" to: "conv1" })"),
                  "has no bottoms (it makes the net's input)");
  EXPECT_CONTAINS(net_error(R"(recompute { from: "relu1" to: "pool1" })"),
                  "writes 'conv1' in place, which layer 'conv1' before the range made: run again it would apply "
                  "twice; start the range at 'conv1'");
  EXPECT_CONTAINS(net_error(R"(recompute { from: "conv1" to: "conv1" })"),
                  "layer 'relu1' (ReLU) at net.prototxt:7:3 after the range writes 'conv1' in place, which the range "
                  "makes: the recompute would undo it; end the range at 'relu1'");
  EXPECT_CONTAINS(net_error(R"(recompute { from: "conv1" to: "nope" })"), "nope");
  EXPECT_CONTAINS(net_error(R"(recompute { from: "conv1" to: "pool1" until: "x" })"), "unknown key 'until'");
  const std::string bn = test::error_of<ConfigError>([] {
    Net net(parse_config_text(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c" convolution_param { num_output: 2 kernel_size: 1 } }
layer { name: "bn" type: "BatchNorm" bottom: "c" top: "b" }
recompute { from: "conv" to: "bn" }
)",
                              "net.prototxt"),
            NetOptions{});
  });
  EXPECT_CONTAINS(bn, "updates its '");
  EXPECT_CONTAINS(bn, "in forward (running statistics); run again it would update them twice");
}

TEST(Recompute, ABackwardOverPartOfARangeIsRefused) {
  NetOptions o;
  Net net(parse_config_text(std::string(kLayers) + kRanges, "net.prototxt"), o);
  net.forward();
  const int ln1 = net.layer_index("ln1");
  const std::string msg = test::error_of<ConfigError>([&] { net.backward(ln1 + 1, net.num_layers() - 1); });
  EXPECT_CONTAINS(msg, "the recompute range from 'ln1' to 'add2' crosses the edge of the layers run here");
}

}  // namespace
}  // namespace strata
