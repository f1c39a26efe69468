// The Net as a whole, built from prototxt text written inline: phase
// filtering, automatic Split insertion, weight sharing, loss_weight,
// propagate_down, frozen layers, ranged forward/backward, the gradient-ready
// callback, share_params_from and the memory report. Each gradient claim is
// checked against a hand computation on the net's own parameter values.
// The errors a user meets while writing a net are in net_errors_test.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/net.h"
#include "framework/tensor.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test::all_zero;
using test::build_error;
using test::error_of;
using test::layer_names;
using test::make_net;
using test::param_blob;
using test::set_values;
using test::values;

// Deterministic, non-trivial values (no ties, no zeros).
void fill_wave(Tensor& t, float phase = 0.0f) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::sin(0.7f * static_cast<float>(i) + 0.3f + phase) + 0.05f;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "at index " << i;
  }
}

// ------------------------------------------------------------- phases ----

const char* kPhaseNet = R"(
name: "phases"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "train_inc" type: "ReLU" bottom: "x" top: "a" include { phase: TRAIN } }
layer { name: "test_inc" type: "ReLU" bottom: "x" top: "a" include { phase: TEST } }
layer { name: "not_test" type: "Sigmoid" bottom: "a" top: "b" exclude { phase: TEST } }
layer { name: "test_only" type: "TanH" bottom: "a" top: "b" phase: TEST }
layer { name: "both" type: "Flatten" bottom: "b" top: "c" }
layer { name: "train_or_test" type: "ReLU" bottom: "c" top: "d" include { phase: TRAIN } include { phase: TEST } }
)";

TEST(NetPhase, IncludeExcludeAndPhaseKeySelectLayers) {
  auto train = make_net(kPhaseNet, Phase::kTrain);
  auto test = make_net(kPhaseNet, Phase::kTest);
  EXPECT_EQ(layer_names(*train), (std::vector<std::string>{"in", "train_inc", "not_test", "both", "train_or_test"}));
  EXPECT_EQ(layer_names(*test), (std::vector<std::string>{"in", "test_inc", "test_only", "both", "train_or_test"}));
  EXPECT_EQ(train->phase(), Phase::kTrain);
  EXPECT_EQ(test->phase(), Phase::kTest);
  EXPECT_EQ(train->layer(2).type(), "Sigmoid");
  EXPECT_EQ(test->layer(2).type(), "TanH");
  EXPECT_EQ(train->output_names(), (std::vector<std::string>{"d"}));
}

TEST(NetPhase, RuleErrorsAndOtherPhaseLayersStillChecked) {
  const std::string both = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "y" include { phase: TRAIN } exclude { phase: TEST } }
)");
  EXPECT_CONTAINS(both, "layer 'r'");
  EXPECT_CONTAINS(both, "not both");

  // A typo in a TEST-only layer is reported while building the TRAIN net.
  const std::string other = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "y" include { phase: TEST } relu_param { negative_slop: 0.1 } }
)", Phase::kTrain);
  EXPECT_CONTAINS(other, "negative_slop");
  EXPECT_CONTAINS(other, "negative_slope");

  const std::string bad_phase = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "y" include { phase: TRAINING } }
)");
  EXPECT_CONTAINS(bad_phase, "TRAINING");
  EXPECT_CONTAINS(bad_phase, "TEST");

  const std::string empty = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } include { phase: TEST } }
)", Phase::kTrain);
  EXPECT_CONTAINS(empty, "no layers in phase TRAIN");
}

// ------------------------------------------------- Split insertion ----

// x feeds two InnerProducts; y = wo . (Wa x + Wb x) (biases zero-initialised
// but set here), so dL/dx = (Wa + Wb)^T wo: the sum of both paths.
TEST(NetSplit, InsertedWhenABlobFeedsTwoLayersAndSumsGradients) {
  auto net = make_net(R"(
force_backward: true
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "x" top: "ya" inner_product_param { num_output: 2 bias_term: false } }
layer { name: "b" type: "InnerProduct" bottom: "x" top: "yb" inner_product_param { num_output: 2 bias_term: false } }
layer { name: "sum" type: "Eltwise" bottom: "ya" bottom: "yb" top: "s" }
layer { name: "out" type: "InnerProduct" bottom: "s" top: "loss" loss_weight: 1
        inner_product_param { num_output: 1 bias_term: false } }
)");
  // in, split, a, b, sum, out
  ASSERT_EQ(net->num_layers(), 6);
  EXPECT_EQ(net->layer(1).type(), "Split");
  EXPECT_EQ(net->bottoms(1).at(0), &net->blob("x"));
  ASSERT_EQ(net->tops(1).size(), 2u);
  // Each reader has its own split output, not x itself.
  EXPECT_EQ(net->bottoms(2).at(0), net->tops(1).at(0));
  EXPECT_EQ(net->bottoms(3).at(0), net->tops(1).at(1));
  EXPECT_NE(net->bottoms(2).at(0), &net->blob("x"));
  int splits = 0;
  for (int i = 0; i < net->num_layers(); ++i) splits += net->layer(i).type() == "Split";
  EXPECT_EQ(splits, 1);  // ya, yb and s are read once each

  const std::vector<float> x = {0.5f, -1.0f, 2.0f};
  set_values(net->blob("x").data, x);
  const auto wa = values(param_blob(*net, "a.weight").data);  // [2, 3]
  const auto wb = values(param_blob(*net, "b.weight").data);
  const auto wo = values(param_blob(*net, "out.weight").data);  // [1, 2]
  const float loss = net->forward();
  float want_loss = 0.0f;
  for (int o = 0; o < 2; ++o) {
    for (int k = 0; k < 3; ++k) want_loss += wo[o] * (wa[o * 3 + k] + wb[o * 3 + k]) * x[k];
  }
  EXPECT_NEAR(loss, want_loss, 1e-5f);
  net->backward();
  std::vector<float> want(3, 0.0f), only_a(3, 0.0f);
  for (int k = 0; k < 3; ++k) {
    for (int o = 0; o < 2; ++o) {
      want[k] += (wa[o * 3 + k] + wb[o * 3 + k]) * wo[o];
      only_a[k] += wa[o * 3 + k] * wo[o];
    }
  }
  expect_near(values(net->blob("x").diff), want);
  // Not just one path (guards against a Split that overwrites instead of adding).
  EXPECT_GT(std::fabs(values(net->blob("x").diff)[0] - only_a[0]), 1e-3f);

  // Finite differences of the net's own loss agree.
  const float eps = 1e-2f;
  for (int k = 0; k < 3; ++k) {
    std::vector<float> xp = x, xm = x;
    xp[k] += eps;
    xm[k] -= eps;
    set_values(net->blob("x").data, xp);
    const float lp = net->forward();
    set_values(net->blob("x").data, xm);
    const float lm = net->forward();
    EXPECT_NEAR((lp - lm) / (2 * eps), want[k], 1e-3f) << "input " << k;
  }
}

TEST(NetSplit, NoSplitForASingleReaderOrInPlaceChain) {
  auto net = make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "x" }
layer { name: "s" type: "Sigmoid" bottom: "x" top: "y" }
)");
  EXPECT_EQ(layer_names(*net), (std::vector<std::string>{"in", "r", "s"}));
}

// ---------------------------------------------------- weight sharing ----

const char* kSharedNet = R"(
layer { name: "in" type: "Input" top: "x1" top: "x2" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "x1" top: "ya" param { name: "w" }
        inner_product_param { num_output: 2 bias_term: false } }
layer { name: "b" type: "InnerProduct" bottom: "x2" top: "yb" param { name: "w" }
        inner_product_param { num_output: 2 bias_term: false } }
layer { name: "sum" type: "Eltwise" bottom: "ya" bottom: "yb" top: "s" }
layer { name: "out" type: "InnerProduct" bottom: "s" top: "loss" loss_weight: 1
        inner_product_param { num_output: 1 bias_term: false } }
)";

TEST(NetSharing, OneParamOneBlobGradientIsTheSumOfBothUses) {
  auto net = make_net(kSharedNet);
  int named_w = 0;
  for (const auto& p : net->params()) named_w += p.name == "w";
  EXPECT_EQ(named_w, 1);
  EXPECT_EQ(net->params().size(), 2u);  // w, out.weight
  EXPECT_EQ(net->param_index("a.weight"), -1);
  EXPECT_EQ(net->param_index("b.weight"), -1);
  const int iw = net->param_index("w");
  ASSERT_GE(iw, 0);
  const int la = net->layer_index("a"), lb = net->layer_index("b");
  const Blob* w = net->params()[static_cast<size_t>(iw)].blob.get();
  EXPECT_EQ(net->layer(la).params().at(0).blob.get(), w);
  EXPECT_EQ(net->layer(lb).params().at(0).blob.get(), w);
  EXPECT_EQ(net->params()[static_cast<size_t>(iw)].owner_layer, la);

  const std::vector<float> x1 = {1.0f, -2.0f, 0.5f}, x2 = {0.25f, 3.0f, -1.0f};
  set_values(net->blob("x1").data, x1);
  set_values(net->blob("x2").data, x2);
  const auto wo = values(param_blob(*net, "out.weight").data);
  net->zero_param_diffs();
  net->forward_backward();
  // dL/dW[o][k] = wo[o] * (x1[k] + x2[k])
  std::vector<float> want(6), one_use(6);
  for (int o = 0; o < 2; ++o) {
    for (int k = 0; k < 3; ++k) {
      want[o * 3 + k] = wo[o] * (x1[k] + x2[k]);
      one_use[o * 3 + k] = wo[o] * x1[k];
    }
  }
  expect_near(values(w->diff), want);
  EXPECT_GT(std::fabs(values(w->diff)[1] - one_use[1]), 1e-3f);

  // Both layers really compute with the shared values.
  EXPECT_EQ(values(net->blob("ya").data).size(), 2u);
  const auto wv = values(w->data);
  for (int o = 0; o < 2; ++o) {
    float ya = 0, yb = 0;
    for (int k = 0; k < 3; ++k) {
      ya += wv[o * 3 + k] * x1[k];
      yb += wv[o * 3 + k] * x2[k];
    }
    EXPECT_NEAR(values(net->blob("ya").data)[o], ya, 1e-5f);
    EXPECT_NEAR(values(net->blob("yb").data)[o], yb, 1e-5f);
  }
}

TEST(NetSharing, ShapeMismatchNamesBothLayers) {
  const std::string msg = error_of<ShapeError>([] {
    make_net(R"(
layer { name: "in" type: "Input" top: "x1" top: "x2" input_param { shape { dim: 1 dim: 3 } shape { dim: 1 dim: 4 } } }
layer { name: "first" type: "InnerProduct" bottom: "x1" top: "ya" param { name: "w" }
        inner_product_param { num_output: 2 bias_term: false } }
layer { name: "second" type: "InnerProduct" bottom: "x2" top: "yb" param { name: "w" }
        inner_product_param { num_output: 2 bias_term: false } }
)");
  });
  EXPECT_CONTAINS(msg, "'first'");
  EXPECT_CONTAINS(msg, "'second'");
  EXPECT_CONTAINS(msg, "'w'");
  EXPECT_CONTAINS(msg, "[2, 3]");
  EXPECT_CONTAINS(msg, "[2, 4]");
}

TEST(NetSharing, ShareNameClashingWithAnUnsharedName) {
  const std::string msg = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "x" top: "ya" param { name: "b.weight" }
        inner_product_param { num_output: 3 bias_term: false } }
layer { name: "b" type: "InnerProduct" bottom: "ya" top: "yb" inner_product_param { num_output: 3 bias_term: false } }
)");
  EXPECT_CONTAINS(msg, "'b.weight'");
  EXPECT_CONTAINS(msg, "layer 'b'");
}

// ------------------------------------------------------- loss_weight ----

std::string loss_net(const std::string& loss_weight) {
  return R"(
force_backward: true
layer { name: "in" type: "Input" top: "x" top: "label" input_param { shape { dim: 4 dim: 5 } shape { dim: 4 } } }
layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 3 bias_filler { type: "gaussian" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "loss" )" +
         loss_weight + R"( }
)";
}

void fill_loss_inputs(Net& net) {
  fill_wave(net.blob("x").data);
  set_values(net.blob("label").data, {0, 2, 1, 2});
}

TEST(NetLossWeight, ScalesLossAndEveryGradient) {
  auto plain = make_net(loss_net(""));
  auto scaled = make_net(loss_net("loss_weight: 2.5"));
  // Same seed, same layers: same initial weights.
  ASSERT_EQ(values(param_blob(*plain, "fc.weight").data), values(param_blob(*scaled, "fc.weight").data));
  fill_loss_inputs(*plain);
  fill_loss_inputs(*scaled);
  const float l1 = plain->forward_backward();
  const float l2 = scaled->forward_backward();
  EXPECT_GT(l1, 0.1f);
  EXPECT_NEAR(l2, 2.5f * l1, 1e-5f);
  EXPECT_NEAR(values(plain->blob("loss").data)[0], l1, 1e-6f);  // the top itself is unweighted
  EXPECT_NEAR(values(scaled->blob("loss").data)[0], l1, 1e-6f);
  for (const char* p : {"fc.weight", "fc.bias"}) {
    const auto g1 = values(param_blob(*plain, p).diff);
    const auto g2 = values(param_blob(*scaled, p).diff);
    ASSERT_FALSE(all_zero(param_blob(*plain, p).diff)) << p;
    std::vector<float> want(g1.size());
    for (size_t i = 0; i < g1.size(); ++i) want[i] = 2.5f * g1[i];
    expect_near(g2, want);
  }
  const auto dx1 = values(plain->blob("x").diff);
  std::vector<float> want(dx1.size());
  for (size_t i = 0; i < dx1.size(); ++i) want[i] = 2.5f * dx1[i];
  expect_near(values(scaled->blob("x").diff), want);

  // loss_weight: 0 turns the loss off: no loss and no backward at all.
  std::string off_text = loss_net("loss_weight: 0");
  off_text.replace(off_text.find("force_backward: true"), 20, "");
  auto off = make_net(off_text);
  fill_loss_inputs(*off);
  EXPECT_EQ(off->forward(), 0.0f);
  for (int i = 0; i < off->num_layers(); ++i) EXPECT_FALSE(off->layer_needs_backward(i)) << off->layer(i).name();
}

TEST(NetLossWeight, OnANonLossLayerMakesItALoss) {
  auto net = make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y" loss_weight: -2
        inner_product_param { num_output: 1 bias_term: false } }
)");
  set_values(net->blob("x").data, {1, 2, 3});
  const auto w = values(param_blob(*net, "fc.weight").data);
  const float y = w[0] * 1 + w[1] * 2 + w[2] * 3;
  EXPECT_NEAR(net->forward(), -2.0f * y, 1e-5f);
  net->zero_param_diffs();
  net->backward();
  expect_near(values(param_blob(*net, "fc.weight").diff), {-2.0f, -4.0f, -6.0f});
}

// ---------------------------------------------------- propagate_down ----

std::string propagate_net(const std::string& propagate) {
  return R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "x" top: "ya" inner_product_param { num_output: 2 } }
layer { name: "b" type: "InnerProduct" bottom: "x" top: "yb" inner_product_param { num_output: 2 } }
layer { name: "sum" type: "Eltwise" bottom: "ya" bottom: "yb" top: "s" )" +
         propagate + R"( }
layer { name: "out" type: "InnerProduct" bottom: "s" top: "loss" loss_weight: 1 inner_product_param { num_output: 1 } }
)";
}

TEST(NetPropagateDown, FalseStopsGradientToThatBottom) {
  auto control = make_net(propagate_net(""));
  auto net = make_net(propagate_net("propagate_down: false propagate_down: true"));
  for (Net* n : {control.get(), net.get()}) {
    set_values(n->blob("x").data, {0.5f, -1.0f, 2.0f});
    n->zero_param_diffs();
    n->forward_backward();
  }
  // Without propagate_down both branches learn.
  EXPECT_TRUE(control->layer_needs_backward(control->layer_index("a")));
  EXPECT_FALSE(all_zero(param_blob(*control, "a.weight").diff));
  EXPECT_FALSE(all_zero(param_blob(*control, "a.bias").diff));

  EXPECT_FALSE(net->layer_needs_backward(net->layer_index("a")));
  EXPECT_TRUE(net->layer_needs_backward(net->layer_index("b")));
  EXPECT_TRUE(all_zero(param_blob(*net, "a.weight").diff));
  EXPECT_TRUE(all_zero(param_blob(*net, "a.bias").diff));
  EXPECT_FALSE(all_zero(param_blob(*net, "b.weight").diff));
  // b's gradient is unchanged by cutting a's branch.
  EXPECT_EQ(values(param_blob(*net, "b.weight").diff), values(param_blob(*control, "b.weight").diff));
  EXPECT_EQ(values(param_blob(*net, "out.weight").diff), values(param_blob(*control, "out.weight").diff));

  const std::string count = build_error(propagate_net("propagate_down: false"));
  EXPECT_CONTAINS(count, "layer 'sum'");
  EXPECT_CONTAINS(count, "1 propagate_down values for 2 bottoms");
}

TEST(NetPropagateDown, FalseKeepsTheBottomGradientUntouched) {
  auto net = make_net(R"(
force_backward: true
layer { name: "in" type: "Input" top: "x1" top: "x2" input_param { shape { dim: 1 dim: 2 } } }
layer { name: "sum" type: "Eltwise" bottom: "x1" bottom: "x2" top: "s" propagate_down: true propagate_down: false }
layer { name: "out" type: "InnerProduct" bottom: "s" top: "loss" loss_weight: 1
        inner_product_param { num_output: 1 bias_term: false } }
)");
  set_values(net->blob("x1").data, {1, 2});
  set_values(net->blob("x2").data, {3, 4});
  net->blob("x1").diff.fill(7.0f);
  net->blob("x2").diff.fill(7.0f);
  net->forward_backward();
  const auto wo = values(param_blob(*net, "out.weight").data);
  expect_near(values(net->blob("x1").diff), wo);
  EXPECT_EQ(values(net->blob("x2").diff), (std::vector<float>{7.0f, 7.0f}));
}

// --------------------------------------------------------- frozen ----

const char* kFrozenNet = R"(
layer { name: "in" type: "Input" top: "x" top: "label" input_param { shape { dim: 2 dim: 4 } shape { dim: 2 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h1" param { lr_mult: 0 } param { lr_mult: 0 }
        inner_product_param { num_output: 5 } }
layer { name: "relu1" type: "ReLU" bottom: "h1" top: "h1" }
layer { name: "ip2" type: "InnerProduct" bottom: "h1" top: "h2" param { lr_mult: 0 } param { lr_mult: 0 decay_mult: 0 }
        inner_product_param { num_output: 5 } }
layer { name: "ip3" type: "InnerProduct" bottom: "h2" top: "y" inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "loss" }
)";

TEST(NetFrozen, FrozenPrefixRunsNoBackward) {
  auto net = make_net(kFrozenNet);
  std::map<std::string, bool> need;
  for (int i = 0; i < net->num_layers(); ++i) need[net->layer(i).name()] = net->layer_needs_backward(i);
  EXPECT_EQ(need, (std::map<std::string, bool>{
                      {"in", false}, {"ip1", false}, {"relu1", false}, {"ip2", false}, {"ip3", true}, {"loss", true}}));
  EXPECT_EQ(net->params()[static_cast<size_t>(net->param_index("ip1.weight"))].lr_mult, 0.0f);
  EXPECT_EQ(net->params()[static_cast<size_t>(net->param_index("ip2.bias"))].decay_mult, 0.0f);
  EXPECT_EQ(net->params()[static_cast<size_t>(net->param_index("ip3.weight"))].lr_mult, 1.0f);

  fill_wave(net->blob("x").data);
  set_values(net->blob("label").data, {1, 2});
  net->blob("h1").diff.fill(5.0f);  // would be overwritten by ip2's backward
  net->zero_param_diffs();
  net->forward_backward();
  EXPECT_TRUE(all_zero(param_blob(*net, "ip1.weight").diff));
  EXPECT_TRUE(all_zero(param_blob(*net, "ip2.weight").diff));
  EXPECT_FALSE(all_zero(param_blob(*net, "ip3.weight").diff));
  EXPECT_EQ(values(net->blob("h1").diff), std::vector<float>(10, 5.0f));

  // Unfreezing the middle layer makes it (and only it, of the prefix) run backward.
  std::string text = kFrozenNet;
  const std::string frozen2 = "param { lr_mult: 0 } param { lr_mult: 0 decay_mult: 0 }";
  text.replace(text.find(frozen2), frozen2.size(), "");
  auto partly = make_net(text);
  EXPECT_TRUE(partly->layer_needs_backward(partly->layer_index("ip2")));
  EXPECT_FALSE(partly->layer_needs_backward(partly->layer_index("relu1")));
  EXPECT_FALSE(partly->layer_needs_backward(partly->layer_index("ip1")));
}

// --------------------------------------------------------- ranges ----

const char* kMlp = R"(
name: "mlp"
force_backward: true
layer { name: "in" type: "Input" top: "x" top: "label" input_param { shape { dim: 3 dim: 6 } shape { dim: 3 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h1" inner_product_param { num_output: 8 bias_filler { type: "gaussian" } } }
layer { name: "relu1" type: "ReLU" bottom: "h1" top: "h1" }
layer { name: "ip2" type: "InnerProduct" bottom: "h1" top: "h2" inner_product_param { num_output: 8 bias_filler { type: "gaussian" } } }
layer { name: "sig" type: "Sigmoid" bottom: "h2" top: "h2" }
layer { name: "ip3" type: "InnerProduct" bottom: "h2" top: "y" inner_product_param { num_output: 4 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "loss" }
)";

struct Grads {
  float loss = 0;
  std::vector<std::vector<float>> params;
  std::vector<float> dx;
};

Grads grads_of(Net& net) {
  Grads g;
  for (const auto& p : net.params()) g.params.push_back(values(p.blob->diff));
  g.dx = values(net.blob("x").diff);
  return g;
}

TEST(NetRanges, ForwardAndBackwardInPiecesMatchTheWholeNet) {
  auto net = make_net(kMlp);
  fill_wave(net->blob("x").data);
  set_values(net->blob("label").data, {0, 3, 1});
  net->zero_param_diffs();
  const float whole_loss = net->forward_backward();
  Grads whole = grads_of(*net);
  whole.loss = whole_loss;
  EXPECT_GT(whole.loss, 0.0f);
  for (const auto& g : whole.params) EXPECT_FALSE(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0f; }));

  const int n = net->num_layers();
  for (int cut = 0; cut < n - 1; ++cut) {
    net->zero_param_diffs();
    net->blob("x").diff.zero();
    const float l = net->forward(0, cut) + net->forward(cut + 1, n - 1);
    net->backward(cut + 1, n - 1);
    net->backward(0, cut);
    EXPECT_EQ(l, whole.loss) << "cut after layer " << cut;
    const Grads g = grads_of(*net);
    EXPECT_EQ(g.params, whole.params) << "cut after layer " << cut;
    EXPECT_EQ(g.dx, whole.dx) << "cut after layer " << cut;
  }
  // One layer at a time.
  net->zero_param_diffs();
  float l = 0;
  for (int i = 0; i < n; ++i) l += net->forward(i, i);
  for (int i = n - 1; i >= 0; --i) net->backward(i, i);
  EXPECT_EQ(l, whole.loss);
  EXPECT_EQ(grads_of(*net).params, whole.params);
  // The loss of a range is that of its loss layers only.
  EXPECT_EQ(net->forward(0, n - 2), 0.0f);
  // Parameter gradients accumulate across backward calls.
  net->backward();
  const Grads twice = grads_of(*net);
  for (size_t p = 0; p < twice.params.size(); ++p) {
    std::vector<float> want(whole.params[p].size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = 2 * whole.params[p][i];
    expect_near(twice.params[p], want);
  }

  const std::string bad = error_of<Error>([&] { net->forward(2, n); });
  EXPECT_CONTAINS(bad, "bad layer range");
  EXPECT_EQ(net->forward(3, 2), 0.0f);  // empty range
}

// ----------------------------------------------- gradient callback ----

TEST(NetGradReady, FiresOncePerParamAfterItsLastWriterLaterLayersFirst) {
  auto net = make_net(kMlp);
  fill_wave(net->blob("x").data);
  set_values(net->blob("label").data, {0, 3, 1});
  std::vector<int> fired;
  net->set_grad_ready_callback([&](int id) { fired.push_back(id); });
  net->zero_param_diffs();
  net->forward_backward();
  std::vector<int> sorted = fired;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(net->params().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  EXPECT_EQ(sorted, all);  // each exactly once
  auto pos = [&](const std::string& name) {
    return std::find(fired.begin(), fired.end(), net->param_index(name)) - fired.begin();
  };
  EXPECT_LT(pos("ip3.weight"), pos("ip2.weight"));
  EXPECT_LT(pos("ip3.bias"), pos("ip2.weight"));
  EXPECT_LT(pos("ip2.weight"), pos("ip1.weight"));
  EXPECT_LT(pos("ip2.bias"), pos("ip1.bias"));

  // Again, in ranges: still once each per backward pass.
  fired.clear();
  net->forward();
  net->backward(4, net->num_layers() - 1);
  net->backward(0, 3);
  std::sort(fired.begin(), fired.end());
  EXPECT_EQ(fired, all);
}

TEST(NetGradReady, SharedParamFiresAfterItsLowestUserWithTheFinalGradient) {
  auto net = make_net(kSharedNet);
  set_values(net->blob("x1").data, {1.0f, -2.0f, 0.5f});
  set_values(net->blob("x2").data, {0.25f, 3.0f, -1.0f});
  const int iw = net->param_index("w");
  std::vector<int> fired;
  std::vector<float> w_at_fire;
  net->set_grad_ready_callback([&](int id) {
    fired.push_back(id);
    if (id == iw) w_at_fire = values(net->params()[static_cast<size_t>(id)].blob->diff);
  });
  net->zero_param_diffs();
  net->forward_backward();
  EXPECT_EQ(fired, (std::vector<int>{net->param_index("out.weight"), iw}));
  EXPECT_EQ(net->params()[static_cast<size_t>(iw)].last_backward_layer, net->layer_index("a"));
  // At the callback the gradient already held both uses.
  EXPECT_EQ(w_at_fire, values(param_blob(*net, "w").diff));

  // Frozen parameters never fire: their layers run no backward.
  auto frozen = make_net(kFrozenNet);
  fill_wave(frozen->blob("x").data);
  set_values(frozen->blob("label").data, {1, 2});
  std::set<std::string> names;
  frozen->set_grad_ready_callback([&](int id) { names.insert(frozen->params()[static_cast<size_t>(id)].name); });
  frozen->forward_backward();
  EXPECT_EQ(names, (std::set<std::string>{"ip3.weight", "ip3.bias"}));
}

// ------------------------------------------------ share_params_from ----

const char* kTrainTest = R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "extra" type: "InnerProduct" bottom: "x" top: "e" include { phase: TEST } inner_product_param { num_output: 3 } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 2 bias_filler { type: "gaussian" } } }
)";

TEST(NetShareParams, TestNetUsesTrainNetBlobs) {
  auto train = make_net(kTrainTest, Phase::kTrain, 1);
  auto test = make_net(kTrainTest, Phase::kTest, 2);
  fill_wave(train->blob("x").data);
  fill_wave(test->blob("x").data);
  train->forward();
  test->forward();
  ASSERT_NE(values(train->blob("y").data), values(test->blob("y").data));  // different seeds

  const Blob* own_extra = &param_blob(*test, "extra.weight");
  test->share_params_from(*train);
  for (const char* p : {"ip.weight", "ip.bias"}) {
    EXPECT_EQ(&param_blob(*test, p), &param_blob(*train, p)) << p;
  }
  const int ip = test->layer_index("ip");
  EXPECT_EQ(test->layer(ip).params().at(0).blob.get(), &param_blob(*train, "ip.weight"));
  EXPECT_EQ(&param_blob(*test, "extra.weight"), own_extra);  // TEST-only: its own
  test->forward();
  EXPECT_EQ(values(train->blob("y").data), values(test->blob("y").data));
  // An update to the TRAIN weights is seen by the TEST net.
  const std::vector<float> before = values(test->blob("y").data);
  train->params()[static_cast<size_t>(train->param_index("ip.bias"))].blob->data.fill(10.0f);
  train->forward();
  test->forward();
  EXPECT_NE(values(test->blob("y").data), before);
  EXPECT_EQ(values(train->blob("y").data), values(test->blob("y").data));

  std::string other = kTrainTest;
  other.replace(other.find("num_output: 2"), 13, "num_output: 4");
  auto mismatched = make_net(other, Phase::kTest);
  const std::string msg = error_of<ShapeError>([&] { mismatched->share_params_from(*train); });
  EXPECT_CONTAINS(msg, "'ip.weight'");
  EXPECT_CONTAINS(msg, "[4, 3]");
  EXPECT_CONTAINS(msg, "[2, 3]");
  EXPECT_CONTAINS(msg, "TEST");
  EXPECT_CONTAINS(msg, "TRAIN");
}

// ---------------------------------------------------- memory report ----

TEST(NetMemory, ReportAddsUp) {
  auto net = make_net(R"(
layer { name: "in" type: "Input" top: "x1" top: "x2" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "x1" top: "ya" param { name: "w" } inner_product_param { num_output: 5 } }
layer { name: "b" type: "InnerProduct" bottom: "x2" top: "yb" param { name: "w" } inner_product_param { num_output: 5 } }
layer { name: "sum" type: "Eltwise" bottom: "ya" bottom: "yb" top: "s" }
layer { name: "bn" type: "BatchNorm" bottom: "s" top: "s" }
layer { name: "relu" type: "ReLU" bottom: "s" top: "s" }
)");
  size_t learnable = 0, buffers = 0;
  for (const auto& p : net->params()) {
    (p.learnable == Learnable::kYes ? learnable : buffers) += static_cast<size_t>(p.blob->numel());
  }
  // w [5, 3] once, a.bias [5], b.bias [5]
  EXPECT_EQ(learnable, 15u + 5u + 5u);
  EXPECT_GT(buffers, 0u);
  const MemoryReport r = net->memory_report();
  EXPECT_EQ(r.param_bytes, learnable * 4);
  EXPECT_EQ(r.grad_bytes, learnable * 4);
  EXPECT_EQ(r.buffer_bytes, buffers * 4 * 2);
  size_t act = 0;
  for (const auto& name : net->blob_names()) act += static_cast<size_t>(net->blob(name).numel()) * 4 * 2;
  // x1, x2 [4, 3]; ya, yb, s [4, 5] (s in place three times: counted once)
  EXPECT_EQ(act, (12u * 2 + 20u * 3) * 8);
  EXPECT_EQ(r.activation_bytes, act);
  EXPECT_CONTAINS(r.str(), "parameters 100 B");
  EXPECT_CONTAINS(r.str(), "total ");
}

}  // namespace
}  // namespace strata
