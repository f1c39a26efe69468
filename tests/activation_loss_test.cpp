// Hand-checked and PyTorch-checked values for the activation, dropout,
// softmax, loss and accuracy layers, run on the layers directly (no Net).
// Values marked "PyTorch" were produced with PyTorch 1.13 (/usr/bin/python3):
// torch.nn.functional.{leaky_relu, sigmoid, tanh, softmax, cross_entropy} on
// the same inputs, printed with 9 significant digits, then pasted here.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <limits>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/layer.h"
#include "framework/layer_registry.h"
#include "framework/rng.h"
#include "framework/cpu/threads.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test::make_layer;
using test::set;
using test::set_diff;
using test::values;
using test::expect_near;
using test::forward;
using test::backward;

// Runs forward + backward out of place and in place on the same input and
// checks both give `want_y` and `want_dx`.
void check_elementwise(const std::string& type, const std::string& body, const std::vector<float>& x,
                       const std::vector<float>& dy, const std::vector<float>& want_y,
                       const std::vector<float>& want_dx, float tol = 1e-6f) {
  const Shape shape{static_cast<int64_t>(x.size())};
  {
    SCOPED_TRACE(type + " out of place");
    auto l = make_layer(type, body);
    Blob in, out;
    set(in, shape, x);
    forward(*l, {&in}, {&out});
    expect_near(values(out.data), want_y, tol);
    set_diff(out, dy);
    backward(*l, {&out}, {&in});
    expect_near(values(in.diff), want_dx, tol);
    expect_near(values(in.data), x, 0.0f);  // input untouched
  }
  {
    SCOPED_TRACE(type + " in place");
    auto l = make_layer(type, body);
    Blob b;
    set(b, shape, x);
    forward(*l, {&b}, {&b});
    expect_near(values(b.data), want_y, tol);
    set_diff(b, dy);
    backward(*l, {&b}, {&b});
    expect_near(values(b.diff), want_dx, tol);
  }
}

// ---------------------------------------------------------------- ReLU ----

TEST(ReLU, HandValuesOutOfPlaceAndInPlace) {
  const std::vector<float> x{-2.0f, -0.5f, 0.0f, 0.5f, 3.0f};
  const std::vector<float> dy{1, 2, 3, 4, 5};
  // Caffe convention: the gradient at exactly 0 is the negative-side slope.
  check_elementwise("ReLU", "", x, dy, {0, 0, 0, 0.5f, 3}, {0, 0, 0, 4, 5});
  check_elementwise("ReLU", "relu_param { negative_slope: 0.1 engine: CAFFE }", x, dy,
                    {-0.2f, -0.05f, 0, 0.5f, 3}, {0.1f, 0.2f, 0.3f, 4, 5});
}

TEST(ReLU, NegativeSlopeWorksOutOfPlaceButRefusesInPlace) {
  const std::vector<float> x{-2.0f, 1.0f};
  auto l = make_layer("ReLU", "relu_param { negative_slope: -0.5 }");
  Blob in, out;
  set(in, {2}, x);
  forward(*l, {&in}, {&out});
  expect_near(values(out.data), {1.0f, 1.0f});
  set_diff(out, {1, 1});
  backward(*l, {&out}, {&in});
  expect_near(values(in.diff), {-0.5f, 1.0f});

  auto l2 = make_layer("ReLU", "relu_param { negative_slope: -0.5 }");
  Blob b;
  set(b, {2}, x);
  try {
    l2->setup({&b}, {&b});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("in place"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 'l'"), std::string::npos) << e.what();
  }
}

TEST(LeakyReLU, DefaultSlopeMatchesPyTorch) {
  // PyTorch: F.leaky_relu(x, 0.01) and its gradient for dy = [1, 2, 3, 4, 5].
  check_elementwise("LeakyReLU", "", {-3.0f, -0.5f, 0.25f, 2.0f, 40.0f}, {1, 2, 3, 4, 5},
                    {-0.0299999993f, -0.00499999989f, 0.25f, 2.0f, 40.0f},
                    {0.00999999978f, 0.0199999996f, 3.0f, 4.0f, 5.0f});
  check_elementwise("LeakyReLU", "leaky_relu_param { negative_slope: 0.5 }", {-4.0f, 2.0f}, {1, 1}, {-2.0f, 2.0f},
                    {0.5f, 1.0f});
}

TEST(ReLU, LargeTensorUsesThreadsAndMatchesSerialRule) {
  Blob in, out;
  const int64_t n = 300000;  // well above the parallel_for chunk
  in.resize({n});
  float* x = in.data.data<float>();
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((i % 7) - 3);
  auto l = make_layer("ReLU", "relu_param { negative_slope: 0.25 }");
  forward(*l, {&in}, {&out});
  const float* y = out.data.data<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i] > 0 ? x[i] : 0.25f * x[i]) << i;
}

// ------------------------------------------------------ Sigmoid / TanH ----

TEST(Sigmoid, MatchesPyTorchIncludingSaturation) {
  // PyTorch: torch.sigmoid and its gradient for dy = [1, 2, 3, 4, 5].
  check_elementwise("Sigmoid", "", {-100.0f, -2.0f, 0.0f, 1.5f, 100.0f}, {1, 2, 3, 4, 5},
                    {0.0f, 0.119202919f, 0.5f, 0.817574441f, 1.0f}, {0.0f, 0.209987164f, 0.75f, 0.59658587f, 0.0f});
}

TEST(Sigmoid, ExtremeInputsStayFinite) {
  auto l = make_layer("Sigmoid");
  Blob in, out;
  set(in, {4}, {-3e38f, -1e4f, 1e4f, 3e38f});
  forward(*l, {&in}, {&out});
  expect_near(values(out.data), {0.0f, 0.0f, 1.0f, 1.0f}, 0.0f);
}

TEST(TanH, MatchesPyTorch) {
  // PyTorch: torch.tanh and its gradient for dy = [1, 2, 3, 4, 5].
  check_elementwise("TanH", "", {-100.0f, -2.0f, 0.0f, 1.5f, 100.0f}, {1, 2, 3, 4, 5},
                    {-1.0f, -0.964027584f, 0.0f, 0.905148268f, 1.0f}, {0.0f, 0.141301632f, 3.0f, 0.722826481f, 0.0f});
}

// ------------------------------------------------------------- Dropout ----

TEST(Dropout, TestPhaseForwardAndBackwardCopy) {
  const std::vector<float> x{1, -2, 3, -4, 5, 6};
  for (bool in_place : {false, true}) {
    auto l = make_layer("Dropout", "dropout_param { dropout_ratio: 0.9 }", Phase::kTest);
    Blob a, b;
    Blob* out = in_place ? &a : &b;
    set(a, {2, 3}, x);
    forward(*l, {&a}, {out});
    expect_near(values(out->data), x, 0.0f);
    set_diff(*out, {6, 5, 4, 3, 2, 1});
    backward(*l, {out}, {&a});
    expect_near(values(a.diff), {6, 5, 4, 3, 2, 1}, 0.0f);
  }
}

TEST(Dropout, TrainScalesKeptValuesAndBackwardUsesTheSameMask) {
  for (bool in_place : {false, true}) {
    auto l = make_layer("Dropout", "dropout_param { dropout_ratio: 0.75 }");
    Blob a, b;
    Blob* out = in_place ? &a : &b;
    const int64_t n = 1000;
    a.resize({n});
    for (int64_t i = 0; i < n; ++i) a.data.data<float>()[i] = 1.0f + static_cast<float>(i);
    forward(*l, {&a}, {out});
    int kept = 0;
    std::vector<bool> mask(n);
    for (int64_t i = 0; i < n; ++i) {
      const float y = out->data.data<float>()[i];
      mask[i] = y != 0.0f;
      kept += mask[i];
      if (mask[i]) {
        EXPECT_FLOAT_EQ(y, 4.0f * (1.0f + static_cast<float>(i)));  // 1 / (1 - 0.75)
      }
    }
    EXPECT_GT(kept, 200);
    EXPECT_LT(kept, 300);
    out->diff.fill(1.0f);
    backward(*l, {out}, {&a});
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a.diff.data<float>()[i], mask[i] ? 4.0f : 0.0f) << i;
  }
}

TEST(Dropout, SameSeedSameMaskAndStateRoundTripContinuesTheStream) {
  const int64_t n = 200000;  // large enough for the threaded scaling path
  Blob in;
  in.resize({n});
  in.data.fill(1.0f);
  auto run = [&](Layer& l) {
    Blob out;
    forward(l, {&in}, {&out});
    return values(out.data);
  };
  auto a = make_layer("Dropout", "", Phase::kTrain, 42);
  auto b = make_layer("Dropout", "", Phase::kTrain, 42);
  auto c = make_layer("Dropout", "", Phase::kTrain, 43);
  const std::vector<float> a1 = run(*a);
  EXPECT_EQ(a1, run(*b));
  EXPECT_NE(a1, run(*c));
  double kept = 0;
  for (float v : a1) kept += v != 0.0f;
  EXPECT_NEAR(kept / n, 0.5, 0.01);

  // Save after one step; a fresh layer with another seed that loads this
  // state must draw exactly what `a` draws next.
  const std::string state = a->save_state();
  const std::vector<float> a2 = run(*a);
  EXPECT_NE(a1, a2);  // a new mask every forward
  auto d = make_layer("Dropout", "", Phase::kTrain, 7);
  d->load_state(state);
  EXPECT_EQ(a2, run(*d));
}

// The generic gradient check cannot hold a TRAIN mask fixed between its
// forwards, so the TRAIN-phase gradient is checked here by restoring the RNG
// state before each forward: every evaluation then sees the same mask.
TEST(Dropout, TrainGradientMatchesFiniteDifferencesWithReplayedMask) {
  auto l = make_layer("Dropout", "dropout_param { dropout_ratio: 0.3 }", Phase::kTrain, 5);
  Blob in, out;
  in.resize({4, 5});
  Rng rng(3);
  for (int64_t i = 0; i < in.numel(); ++i) in.data.data<float>()[i] = rng.gaussian(0, 1);
  std::vector<float> w(in.numel());
  for (float& v : w) v = rng.gaussian(0, 1);
  l->setup({&in}, {&out});
  const std::string state = l->save_state();
  auto objective = [&]() {
    l->load_state(state);
    l->reshape({&in}, {&out});
    l->forward_cpu({&in}, {&out});
    double s = 0;
    for (int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(w[i]) * out.data.data<float>()[i];
    return s;
  };
  objective();
  set_diff(out, w);
  backward(*l, {&out}, {&in});
  const std::vector<float> analytic = values(in.diff);
  int zeros = 0;
  for (float g : analytic) zeros += g == 0.0f;
  EXPECT_GT(zeros, 0);  // the mask really drops something...
  EXPECT_LT(zeros, static_cast<int>(analytic.size()));  // ...and keeps something
  const float h = 1e-2f;
  for (int64_t i = 0; i < in.numel(); ++i) {
    float& x = in.data.data<float>()[i];
    const float x0 = x;
    x = x0 + h;
    const double plus = objective();
    x = x0 - h;
    const double minus = objective();
    x = x0;
    EXPECT_NEAR((plus - minus) / (2 * h), analytic[i], 1e-3) << "at " << i;
  }
}

TEST(Dropout, RatioOutsideRangeIsAConfigError) {
  for (const char* ratio : {"1", "1.5", "-0.1", "nan"}) {
    try {
      make_layer("Dropout", std::string("dropout_param { dropout_ratio: ") + ratio + " }");
      FAIL() << "ratio " << ratio << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("dropout_ratio"), std::string::npos) << e.what();
      // nan is refused as a number before the range is checked.
      const char* why = std::string(ratio) == "nan" ? "expected a finite number" : "[0, 1)";
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

TEST(Dropout, TrainRatioZeroIsIdentity) {
  const std::vector<float> x{1, -2, 3};
  check_elementwise("Dropout", "dropout_param { dropout_ratio: 0 }", x, {4, 5, 6}, x, {4, 5, 6});
}

// ------------------------------------------------------------- Softmax ----

const std::vector<float> kSpatialScores{1.0f, -1.0f, 2.0f, 0.0f, 3.0f, 0.5f,
                                        0.1f, 0.2f,  -0.3f, 0.4f, 0.5f, -0.6f};  // [2, 3, 2]

TEST(Softmax, AxisOneOnSpatialInputMatchesPyTorch) {
  // PyTorch: y = torch.softmax(s, 1); y.backward(torch.arange(12.)/10) on s [2, 3, 2].
  const std::vector<float> want_y{0.0900305733f, 0.121951655f, 0.244728476f, 0.331498951f,
                                  0.665240943f,  0.54654938f,  0.316241056f, 0.374429226f,
                                  0.211982727f,  0.457328886f, 0.471776247f, 0.168241903f};
  const std::vector<float> want_dx{-0.0283634197f, -0.0347464122f, -0.0281540714f, -0.0281507391f,
                                   0.056517493f,   0.0628971457f,  -0.073085539f,  -0.0594453476f,
                                   -0.00659416104f, 0.0188590605f, 0.0796796679f,  0.040586248f};
  std::vector<float> dy(12);
  for (int i = 0; i < 12; ++i) dy[i] = static_cast<float>(i) / 10.0f;
  for (bool in_place : {false, true}) {
    auto l = make_layer("Softmax");
    Blob a, b;
    Blob* out = in_place ? &a : &b;
    set(a, {2, 3, 2}, kSpatialScores);
    forward(*l, {&a}, {out});
    expect_near(values(out->data), want_y, 1e-6f);
    set_diff(*out, dy);
    backward(*l, {out}, {&a});
    expect_near(values(a.diff), want_dx, 1e-5f);
  }
}

TEST(Softmax, HugeLogitsStayFinite) {
  auto l = make_layer("Softmax", "softmax_param { axis: -1 engine: CAFFE }");
  Blob in, out;
  // PyTorch: softmax([1000, 1001, 1002]) = [0.0900305733, 0.244728476, 0.665240943].
  set(in, {2, 3}, {1e30f, 0.0f, -1e30f, 1000.0f, 1001.0f, 1002.0f});
  forward(*l, {&in}, {&out});
  expect_near(values(out.data), {1.0f, 0.0f, 0.0f, 0.0900305733f, 0.244728476f, 0.665240943f}, 1e-6f);
}

TEST(Softmax, ManyRowsThreadedSumToOne) {
  auto l = make_layer("Softmax");
  Blob in, out;
  in.resize({5000, 10, 3});
  Rng rng(9);
  for (int64_t i = 0; i < in.numel(); ++i) in.data.data<float>()[i] = rng.gaussian(0, 5);
  forward(*l, {&in}, {&out});
  const float* y = out.data.data<float>();
  for (int64_t o = 0; o < 5000; ++o) {
    for (int64_t i = 0; i < 3; ++i) {
      double s = 0;
      for (int64_t c = 0; c < 10; ++c) s += y[(o * 10 + c) * 3 + i];
      ASSERT_NEAR(s, 1.0, 1e-5) << o << "," << i;
    }
  }
}

TEST(Softmax, AxisOutOfRangeIsAShapeError) {
  auto l = make_layer("Softmax", "softmax_param { axis: 2 }");
  Blob in, out;
  in.resize({2, 3});
  EXPECT_THROW(forward(*l, {&in}, {&out}), ShapeError);
}

// ----------------------------------------------------- SoftmaxWithLoss ----

// PyTorch: F.cross_entropy on these [3, 4] scores, labels [0, 3, 1].
const std::vector<float> kScores{1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 0.3f, -0.2f, 2.5f, 3.0f, -2.0f, 1.0f, 0.0f};
const float kCeSum = 6.90188313f;  // reduction="sum"
const std::vector<float> kCeGradSum{-0.775792181f, 0.609460056f, 0.135988906f, 0.0303432308f,
                                    0.0651419759f, 0.0879324675f, 0.053333737f, -0.206408203f,
                                    0.839024484f,  -0.994346678f, 0.113549612f, 0.0417725667f};
// With the second label ignored (ignore_index): sum over the other two rows.
const float kCeIgnoredSum = 6.67069721f;
const std::vector<float> kCeIgnoredGradSum{-0.775792182f, 0.609460056f, 0.135988906f, 0.0303432308f, 0, 0, 0, 0,
                                           0.839024484f,  -0.994346678f, 0.113549612f, 0.0417725667f};

struct LossRun {
  float loss;
  std::vector<float> grad;
  std::vector<float> prob;
};

LossRun run_loss(const std::string& body, const Shape& score_shape, const std::vector<float>& scores,
                 const Shape& label_shape, const std::vector<float>& labels, float loss_weight = 1.0f,
                 bool want_prob = false) {
  auto l = make_layer("SoftmaxWithLoss", body);
  EXPECT_EQ(l->default_loss_weight(0), 1.0f);
  EXPECT_FALSE(l->can_backward_to(1));
  EXPECT_EQ(l->max_tops(), 2);
  Blob s, lab, loss, prob;
  set(s, score_shape, scores);
  set(lab, label_shape, labels);
  BlobVec tops{&loss};
  if (want_prob) tops.push_back(&prob);
  forward(*l, {&s, &lab}, tops);
  EXPECT_EQ(loss.numel(), 1);
  loss.diff.data<float>()[0] = loss_weight;
  l->backward_cpu(tops, {true, false}, {&s, &lab});
  return {loss.data.data<float>()[0], values(s.diff), want_prob ? values(prob.data) : std::vector<float>{}};
}

std::vector<float> scaled(const std::vector<float>& v, float k) {
  std::vector<float> out(v);
  for (float& x : out) x *= k;
  return out;
}

TEST(SoftmaxWithLoss, EveryNormalizationMatchesPyTorch) {
  const std::vector<float> labels{0, 3, 1};
  struct Case {
    const char* body;
    float divisor;
  } cases[] = {{"", 3},  // VALID (PyTorch reduction="mean": 2.30062771)
               {"loss_param { normalization: VALID }", 3},
               {"loss_param { normalization: BATCH_SIZE }", 3},
               {"loss_param { normalization: FULL }", 3},
               {"loss_param { normalization: NONE }", 1},
               {"loss_param { normalize: false }", 3},
               {"loss_param { normalize: true }", 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const LossRun r = run_loss(c.body, {3, 4}, kScores, {3}, labels);
    EXPECT_NEAR(r.loss, kCeSum / c.divisor, 1e-5);
    expect_near(r.grad, scaled(kCeGradSum, 1.0f / c.divisor), 1e-5f);
  }
  EXPECT_NEAR(run_loss("", {3, 4}, kScores, {3}, labels).loss, 2.30062771f, 1e-6);
}

TEST(SoftmaxWithLoss, IgnoreLabelWithEveryNormalization) {
  const std::vector<float> labels{0, 255, 1};
  struct Case {
    const char* norm;
    float divisor;
  } cases[] = {{"VALID", 2}, {"BATCH_SIZE", 3}, {"FULL", 3}, {"NONE", 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.norm);
    const LossRun r = run_loss(std::string("loss_param { ignore_label: 255 normalization: ") + c.norm + " }",
                               {3, 4}, kScores, {3}, labels);
    EXPECT_NEAR(r.loss, kCeIgnoredSum / c.divisor, 1e-5);
    expect_near(r.grad, scaled(kCeIgnoredGradSum, 1.0f / c.divisor), 1e-5f);
  }
  // PyTorch: cross_entropy(..., ignore_index=-1) with reduction="mean" = 3.33534861.
  EXPECT_NEAR(run_loss("loss_param { ignore_label: -1 }", {3, 4}, kScores, {3}, {0, -1, 1}).loss, 3.33534861f, 1e-6);
}

TEST(SoftmaxWithLoss, LossWeightScalesGradientAndSecondTopIsProbabilities) {
  const LossRun r = run_loss("", {3, 4}, kScores, {3}, {0, 3, 1}, 2.0f, /*want_prob=*/true);
  expect_near(r.grad, scaled(kCeGradSum, 2.0f / 3.0f), 1e-5f);
  ASSERT_EQ(r.prob.size(), 12u);
  // p - onehot = grad of the summed loss, so p = grad_sum + onehot.
  std::vector<float> want_p = kCeGradSum;
  want_p[0] += 1;
  want_p[7] += 1;
  want_p[9] += 1;
  expect_near(r.prob, want_p, 1e-5f);
}

TEST(SoftmaxWithLoss, SpatialAxisMatchesPyTorch) {
  // PyTorch: F.cross_entropy(s [2, 3, 2], labels [[2, 0], [1, 1]], reduction="sum") = 4.84533978.
  const std::vector<float> want_grad_sum{0.0900305808f, -0.87804836f, 0.244728491f, 0.331498951f,
                                         -0.334759057f, 0.54654938f,  0.316241056f, 0.374429226f,
                                         -0.788017273f, -0.542671084f, 0.471776217f, 0.168241903f};
  const LossRun valid = run_loss("", {2, 3, 2}, kSpatialScores, {2, 1, 2}, {2, 0, 1, 1});
  EXPECT_NEAR(valid.loss, 4.84533978f / 4, 1e-6);
  expect_near(valid.grad, scaled(want_grad_sum, 0.25f), 1e-5f);
  const LossRun batch =
      run_loss("loss_param { normalization: BATCH_SIZE }", {2, 3, 2}, kSpatialScores, {2, 2}, {2, 0, 1, 1});
  EXPECT_NEAR(batch.loss, 4.84533978f / 2, 1e-6);
  expect_near(batch.grad, scaled(want_grad_sum, 0.5f), 1e-5f);
}

TEST(SoftmaxWithLoss, GradientOnProbabilitiesTopFlowsThroughTheSoftmax) {
  // Every label ignored, so only the probabilities top's gradient remains; it
  // must equal the Softmax layer's backward (PyTorch values as in
  // Softmax.AxisOneOnSpatialInputMatchesPyTorch).
  auto l = make_layer("SoftmaxWithLoss", "loss_param { ignore_label: 9 }");
  Blob s, lab, loss, prob;
  set(s, {2, 3, 2}, kSpatialScores);
  set(lab, {2, 2}, {9, 9, 9, 9});
  forward(*l, {&s, &lab}, {&loss, &prob});
  EXPECT_EQ(loss.data.data<float>()[0], 0.0f);
  loss.diff.data<float>()[0] = 1.0f;
  for (int i = 0; i < 12; ++i) prob.diff.data<float>()[i] = static_cast<float>(i) / 10.0f;
  l->backward_cpu({&loss, &prob}, {true, false}, {&s, &lab});
  expect_near(values(s.diff),
              {-0.0283634197f, -0.0347464122f, -0.0281540714f, -0.0281507391f, 0.056517493f, 0.0628971457f,
               -0.073085539f, -0.0594453476f, -0.00659416104f, 0.0188590605f, 0.0796796679f, 0.040586248f},
              1e-5f);
}

TEST(SoftmaxWithLoss, AllIgnoredGivesZeroLossAndZeroGradient) {
  for (const char* norm : {"VALID", "BATCH_SIZE", "FULL", "NONE"}) {
    const LossRun r = run_loss(std::string("loss_param { ignore_label: 3 normalization: ") + norm + " }", {3, 4},
                               kScores, {3}, {3, 3, 3});
    EXPECT_EQ(r.loss, 0.0f) << norm;
    for (float g : r.grad) EXPECT_EQ(g, 0.0f) << norm;
  }
}

TEST(SoftmaxWithLoss, EmptyBatchGivesZeroLoss) {
  const LossRun r = run_loss("", {0, 4}, {}, {0}, {});
  EXPECT_EQ(r.loss, 0.0f);
  EXPECT_TRUE(r.grad.empty());
}

TEST(SoftmaxWithLoss, HugeLogitsGiveFiniteLoss) {
  // PyTorch: cross_entropy([[1e30, 0, -1e30]], [2]) = 2e30;
  //          cross_entropy([[1000, 1001, 1002]], [0]) = 2.40760589.
  const LossRun r = run_loss("loss_param { normalization: NONE }", {1, 3}, {1e30f, 0.0f, -1e30f}, {1}, {2});
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_NEAR(r.loss, 2e30f, 1e24f);
  expect_near(r.grad, {1.0f, 0.0f, -1.0f}, 0.0f);
  EXPECT_NEAR(run_loss("", {1, 3}, {1000.0f, 1001.0f, 1002.0f}, {1}, {0}).loss, 2.40760589f, 1e-5);
}

TEST(SoftmaxWithLoss, LabelOutOfRangeNamesLayerValueAndIndex) {
  for (float bad : {4.0f, -1.0f, 1.5f}) {
    try {
      run_loss("loss_param { ignore_label: 255 }", {3, 4}, kScores, {3}, {0, 1, bad});
      FAIL() << "label " << bad << " accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("layer 'l' (SoftmaxWithLoss)"), std::string::npos) << msg;
      std::ostringstream value;
      value << "label " << bad << " at index 2";
      EXPECT_NE(msg.find(value.str()), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 4)"), std::string::npos) << msg;
    }
  }
}

TEST(SoftmaxWithLoss, LabelCountMismatchIsAShapeError) {
  EXPECT_THROW(run_loss("", {3, 4}, kScores, {2}, {0, 1}), ShapeError);
}

// ------------------------------------------------------------ Accuracy ----

// Five rows of four classes with ties; strictly-greater counts for the label
// are 0, 2, 2, 1, 0, so top-1 gets rows 0 and 4, top-2 also row 3.
const std::vector<float> kAccScores{1, 3, 3, 0,  1, 3, 3, 0,  0.5f, 0.1f, 0.2f, 0.9f,
                                    0.5f, 0.1f, 0.2f, 0.9f,  2, 2, 2, 2};
const std::vector<float> kAccLabels{2, 0, 2, 0, 3};

std::pair<float, std::vector<float>> run_accuracy(const std::string& body, const Shape& shape,
                                                  const std::vector<float>& scores, const Shape& label_shape,
                                                  const std::vector<float>& labels) {
  auto l = make_layer("Accuracy", body, Phase::kTest);
  EXPECT_FALSE(l->can_backward_to(0));
  EXPECT_FALSE(l->can_backward_to(1));
  Blob s, lab, acc, per_class;
  set(s, shape, scores);
  set(lab, label_shape, labels);
  forward(*l, {&s, &lab}, {&acc, &per_class});
  EXPECT_EQ(acc.numel(), 1);
  return {acc.data.data<float>()[0], values(per_class.data)};
}

TEST(Accuracy, TopOneWithTiesAndPerClass) {
  const auto [acc, per_class] = run_accuracy("", {5, 4}, kAccScores, {5}, kAccLabels);
  EXPECT_FLOAT_EQ(acc, 2.0f / 5);
  // class 0: rows 1, 3 both wrong; class 1: no rows; class 2: row 0 right, row 2 wrong; class 3: row 4.
  expect_near(per_class, {0.0f, 0.0f, 0.5f, 1.0f});
}

TEST(Accuracy, TopTwoAndIgnoreLabel) {
  const auto [acc2, per_class2] = run_accuracy("accuracy_param { top_k: 2 }", {5, 4}, kAccScores, {5}, kAccLabels);
  EXPECT_FLOAT_EQ(acc2, 3.0f / 5);
  expect_near(per_class2, {0.5f, 0.0f, 0.5f, 1.0f});
  const auto [acc_ign, per_class_ign] =
      run_accuracy("accuracy_param { ignore_label: 0 }", {5, 4}, kAccScores, {5}, kAccLabels);
  EXPECT_FLOAT_EQ(acc_ign, 2.0f / 3);
  expect_near(per_class_ign, {0.0f, 0.0f, 0.5f, 1.0f});
  const auto [acc4, unused] = run_accuracy("accuracy_param { top_k: 4 }", {5, 4}, kAccScores, {5}, kAccLabels);
  EXPECT_FLOAT_EQ(acc4, 1.0f);
}

TEST(Accuracy, SpatialAxisAndEmptyBatch) {
  // Scores [1, 3, 2]: position 0 argmax class 2, position 1 argmax class 0.
  const auto [acc, per_class] = run_accuracy("", {1, 3, 2}, {0, 5, 1, 1, 2, 1}, {1, 2}, {2, 1});
  EXPECT_FLOAT_EQ(acc, 0.5f);
  expect_near(per_class, {0.0f, 0.0f, 1.0f});
  const auto [empty, unused] = run_accuracy("", {0, 4}, {}, {0}, {});
  EXPECT_EQ(empty, 0.0f);
}

TEST(Accuracy, NonFiniteScoresAreWrong) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Every score NaN: no comparison is true, so before this rule every row counted as right.
  const auto [all_nan, per_class_nan] = run_accuracy("", {2, 3}, std::vector<float>(6, nan), {2}, {0, 2});
  EXPECT_EQ(all_nan, 0.0f);
  expect_near(per_class_nan, {0.0f, 0.0f, 0.0f});
  // Row 0: the label's score is the largest but another is NaN; row 1: the label's score is +inf;
  // row 2: finite and right; row 3: -inf elsewhere in the row, label score right otherwise.
  const auto [acc, unused] = run_accuracy("accuracy_param { top_k: 2 }", {4, 3},
                                          {5, nan, 1, 0, inf, 1, 0, 2, 1, -inf, 3, 1}, {4}, {0, 1, 1, 1});
  EXPECT_FLOAT_EQ(acc, 1.0f / 4);
}

TEST(Accuracy, BadLabelAndTopKErrors) {
  try {
    run_accuracy("", {5, 4}, kAccScores, {5}, {2, 0, 7, 0, 3});
    FAIL() << "label 7 accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'l' (Accuracy)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("label 7 at index 2"), std::string::npos) << msg;
  }
  EXPECT_THROW(run_accuracy("accuracy_param { top_k: 5 }", {5, 4}, kAccScores, {5}, kAccLabels), ShapeError);
  EXPECT_THROW(make_layer("Accuracy", "accuracy_param { top_k: 0 }"), ConfigError);
}

// ------------------------------------------------------------- schemas ----

TEST(ActivationLossSchemas, EveryLayerHasSummaryAndExamples) {
  for (const char* type :
       {"ReLU", "LeakyReLU", "Sigmoid", "TanH", "Dropout", "Softmax", "SoftmaxWithLoss", "Accuracy"}) {
    const LayerSchema s = LayerRegistry::instance().find(type).schema();
    EXPECT_FALSE(s.summary.empty()) << type;
    EXPECT_FALSE(s.examples.empty()) << type;
  }
}

}  // namespace
}  // namespace strata
