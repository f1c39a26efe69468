// Fine-tuning: position-embedding interpolation against torch goldens,
// freezing by pattern (frozen weights bitwise unchanged by training, no
// backward through a frozen prefix, frozen BatchNorm on running statistics),
// and the solver's layer_decay / no_weight_decay policies.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/solver/finetune_policy.h"
#include "framework/net.h"
#include "framework/io/npy.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "layers/batch_norm.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"
#include "transfer/freeze.h"
#include "transfer/position_embedding.h"

#ifndef STRATA_SOURCE_DIR
#define STRATA_SOURCE_DIR "."
#endif

namespace strata {
namespace {

using test::error_of;
using transfer::freeze_layers;
using transfer::glob_match;

// ---- position embedding interpolation (goldens: tests/golden/make_transfer_golden.py) ----

struct GoldenCase {
  const char* name;
  int64_t prefix;
  transfer::Grid from, to;
};

class PositionEmbeddingGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(PositionEmbeddingGolden, MatchesTorchBicubic) {
  const GoldenCase& c = GetParam();
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/golden/transfer/";
  const NpyArray in = read_npy(dir + c.name + "_in.npy");
  const NpyArray want = read_npy(dir + c.name + "_out.npy");
  Tensor pos(in.shape);
  std::memcpy(pos.raw_data(), in.data.data(), in.data.size());
  const Tensor got = transfer::interpolate_position_embedding(pos, c.prefix, c.from, c.to);
  ASSERT_EQ(got.shape(), want.shape);
  const float* g = got.data<float>();
  const float* w = want.as<float>();
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5f + 1e-5f * std::fabs(w[i])) << i;
  if (c.prefix) {  // the class token's row is copied exactly
    for (int64_t i = 0; i < in.shape[2]; ++i) EXPECT_EQ(g[i], in.as<float>()[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Torch, PositionEmbeddingGolden,
                         ::testing::Values(GoldenCase{"up_4x4_to_6x6_cls", 1, {4, 4}, {6, 6}},
                                           GoldenCase{"down_5x5_to_3x3_cls", 1, {5, 5}, {3, 3}},
                                           GoldenCase{"up_3x3_to_4x7_nocls", 0, {3, 3}, {4, 7}}),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) { return std::string(info.param.name); });

TEST(PositionEmbeddingResize, WrongShapeIsAShapeError) {
  Tensor pos({1, 10, 4});
  EXPECT_CONTAINS(error_of<ShapeError>([&] { transfer::interpolate_position_embedding(pos, 1, {4, 4}, {2, 2}); }),
                  "[1, 10, 4]");
  EXPECT_EQ(transfer::square_grid_side(196), 14);
  EXPECT_EQ(transfer::square_grid_side(197), 0);
}

// ---- glob ----

TEST(FreezeGlob, StarAndQuestionMarkMatchWholeNames) {
  EXPECT_TRUE(glob_match("conv*", "conv1_1"));
  EXPECT_TRUE(glob_match("conv*", "conv"));
  EXPECT_FALSE(glob_match("conv*", "myconv1"));
  EXPECT_TRUE(glob_match("block1?_*", "block10_fc1"));
  EXPECT_FALSE(glob_match("block1?_*", "block1_fc1"));
  EXPECT_TRUE(glob_match("*_attn", "block3_attn"));
  EXPECT_TRUE(glob_match("a*b*c", "aXXbYYbc"));
  EXPECT_FALSE(glob_match("fc", "fc6"));
  EXPECT_TRUE(glob_match("*", ""));
}

// ---- freezing ----

// conv1 -> bn1 + scale1 -> relu -> conv2 -> fc -> loss, on fixed inputs.
const char* kNet = R"(
name: "freeze"
layer { name: "in" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 2 dim: 4 dim: 4 } shape { dim: 4 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 3 kernel_size: 3 pad: 1 } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" batch_norm_param { moving_average_fraction: 0.5 } }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
        convolution_param { num_output: 3 kernel_size: 3 pad: 1 } }
layer { name: "fc" type: "InnerProduct" bottom: "conv2" top: "score" inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
)";

std::unique_ptr<Solver> make_solver(const std::string& extra_solver_keys = "", const std::string& net = kNet) {
  const std::string text = "net_param { " + net + " }\nbase_lr: 0.1\nmomentum: 0.9\nweight_decay: 0.01\n"
                           "max_iter: 10\ndisplay: 0\nsnapshot_after_train: false\n" + extra_solver_keys;
  const SolverConfig config =
      parse_solver_config(parse_config_text(text, "/tmp/strata_transfer_solver.prototxt"), "/tmp/strata_transfer_solver.prototxt");
  auto solver = std::make_unique<Solver>(config);
  Net& n = solver->net();
  if (n.has_blob("data")) {
    Blob& data = n.blob("data");
    for (int64_t i = 0; i < data.numel(); ++i) data.data.data<float>()[i] = std::sin(0.7f * static_cast<float>(i));
    Blob& label = n.blob("label");
    for (int64_t i = 0; i < label.numel(); ++i) label.data.data<float>()[i] = static_cast<float>(i % 3);
  }
  return solver;
}

std::vector<float> values_of(const Net& net, const std::string& param) {
  return test::values(test::param_blob(net, param).data);
}

TEST(Freeze, FrozenPrefixIsBitwiseUnchangedAndRunsNoBackward) {
  auto solver = make_solver();
  Net& net = solver->net();
  const transfer::FreezeReport report = freeze_layers(net, {"conv1", "*1"});
  solver->optimizer().prepare(net.params());
  EXPECT_EQ(report.layers, (std::vector<std::string>{"conv1", "bn1", "scale1", "relu1"}));
  EXPECT_EQ(report.params, (std::vector<std::string>{"conv1.weight", "conv1.bias", "scale1.weight", "scale1.bias"}));
  EXPECT_EQ(report.batch_norms, std::vector<std::string>{"bn1"});
  EXPECT_CONTAINS(report.str(), "froze 4 layers (4 parameters)");
  for (const char* name : {"conv1", "bn1", "scale1", "relu1"}) {
    EXPECT_FALSE(net.layer_needs_backward(net.layer_index(name))) << name;
  }
  EXPECT_TRUE(net.layer_needs_backward(net.layer_index("conv2")));

  const std::vector<std::string> frozen = {"conv1.weight", "conv1.bias", "bn1.running_mean", "bn1.running_var",
                                           "scale1.weight", "scale1.bias"};
  std::vector<std::vector<float>> before;
  for (const auto& p : frozen) before.push_back(values_of(net, p));
  const std::vector<float> conv2_before = values_of(net, "conv2.weight");
  for (int i = 0; i < 3; ++i) solver->step();
  for (size_t k = 0; k < frozen.size(); ++k) {
    const std::vector<float> after = values_of(net, frozen[k]);
    ASSERT_EQ(after.size(), before[k].size());
    EXPECT_EQ(std::memcmp(after.data(), before[k].data(), after.size() * sizeof(float)), 0) << frozen[k];
  }
  EXPECT_NE(values_of(net, "conv2.weight"), conv2_before);  // the rest trains
  // No backward wrote a gradient into the frozen prefix.
  EXPECT_TRUE(test::all_zero(test::param_blob(net, "conv1.weight").diff));
  EXPECT_TRUE(test::all_zero(net.blob("data").diff));
}

TEST(Freeze, FrozenBatchNormNormalisesWithRunningStatistics) {
  auto solver = make_solver();
  Net& net = solver->net();
  auto& bn = dynamic_cast<BatchNormLayer&>(net.layer(net.layer_index("bn1")));
  EXPECT_EQ(bn.stats(), BatchNormLayer::Stats::kBatch);
  freeze_layers(net, {"bn1"});
  EXPECT_EQ(bn.stats(), BatchNormLayer::Stats::kGlobal);
  // A TRAIN forward leaves the running statistics (mean 0, var 1) alone.
  solver->step();
  EXPECT_TRUE(test::all_zero(test::param_blob(net, "bn1.running_mean").data));
  for (float v : values_of(net, "bn1.running_var")) EXPECT_EQ(v, 1.0f);
  // Unfrozen, the same step moves them (moving_average_fraction 0.5).
  auto fresh = make_solver();
  fresh->step();
  EXPECT_FALSE(test::all_zero(test::param_blob(fresh->net(), "bn1.running_mean").data));
}

TEST(Freeze, PatternMatchingNothingListsTheLayers) {
  auto solver = make_solver();
  const std::string msg = error_of<ConfigError>([&] { freeze_layers(solver->net(), {"block*"}, "--freeze"); });
  EXPECT_CONTAINS(msg, "--freeze 'block*' matches no layer");
  EXPECT_CONTAINS(msg, "conv1, bn1, scale1");
}

TEST(Freeze, LrMultZeroInTheConfigAlsoSkipsBackward) {
  std::string net = kNet;
  const std::string conv1 = "convolution_param { num_output: 3 kernel_size: 3 pad: 1 } }";
  net.replace(net.find(conv1), conv1.size(),
              "param { lr_mult: 0 } param { lr_mult: 0 } convolution_param { num_output: 3 kernel_size: 3 pad: 1 } }");
  auto solver = make_solver("", net);
  EXPECT_FALSE(solver->net().layer_needs_backward(solver->net().layer_index("conv1")));
}

TEST(NetSetLrMult, UnfreezingRestoresBackward) {
  auto solver = make_solver();
  Net& net = solver->net();
  freeze_layers(net, {"conv1", "scale1"});
  EXPECT_FALSE(net.layer_needs_backward(net.layer_index("conv1")));
  net.set_lr_mult(net.param_index("conv1.weight"), 1.0f);
  EXPECT_TRUE(net.layer_needs_backward(net.layer_index("conv1")));
  // Buffers stay at 0.
  net.set_lr_mult(net.param_index("bn1.running_mean"), 1.0f);
  EXPECT_EQ(net.params()[net.param_index("bn1.running_mean")].lr_mult, 0.0f);
}

// ---- layer_decay and no_weight_decay ----

// A ViT-shaped chain without attention: stem (before the blocks), two blocks, a head.
const char* kBlocks = R"(
name: "decay"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 4 } } }
layer { name: "stem" type: "InnerProduct" bottom: "x" top: "stem" inner_product_param { num_output: 4 } }
layer { name: "block0_fc1" type: "InnerProduct" bottom: "stem" top: "b0" inner_product_param { num_output: 4 } }
layer { name: "block0_ln1" type: "LayerNorm" bottom: "b0" top: "b0n" }
layer { name: "block1_fc1" type: "InnerProduct" bottom: "b0n" top: "b1"
        param { lr_mult: 1 } param { lr_mult: 2 } inner_product_param { num_output: 4 } }
layer { name: "ln" type: "Scale" bottom: "b1" top: "ln" scale_param { bias_term: true } }
layer { name: "head" type: "InnerProduct" bottom: "ln" top: "head" inner_product_param { num_output: 2 } }
)";

std::string blocks_net() { return kBlocks; }

float lr_of(const Net& net, const std::string& p) { return net.params()[net.param_index(p)].lr_mult; }
float decay_of(const Net& net, const std::string& p) { return net.params()[net.param_index(p)].decay_mult; }

TEST(LayerDecay, MultipliesLrByDecayToTheDistanceFromTheTop) {
  auto solver = make_solver("layer_decay: 0.5\n", blocks_net());
  const Net& net = solver->net();
  // L = 2 blocks: stem depth 0 -> 0.5^3, block0 -> 0.5^2, block1 -> 0.5^1, head -> 1.
  EXPECT_FLOAT_EQ(lr_of(net, "stem.weight"), 0.125f);
  EXPECT_FLOAT_EQ(lr_of(net, "block0_fc1.weight"), 0.25f);
  EXPECT_FLOAT_EQ(lr_of(net, "block0_ln1.weight"), 0.25f);
  EXPECT_FLOAT_EQ(lr_of(net, "block1_fc1.weight"), 0.5f);
  EXPECT_FLOAT_EQ(lr_of(net, "block1_fc1.bias"), 1.0f);  // its own lr_mult 2 times 0.5
  EXPECT_FLOAT_EQ(lr_of(net, "ln.weight"), 1.0f);
  EXPECT_FLOAT_EQ(lr_of(net, "head.bias"), 1.0f);
  EXPECT_FLOAT_EQ(decay_of(net, "head.bias"), 1.0f);  // no_weight_decay is off
  EXPECT_CONTAINS(solver->config().summary(), "layer_decay 0.5");
}

TEST(LayerDecay, DepthsOfAVit) {
  auto solver = make_solver("", blocks_net());
  const LayerDepths d = vit_layer_depths(solver->net());
  const Net& net = solver->net();
  EXPECT_EQ(d.blocks, 2);
  EXPECT_EQ(d.depth[net.layer_index("stem")], 0);
  EXPECT_EQ(d.depth[net.layer_index("block0_ln1")], 1);
  EXPECT_EQ(d.depth[net.layer_index("block1_fc1")], 2);
  EXPECT_EQ(d.depth[net.layer_index("head")], 3);
}

TEST(LayerDecay, NeedsBlocksAndARange) {
  EXPECT_CONTAINS(error_of<ConfigError>([] { make_solver("layer_decay: 0.7\n"); }), "block{i}_");
  EXPECT_CONTAINS(error_of<ConfigError>([] { make_solver("layer_decay: 0\n", blocks_net()); }), "(0, 1]");
  EXPECT_CONTAINS(error_of<ConfigError>([] { make_solver("layer_decay: 1.5\n", blocks_net()); }), "layer_decay");
  EXPECT_CONTAINS(error_of<ConfigError>([] { make_solver("no_weight_decay: BIASES\n", blocks_net()); }),
                  "BIASES_NORMS_EMBEDDINGS");
}

TEST(NoWeightDecay, BiasesNormsAndEmbeddingsGetNoDecay) {
  auto solver = make_solver("no_weight_decay: BIASES_NORMS_EMBEDDINGS\n", blocks_net());
  const Net& net = solver->net();
  EXPECT_EQ(decay_of(net, "stem.weight"), 1.0f);
  EXPECT_EQ(decay_of(net, "stem.bias"), 0.0f);
  EXPECT_EQ(decay_of(net, "block0_ln1.weight"), 0.0f);  // LayerNorm
  EXPECT_EQ(decay_of(net, "ln.weight"), 0.0f);          // Scale
  EXPECT_EQ(decay_of(net, "head.weight"), 1.0f);
  EXPECT_EQ(lr_of(net, "stem.weight"), 1.0f);  // layer_decay is off
}

TEST(NoWeightDecay, FingerprintChangesOnlyWhenAPolicyIsOn) {
  const std::string base = "net: \"n.prototxt\"\nbase_lr: 0.1\nmax_iter: 1\n";
  auto fp = [&](const std::string& extra) {
    return parse_solver_config(parse_config_text(base + extra, "/tmp/s.prototxt"), "/tmp/s.prototxt").fingerprint();
  };
  EXPECT_EQ(fp(""), fp("layer_decay: 1\nno_weight_decay: NONE\n"));
  EXPECT_NE(fp(""), fp("layer_decay: 0.75\n"));
  EXPECT_NE(fp(""), fp("no_weight_decay: BIASES_NORMS_EMBEDDINGS\n"));
}

}  // namespace
}  // namespace strata
