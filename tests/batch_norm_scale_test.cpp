// BatchNorm and Scale, run on the layers directly (no Net).
//
// The BatchNorm reference numbers were produced with PyTorch 1.13
// (/usr/bin/python3), affine=False, eps=1e-5:
//   4-D: bn = torch.nn.BatchNorm2d(2, momentum=0.1)  (= moving_average_fraction 0.9)
//        y = bn(x) in train mode, y.backward(dy) -> dx; running stats after
//        bn(x) and after a second bn(2 * x + 1); then bn.eval(): y and dx again.
//   2-D: bn = torch.nn.BatchNorm1d(3, momentum=1 - 0.999), train mode.
// printed with "%.9g" and pasted below. Scale values are hand-computed.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/layer.h"
#include "framework/layer_registry.h"
#include "framework/net.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test::make_layer;
using test::set;
using test::set_values;
using test::values;
using test::expect_near;
using test::backward;
using test::expect_error;

// ----------------------------------------------------------- BatchNorm ----

const Shape kShape4{3, 2, 2, 2};
const std::vector<float> kX4{0.5f, -1.0f, 2.0f,  0.25f, 1.5f,  -0.75f, 3.0f,  0.0f,
                             -2.0f, 1.0f, 0.5f,  -0.5f, 2.5f,  1.25f,  -1.5f, 0.75f,
                             1.0f,  0.0f, -0.25f, 2.0f, -1.0f, 0.5f,   1.75f, -2.5f};
const std::vector<float> kDy4{0.1f, -0.2f, 0.3f, 0.4f,  -0.5f, 0.6f,  0.7f,  -0.8f,
                              0.9f, 1.0f,  -1.1f, 1.2f, 0.2f,  -0.4f, 0.6f,  0.8f,
                              -0.3f, 0.5f, 0.1f, -0.7f, 0.25f, 0.35f, -0.45f, 0.55f};
// PyTorch, train mode (see the top of the file).
const std::vector<float> kY4{0.187250733f,  -1.16095436f,   1.53545582f,  -0.0374501199f, 0.653607488f,
                             -0.758184671f, 1.59480214f,    -0.287587285f, -2.05975771f,  0.63665247f,
                             0.187250733f,  -0.71155268f,   1.28107059f,  0.496741652f,   -1.22878206f,
                             0.183010086f,  0.63665247f,    -0.262150973f, -0.486851811f, 1.53545582f,
                             -0.915050447f, 0.0261442959f,  0.810473263f, -1.85624516f};
const std::vector<float> kDx4{-0.0324606337f, -0.607667148f, 0.452865511f,  0.186252818f,  -0.359290421f,
                              0.214733735f,   0.471122235f,  -0.624986231f, 0.177306265f,  0.878317595f,
                              -1.11102474f,   0.752512813f,  0.13157171f,   -0.309453577f, 0.176005304f,
                              0.417683244f,   -0.29012683f,  0.22520557f,   -0.185243353f, -0.445937872f,
                              -0.0177878514f, 0.122415341f,  -0.315007806f, 0.0929942206f};
const std::string kMaf09 = "batch_norm_param { moving_average_fraction: 0.9 }";

TEST(BatchNormLayer, ParamsArePyTorchStyleBuffers) {
  auto l = make_layer("BatchNorm");
  EXPECT_TRUE(l->supports_in_place());
  Blob x(kShape4), y;
  l->setup({&x}, {&y});
  ASSERT_EQ(l->params().size(), 2u);
  EXPECT_EQ(l->params()[0].name, "running_mean");
  EXPECT_EQ(l->params()[1].name, "running_var");
  for (const LayerParam& p : l->params()) {
    EXPECT_EQ(p.learnable, Learnable::kNo);
    EXPECT_EQ(p.blob->shape(), (Shape{2}));
  }
  expect_near(values(l->params()[0].blob->data), {0, 0}, 0.0f);
  expect_near(values(l->params()[1].blob->data), {1, 1}, 0.0f);
}

TEST(BatchNormLayer, TrainForwardBackwardAndRunningStatsMatchPyTorch4D) {
  auto l = make_layer("BatchNorm", kMaf09);
  Blob x, y;
  set(x, kShape4, kX4);
  l->setup({&x}, {&y});
  l->reshape({&x}, {&y});
  l->forward_cpu({&x}, {&y});
  expect_near(values(y.data), kY4, 1e-5f);
  set_values(y.diff, kDy4);
  backward(*l, {&y}, {&x});
  expect_near(values(x.diff), kDx4, 1e-5f);
  expect_near(values(l->params()[0].blob->data), {0.0291666668f, 0.0458333343f}, 1e-6f);
  expect_near(values(l->params()[1].blob->data), {1.03503788f, 1.17708325f}, 1e-6f);

  // Second batch 2x + 1: running stats keep averaging (PyTorch numbers).
  Blob x2;
  std::vector<float> v = kX4;
  for (float& f : v) f = 2.0f * f + 1.0f;
  set(x2, kShape4, v);
  l->reshape({&x2}, {&y});
  l->forward_cpu({&x2}, {&y});
  expect_near(values(l->params()[0].blob->data), {0.184583351f, 0.232916668f}, 1e-6f);
  expect_near(values(l->params()[1].blob->data), {1.47168565f, 2.16770816f}, 1e-6f);

  // A TEST-phase layer with those running statistics: PyTorch's eval mode.
  auto t = make_layer("BatchNorm", "", Phase::kTest);
  Blob ty;
  t->setup({&x}, {&ty});
  for (int i = 0; i < 2; ++i) t->params()[i].blob->data.copy_from(l->params()[i].blob->data);
  t->reshape({&x}, {&ty});
  t->forward_cpu({&x}, {&ty});
  expect_near(values(ty.data),
              {0.260001361f, -0.976464808f, 1.49646747f,   0.0539236516f, 0.860604823f, -0.667598367f,
               1.87940693f,  -0.158197328f, -1.80077565f,  0.672156751f,  0.260001361f, -0.564309418f,
               1.53980625f,  0.690804482f,  -1.17699945f,  0.35120374f,   0.672156751f, -0.152154043f,
               -0.358231723f, 1.49646747f,  -0.837398767f, 0.181403384f,  1.03040516f,  -1.85620093f},
              1e-5f);
  set_values(ty.diff, kDy4);
  backward(*t, {&ty}, {&x});
  expect_near(values(x.diff),
              {0.0824310854f, -0.164862171f, 0.247293264f, 0.329724342f,  -0.339600712f, 0.40752086f,
               0.475440979f,  -0.543361127f, 0.741879761f, 0.824310839f,  -0.906741917f, 0.989173055f,
               0.135840282f,  -0.271680564f, 0.40752086f,  0.543361127f,  -0.247293264f, 0.41215542f,
               0.0824310854f, -0.577017605f, 0.169800356f, 0.23772049f,   -0.305640638f, 0.373560786f},
              1e-5f);
  // TEST never touches the statistics.
  expect_near(values(t->params()[0].blob->data), values(l->params()[0].blob->data), 0.0f);
  expect_near(values(t->params()[1].blob->data), values(l->params()[1].blob->data), 0.0f);
}

TEST(BatchNormLayer, TrainMatchesPyTorch2DWithDefaultFraction) {
  auto l = make_layer("BatchNorm");  // moving_average_fraction 0.999
  Blob x, y;
  set(x, {4, 3}, {1.0f, -2.0f, 0.5f, 3.0f, 0.0f, -1.5f, -0.5f, 1.0f, 2.0f, 2.0f, 4.0f, -0.25f});
  l->setup({&x}, {&y});
  l->reshape({&x}, {&y});
  l->forward_cpu({&x}, {&y});
  expect_near(values(y.data),
              {-0.290020049f, -1.27016926f, 0.246631041f, 1.25675368f, -0.346409798f, -1.33180761f,
               -1.45010042f, 0.115469933f, 1.43045998f, 0.483366847f, 1.50110912f, -0.345283449f},
              1e-5f);
  set_values(y.diff, {0.3f, -0.1f, 0.2f, -0.4f, 0.5f, 0.6f, 0.7f, -0.8f, 0.1f, 0.2f, 0.3f, -0.9f});
  backward(*l, {&y}, {&x});
  expect_near(values(x.diff),
              {-0.00722740637f, 0.0110850157f, 0.172245577f, -0.0975790396f, 0.254957587f, 0.395762295f,
               -0.0361370668f, -0.362113714f, 0.162451938f, 0.140943512f, 0.0960711092f, -0.73045975f},
              1e-5f);
  expect_near(values(l->params()[0].blob->data), {0.00137500011f, 0.000750000007f, 0.000187500002f}, 1e-6f);
  expect_near(values(l->params()[1].blob->data), {1.00122917f, 1.00524998f, 1.00114059f}, 1e-6f);
}

TEST(BatchNormLayer, UseGlobalStatsDefaultsByPhaseAndCanBeForced) {
  // TEST phase with fresh statistics (mean 0, var 1): y = x / sqrt(1 + eps).
  const float s = 1.0f / std::sqrt(1.0f + 1e-5f);
  for (const auto& [body, phase] : std::vector<std::pair<std::string, Phase>>{
           {"", Phase::kTest}, {"batch_norm_param { use_global_stats: true }", Phase::kTrain}}) {
    SCOPED_TRACE(body + " " + phase_name(phase));
    auto l = make_layer("BatchNorm", body, phase);
    Blob x, y;
    set(x, {2, 2}, {1, 2, 3, 4});
    l->setup({&x}, {&y});
    l->reshape({&x}, {&y});
    l->forward_cpu({&x}, {&y});
    expect_near(values(y.data), {s, 2 * s, 3 * s, 4 * s});
    set_values(y.diff, {1, -1, 2, -2});
    backward(*l, {&y}, {&x});
    expect_near(values(x.diff), {s, -s, 2 * s, -2 * s});
    expect_near(values(l->params()[1].blob->data), {1, 1}, 0.0f);
  }
  // TEST phase with batch statistics: normalises by the batch, but leaves the
  // running statistics (shared with the TRAIN net) alone.
  auto l = make_layer("BatchNorm", "batch_norm_param { use_global_stats: false }", Phase::kTest);
  Blob x, y;
  set(x, {2, 1}, {1, 3});
  l->setup({&x}, {&y});
  l->reshape({&x}, {&y});
  l->forward_cpu({&x}, {&y});
  const float n = 1.0f / std::sqrt(1.0f + 1e-5f);
  expect_near(values(y.data), {-n, n});
  expect_near(values(l->params()[0].blob->data), {0}, 0.0f);
  expect_near(values(l->params()[1].blob->data), {1}, 0.0f);
}

// Runs forward + backward once out of place and once in place; both must give
// the PyTorch numbers, even when a later in-place layer rewrites the top.
TEST(BatchNormLayer, InPlaceMatchesOutOfPlace) {
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    auto l = make_layer("BatchNorm", kMaf09);
    Blob a, b;
    Blob* top = in_place ? &a : &b;
    set(a, kShape4, kX4);
    l->setup({&a}, {top});
    l->reshape({&a}, {top});
    l->forward_cpu({&a}, {top});
    expect_near(values(top->data), kY4, 1e-5f);
    top->data.fill(123.0f);  // e.g. an in-place Scale/ReLU after it
    set_values(top->diff, kDy4);
    backward(*l, {top}, {&a});
    expect_near(values(a.diff), kDx4, 1e-5f);
    expect_near(values(l->params()[1].blob->data), {1.03503788f, 1.17708325f}, 1e-6f);
  }
}

TEST(BatchNormLayer, ZeroBatchLeavesStatisticsAlone) {
  auto l = make_layer("BatchNorm");
  Blob x({0, 3, 2, 2}), y;
  l->setup({&x}, {&y});
  l->reshape({&x}, {&y});
  l->forward_cpu({&x}, {&y});
  EXPECT_EQ(y.shape(), (Shape{0, 3, 2, 2}));
  backward(*l, {&y}, {&x});
  expect_near(values(l->params()[0].blob->data), {0, 0, 0}, 0.0f);
  expect_near(values(l->params()[1].blob->data), {1, 1, 1}, 0.0f);
}

TEST(BatchNormLayer, LargeBatchIsStableWithBigMean) {
  // 1e4 + small noise: the two-pass variance keeps full precision.
  auto l = make_layer("BatchNorm");
  Blob x, y;
  const int n = 4096;
  x.resize({n, 1});
  float* p = x.data.data<float>();
  for (int i = 0; i < n; ++i) p[i] = 10000.0f + ((i % 2) ? 0.5f : -0.5f);
  l->setup({&x}, {&y});
  l->reshape({&x}, {&y});
  l->forward_cpu({&x}, {&y});
  const float want = 0.5f / std::sqrt(0.25f + 1e-5f);
  EXPECT_NEAR(y.data.data<float>()[0], -want, 1e-4f);
  EXPECT_NEAR(y.data.data<float>()[1], want, 1e-4f);
}

TEST(BatchNormLayer, Errors) {
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("BatchNorm");
        Blob x({5}), y;
        l->setup({&x}, {&y});
      },
      {"layer 'l' (BatchNorm)", "expected [N, C] or [N, C, H, W]", "got [5]"});
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("BatchNorm");
        Blob x({2, 3}), x4({2, 4}), y;
        l->setup({&x}, {&y});
        l->reshape({&x4}, {&y});
      },
      {"expected 3 channels", "[2, 4]"});
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("BatchNorm");
        Blob x({1, 3}), y;
        l->setup({&x}, {&y});
        l->reshape({&x}, {&y});
        l->forward_cpu({&x}, {&y});
      },
      {"more than one value per channel", "[1, 3]", "use_global_stats"});
  expect_error<ConfigError>([] { make_layer("BatchNorm", "batch_norm_param { moving_average_fraction: 1.5 }"); },
                            {"moving_average_fraction must be in [0, 1]"});
  expect_error<ConfigError>([] { make_layer("BatchNorm", "batch_norm_param { eps: 0 }"); }, {"eps must be > 0"});
}

// --------------------------------------------------------------- Scale ----

TEST(ScaleLayer, DefaultFillersAreOneAndZero) {
  auto l = make_layer("Scale", "scale_param { bias_term: true }");
  EXPECT_TRUE(l->supports_in_place());
  Blob x({2, 3, 2}), y;
  l->setup({&x}, {&y});
  ASSERT_EQ(l->params().size(), 2u);
  EXPECT_EQ(l->params()[0].name, "weight");
  EXPECT_EQ(l->params()[1].name, "bias");
  EXPECT_EQ(l->params()[0].learnable, Learnable::kYes);
  expect_near(values(l->params()[0].blob->data), {1, 1, 1}, 0.0f);
  expect_near(values(l->params()[1].blob->data), {0, 0, 0}, 0.0f);

  auto c = make_layer("Scale", "scale_param { filler { type: \"constant\" value: 2.5 } }");
  c->setup({&x}, {&y});
  ASSERT_EQ(c->params().size(), 1u);
  expect_near(values(c->params()[0].blob->data), {2.5f, 2.5f, 2.5f}, 0.0f);
}

const std::vector<float> kScaleX{1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};  // [2, 3, 2]
const std::vector<float> kScaleDy{1, 0, 0, 1, 2, 2, 1, 1, -1, 1, 0.5f, 0};

// y = x * w[c] + b[c] with w = {2, -1, 0.5}, b = {1, 0, -1}, then backward;
// parameter gradients accumulate over two backward calls.
TEST(ScaleLayer, PerChannelScaleAndBiasInPlaceAndOutOfPlace) {
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    auto l = make_layer("Scale", "scale_param { bias_term: true }");
    Blob a, b;
    Blob* top = in_place ? &a : &b;
    set(a, {2, 3, 2}, kScaleX);
    l->setup({&a}, {top});
    set_values(l->params()[0].blob->data, {2, -1, 0.5f});
    set_values(l->params()[1].blob->data, {1, 0, -1});
    l->reshape({&a}, {top});
    l->forward_cpu({&a}, {top});
    expect_near(values(top->data), {3, 5, -3, -4, 1.5f, 2, -1, -3, 3, 4, -3.5f, -4});
    for (int pass = 0; pass < 2; ++pass) {
      set_values(top->diff, kScaleDy);
      backward(*l, {top}, {&a});
    }
    expect_near(values(a.diff), {2, 0, 0, -1, 1, 1, 2, 2, 1, -1, 0.25f, 0});
    // dw[c] = sum dy * x over n and the inner axis, twice:
    //   c0: 1*1 + 0*2 + 1*-1 + 1*-2 = -2;  c1: 0*3 + 1*4 + -1*-3 + 1*-4 = 3;
    //   c2: 2*5 + 2*6 + 0.5*-5 + 0*-6 = 19.5.   db[c] = sum dy: 3, 1, 4.5.
    expect_near(values(l->params()[0].blob->diff), {-4, 6, 39});
    expect_near(values(l->params()[1].blob->diff), {6, 2, 9});
  }
}

TEST(ScaleLayer, AxisAndNumAxesChooseTheScaleShape) {
  const auto weight_shape = [](const std::string& body, const Shape& in) {
    auto l = make_layer("Scale", body);
    Blob x(in), y;
    l->setup({&x}, {&y});
    l->reshape({&x}, {&y});
    return l->params()[0].blob->shape();
  };
  EXPECT_EQ(weight_shape("", {2, 3, 4, 5}), (Shape{3}));
  EXPECT_EQ(weight_shape("scale_param { num_axes: 2 }", {2, 3, 4, 5}), (Shape{3, 4}));
  EXPECT_EQ(weight_shape("scale_param { num_axes: -1 }", {2, 3, 4, 5}), (Shape{3, 4, 5}));
  EXPECT_EQ(weight_shape("scale_param { axis: -1 }", {2, 3, 4, 5}), (Shape{5}));
  EXPECT_EQ(weight_shape("scale_param { axis: 0 num_axes: 0 }", {2, 3}), (Shape{}));

  // A scalar scale multiplies everything.
  auto l = make_layer("Scale", "scale_param { axis: 0 num_axes: 0 }");
  Blob x, y;
  set(x, {2, 2}, {1, 2, 3, 4});
  l->setup({&x}, {&y});
  set_values(l->params()[0].blob->data, {3});
  l->reshape({&x}, {&y});
  l->forward_cpu({&x}, {&y});
  expect_near(values(y.data), {3, 6, 9, 12});
  set_values(y.diff, {1, 1, 1, 1});
  backward(*l, {&y}, {&x});
  expect_near(values(l->params()[0].blob->diff), {10});
}

TEST(ScaleLayer, TwoBottomFormTakesTheScaleFromBottom1) {
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    auto l = make_layer("Scale", "scale_param { bias_term: true }");
    EXPECT_EQ(l->max_bottoms(), 2);
    Blob a, s, b;
    Blob* top = in_place ? &a : &b;
    set(a, {2, 3, 2}, kScaleX);
    set(s, {3}, {2, -1, 0.5f});
    l->setup({&a, &s}, {top});
    ASSERT_EQ(l->params().size(), 1u);  // only the bias
    EXPECT_EQ(l->params()[0].name, "bias");
    set_values(l->params()[0].blob->data, {1, 0, -1});
    l->reshape({&a, &s}, {top});
    l->forward_cpu({&a, &s}, {top});
    expect_near(values(top->data), {3, 5, -3, -4, 1.5f, 2, -1, -3, 3, 4, -3.5f, -4});
    s.diff.fill(100.0f);  // bottom gradients are overwritten, not accumulated
    for (int pass = 0; pass < 2; ++pass) {
      set_values(top->diff, kScaleDy);
      backward(*l, {top}, {&a, &s});
    }
    expect_near(values(a.diff), {2, 0, 0, -1, 1, 1, 2, 2, 1, -1, 0.25f, 0});
    expect_near(values(s.diff), {-2, 3, 19.5f});
    expect_near(values(l->params()[0].blob->diff), {6, 2, 9});
  }
}

TEST(ScaleLayer, ZeroBatch) {
  auto l = make_layer("Scale", "scale_param { bias_term: true }");
  Blob x({0, 3, 2}), y;
  l->setup({&x}, {&y});
  l->reshape({&x}, {&y});
  l->forward_cpu({&x}, {&y});
  backward(*l, {&y}, {&x});
  expect_near(values(l->params()[0].blob->diff), {0, 0, 0}, 0.0f);
}

TEST(ScaleLayer, Errors) {
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("Scale");
        Blob x({2, 3}), s({4}), y;
        l->setup({&x, &s}, {&y});
        l->reshape({&x, &s}, {&y});
      },
      {"layer 'l' (Scale)", "scale's shape [4]", "[2, 3]", "make bottom 1 match"});
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("Scale");
        Blob x({2, 3}), x2({2, 5}), y;
        l->setup({&x}, {&y});
        l->reshape({&x2}, {&y});
      },
      {"scale's shape [3]", "[2, 5]", "cannot change size"});
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("Scale", "scale_param { axis: 1 num_axes: 3 }");
        Blob x({2, 3}), y;
        l->setup({&x}, {&y});
      },
      {"axis 1 with 3 scale axes", "[2, 3]"});
  expect_error<ConfigError>([] { make_layer("Scale", "scale_param { filler { type: \"bogus\" } }"); },
                            {"bogus"});
  expect_error<ConfigError>([] { make_layer("Scale", "scale_param { num_axes: -2 }"); }, {"num_axes must be >= -1"});
}

// ----------------------------------------------- BatchNorm + Scale ----

// The usual Caffe pairing, both in place on one blob, through the Net, against
// the same net written out of place.
TEST(BatchNormLayer, InPlaceWithScaleInANetMatchesOutOfPlace) {
  const std::string head = R"(
    force_backward: true
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 3 dim: 2 dim: 2 dim: 2 } } }
  )";
  const std::string scale = "scale_param { bias_term: true filler { type: \"constant\" value: 2 } "
                            "bias_filler { type: \"constant\" value: 0.5 } }";
  const std::string in_place = head + R"(
    layer { name: "bn" type: "BatchNorm" bottom: "x" top: "x" )" + kMaf09 + R"( }
    layer { name: "sc" type: "Scale" bottom: "x" top: "x" )" + scale + " }";
  const std::string out_of_place = head + R"(
    layer { name: "bn" type: "BatchNorm" bottom: "x" top: "n" )" + kMaf09 + R"( }
    layer { name: "sc" type: "Scale" bottom: "n" top: "y" )" + scale + " }";
  std::vector<float> want_y;
  for (float v : kY4) want_y.push_back(2.0f * v + 0.5f);
  std::vector<float> want_dx;
  for (float v : kDx4) want_dx.push_back(2.0f * v);
  for (const bool inplace : {false, true}) {
    SCOPED_TRACE(inplace ? "in place" : "out of place");
    Net net(parse_config_text(inplace ? in_place : out_of_place, "net.prototxt"), NetOptions{});
    Blob& x = net.blob("x");
    Blob& y = net.blob(inplace ? "x" : "y");
    set(x, kShape4, kX4);
    net.forward();
    expect_near(values(y.data), want_y, 1e-5f);
    set_values(y.diff, kDy4);
    net.backward();
    expect_near(values(x.diff), want_dx, 1e-5f);
    // d weight = sum dy * normalised x, d bias = sum dy, per channel.
    const int w = net.param_index("sc.weight");
    const int b = net.param_index("sc.bias");
    ASSERT_GE(w, 0);
    ASSERT_GE(b, 0);
    double dw0 = 0, db0 = 0;
    for (int n = 0; n < 3; ++n) {
      for (int i = 0; i < 4; ++i) {
        dw0 += kDy4[n * 8 + i] * kY4[n * 8 + i];
        db0 += kDy4[n * 8 + i];
      }
    }
    EXPECT_NEAR(net.params()[w].blob->diff.data<float>()[0], dw0, 1e-5);
    EXPECT_NEAR(net.params()[b].blob->diff.data<float>()[0], db0, 1e-5);
    const int rv = net.param_index("bn.running_var");
    ASSERT_GE(rv, 0);
    EXPECT_EQ(net.params()[rv].learnable, Learnable::kNo);
    expect_near(values(net.params()[rv].blob->data), {1.03503788f, 1.17708325f}, 1e-6f);
  }
}

}  // namespace
}  // namespace strata
