// Hand-checked values and error messages for the layers that move values
// around without learning anything: Input, Flatten, Reshape, Concat, Eltwise
// and Split. Run on the layers directly (no Net).

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
using test::set_diff;
using test::values;
using test::expect_near;
using test::forward;
using test::backward;
using test::expect_error;

std::vector<float> iota(int n, float start = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i);
  return v;
}

// Shape of top[0] after setup + reshape of a one-bottom layer.
Shape top_shape(const std::string& type, const std::string& body, const Shape& in) {
  auto l = make_layer(type, body);
  Blob x(in), y;
  l->setup({&x}, {&y});
  l->reshape({&x}, {&y});
  return y.shape();
}

// --------------------------------------------------------------- Input ----

TEST(InputLayer, TopsTakeTheGivenShapesAndForwardKeepsValues) {
  auto l = make_layer("Input", "input_param { shape { dim: 2 dim: 3 } shape { dim: 4 } }");
  EXPECT_EQ(l->min_bottoms(), 0);
  EXPECT_EQ(l->max_bottoms(), 0);
  EXPECT_EQ(l->max_tops(), -1);
  Blob a, b;
  l->setup({}, {&a, &b});
  l->reshape({}, {&a, &b});
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.shape(), (Shape{4}));
  set(b, {4}, {1, 2, 3, 4});
  l->forward_cpu({}, {&a, &b});
  expect_near(values(b.data), {1, 2, 3, 4}, 0.0f);
  // The user may resize an input (another batch size); reshape keeps it.
  a.resize({5, 3});
  l->reshape({}, {&a, &b});
  EXPECT_EQ(a.shape(), (Shape{5, 3}));
  EXPECT_TRUE(l->params().empty());
}

TEST(InputLayer, OneShapeServesEveryTopAndZeroBatchIsAllowed) {
  auto l = make_layer("Input", "input_param { shape { dim: 0 dim: 3 dim: 2 dim: 2 } }");
  Blob a, b;
  l->setup({}, {&a, &b});
  EXPECT_EQ(a.shape(), (Shape{0, 3, 2, 2}));
  EXPECT_EQ(b.shape(), (Shape{0, 3, 2, 2}));
  l->forward_cpu({}, {&a, &b});
}

TEST(InputLayer, ConfigErrors) {
  expect_error<ConfigError>([] { make_layer("Input"); }, {"input_param { shape", "layer 'l'"});
  expect_error<ConfigError>([] { make_layer("Input", "input_param { shape { dim: 2 dim: -1 } }"); },
                            {"dim must be >= 0", "-1", "test.prototxt:1"});
  expect_error<ConfigError>([] { make_layer("Input", "input_param { shape { dims: 2 } }"); },
                            {"unknown key 'dims'", "did you mean 'dim'"});
  expect_error<ConfigError>(
      [] {
        auto l = make_layer("Input", "input_param { shape { dim: 1 } shape { dim: 2 } }");
        Blob a, b, c;
        l->setup({}, {&a, &b, &c});
      },
      {"2 shapes for 3 tops", "one shape per top"});
}

// ------------------------------------------------------------- Flatten ----

TEST(FlattenLayer, ShapesFollowAxisAndEndAxis) {
  EXPECT_EQ(top_shape("Flatten", "", {2, 3, 4, 5}), (Shape{2, 60}));
  EXPECT_EQ(top_shape("Flatten", "flatten_param { axis: 2 }", {2, 3, 4, 5}), (Shape{2, 3, 20}));
  EXPECT_EQ(top_shape("Flatten", "flatten_param { axis: 1 end_axis: 2 }", {2, 3, 4, 5}), (Shape{2, 12, 5}));
  EXPECT_EQ(top_shape("Flatten", "flatten_param { axis: 0 end_axis: -2 }", {2, 3, 4, 5}), (Shape{24, 5}));
  EXPECT_EQ(top_shape("Flatten", "flatten_param { axis: -1 }", {2, 3, 4}), (Shape{2, 3, 4}));
  EXPECT_EQ(top_shape("Flatten", "", {0, 3, 4}), (Shape{0, 12}));
}

TEST(FlattenLayer, CopiesValuesAndGradients) {
  auto l = make_layer("Flatten");
  Blob x, y;
  set(x, {2, 2, 2}, iota(8));
  forward(*l, {&x}, {&y});
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  expect_near(values(y.data), iota(8), 0.0f);
  set_diff(y, iota(8, 10.0f));
  backward(*l, {&y}, {&x});
  expect_near(values(x.diff), iota(8, 10.0f), 0.0f);
  EXPECT_FALSE(x.data.shares_storage_with(y.data));
}

TEST(FlattenLayer, AxesOutOfRangeNameTheBottom) {
  expect_error<ShapeError>([] { top_shape("Flatten", "flatten_param { axis: 3 }", {2, 3, 4}); },
                           {"layer 'l' (Flatten)", "axis 3", "[2, 3, 4]"});
  expect_error<ShapeError>([] { top_shape("Flatten", "flatten_param { axis: 2 end_axis: 1 }", {2, 3, 4}); },
                           {"end_axis 1", "[2, 3, 4]"});
}

// ------------------------------------------------------------- Reshape ----

TEST(ReshapeLayer, CopiedAndInferredDims) {
  const std::string copy_infer = "reshape_param { shape { dim: 0 dim: -1 } }";
  EXPECT_EQ(top_shape("Reshape", copy_infer, {2, 3, 4}), (Shape{2, 12}));
  EXPECT_EQ(top_shape("Reshape", "reshape_param { shape { dim: -1 dim: 4 } }", {2, 3, 4}), (Shape{6, 4}));
  EXPECT_EQ(top_shape("Reshape", "reshape_param { shape { dim: 0 dim: 0 dim: 2 dim: 2 } }", {2, 3, 4}),
            (Shape{2, 3, 2, 2}));
  // Caffe's axis / num_axes: replace only part of the shape.
  EXPECT_EQ(top_shape("Reshape", "reshape_param { axis: 1 num_axes: 1 shape { dim: 3 dim: 1 } }", {2, 3, 4}),
            (Shape{2, 3, 1, 4}));
  EXPECT_EQ(top_shape("Reshape", "reshape_param { axis: -1 num_axes: 0 shape { dim: 1 } }", {2, 3, 4}),
            (Shape{2, 3, 4, 1}));
  EXPECT_EQ(top_shape("Reshape", "reshape_param { axis: 1 shape { dim: -1 } }", {2, 3, 4}), (Shape{2, 12}));
  // A zero-size batch: copied dims cancel, so -1 is still well defined.
  EXPECT_EQ(top_shape("Reshape", copy_infer, {0, 3, 4}), (Shape{0, 12}));
  EXPECT_EQ(top_shape("Reshape", "reshape_param { shape { dim: 0 dim: 2 dim: -1 } }", {0, 3, 4}),
            (Shape{0, 2, 6}));
}

TEST(ReshapeLayer, CopiesValuesAndGradients) {
  auto l = make_layer("Reshape", "reshape_param { shape { dim: 3 dim: -1 } }");
  Blob x, y;
  set(x, {2, 3}, iota(6));
  forward(*l, {&x}, {&y});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  expect_near(values(y.data), iota(6), 0.0f);
  set_diff(y, iota(6, -3.0f));
  backward(*l, {&y}, {&x});
  expect_near(values(x.diff), iota(6, -3.0f), 0.0f);
}

TEST(ReshapeLayer, Errors) {
  expect_error<ConfigError>([] { make_layer("Reshape", "reshape_param { shape { dim: -1 dim: -1 } }"); },
                            {"[-1, -1]", "at most one dim can be inferred", "test.prototxt:1"});
  expect_error<ConfigError>([] { make_layer("Reshape", "reshape_param { shape { dim: 2 dim: -3 } }"); },
                            {"dim -3", "0 to copy"});
  expect_error<ConfigError>([] { make_layer("Reshape", "reshape_param { axis: 1 }"); }, {"needs reshape_param"});
  // Not divisible: both shapes named.
  expect_error<ShapeError>(
      [] { top_shape("Reshape", "reshape_param { shape { dim: 0 dim: 5 dim: -1 } }", {2, 3, 4}); },
      {"layer 'l' (Reshape)", "[0, 5, -1]", "[2, 3, 4]", "not divisible"});
  // Wrong count without -1.
  expect_error<ShapeError>([] { top_shape("Reshape", "reshape_param { shape { dim: 5 dim: 5 } }", {2, 3, 4}); },
                           {"[5, 5]", "[2, 3, 4]", "24 elements", "25 elements"});
  expect_error<ShapeError>(
      [] { top_shape("Reshape", "reshape_param { shape { dim: 0 dim: 0 dim: 0 dim: -1 } }", {2, 3}); },
      {"copies (dim: 0) bottom axis 2", "[2, 3]"});
  expect_error<ShapeError>([] { top_shape("Reshape", "reshape_param { axis: 4 shape { dim: 1 } }", {2, 3}); },
                           {"axis 4", "[2, 3]"});
}

// -------------------------------------------------------------- Concat ----

TEST(ConcatLayer, ChannelAxisInterleavesPerSample) {
  auto l = make_layer("Concat");
  EXPECT_EQ(l->max_bottoms(), -1);
  Blob a, b, y;
  set(a, {2, 1, 2}, {1, 2, 3, 4});
  set(b, {2, 2, 2}, {10, 11, 12, 13, 14, 15, 16, 17});
  forward(*l, {&a, &b}, {&y});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  expect_near(values(y.data), {1, 2, 10, 11, 12, 13, 3, 4, 14, 15, 16, 17}, 0.0f);
  set_diff(y, iota(12, 100.0f));
  backward(*l, {&y}, {&a, &b});
  expect_near(values(a.diff), {100, 101, 106, 107}, 0.0f);
  expect_near(values(b.diff), {102, 103, 104, 105, 108, 109, 110, 111}, 0.0f);
}

TEST(ConcatLayer, BatchAxisLegacyConcatDimAndSkippedGradients) {
  auto l = make_layer("Concat", "concat_param { concat_dim: 0 }");
  Blob a, b, c, y;
  set(a, {1, 2}, {1, 2});
  set(b, {2, 2}, {3, 4, 5, 6});
  set(c, {0, 2}, {});
  forward(*l, {&a, &b, &c}, {&y});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  expect_near(values(y.data), {1, 2, 3, 4, 5, 6}, 0.0f);
  set_diff(y, {-1, -2, -3, -4, -5, -6});
  b.diff.fill(7.0f);
  l->backward_cpu({&y}, {true, false, true}, {&a, &b, &c});
  expect_near(values(a.diff), {-1, -2}, 0.0f);
  expect_near(values(b.diff), {7, 7, 7, 7}, 0.0f);  // propagate_down false: untouched
}

TEST(ConcatLayer, NegativeAxisAndSingleBottom) {
  auto l = make_layer("Concat", "concat_param { axis: -1 }");
  Blob a, b, y;
  set(a, {2, 1}, {1, 2});
  set(b, {2, 2}, {3, 4, 5, 6});
  forward(*l, {&a, &b}, {&y});
  expect_near(values(y.data), {1, 3, 4, 2, 5, 6}, 0.0f);

  auto one = make_layer("Concat");
  Blob z;
  forward(*one, {&b}, {&z});
  expect_near(values(z.data), {3, 4, 5, 6}, 0.0f);
}

TEST(ConcatLayer, Errors) {
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("Concat");
        Blob a({2, 1, 2}), b({3, 2, 2}), y;
        l->setup({&a, &b}, {&y});
        l->reshape({&a, &b}, {&y});
      },
      {"layer 'l' (Concat)", "concat axis 1", "bottom 0 [2, 1, 2]", "bottom 1 [3, 2, 2]"});
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("Concat", "concat_param { axis: 0 }");
        Blob a({2, 3}), b({2, 3, 1}), y;
        l->reshape({&a, &b}, {&y});
      },
      {"[2, 3]", "[2, 3, 1]"});
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("Concat", "concat_param { axis: 2 }");
        Blob a({2, 3}), y;
        l->reshape({&a}, {&y});
      },
      {"concat axis 2 is out of range", "[2, 3]"});
  expect_error<ConfigError>([] { make_layer("Concat", "concat_param { axis: 1 concat_dim: 1 }"); },
                            {"not both"});
}

// ------------------------------------------------------------- Eltwise ----

TEST(EltwiseLayer, SumWithCoefficients) {
  auto l = make_layer("Eltwise", "eltwise_param { operation: SUM coeff: 1 coeff: -2 coeff: 0.5 }");
  Blob a, b, c, y;
  set(a, {2, 2}, {1, 2, 3, 4});
  set(b, {2, 2}, {1, 1, 2, 2});
  set(c, {2, 2}, {4, 0, -2, 8});
  forward(*l, {&a, &b, &c}, {&y});
  expect_near(values(y.data), {1 - 2 + 2, 2 - 2 + 0, 3 - 4 - 1, 4 - 4 + 4});
  set_diff(y, {1, 2, 3, 4});
  backward(*l, {&y}, {&a, &b, &c});
  expect_near(values(a.diff), {1, 2, 3, 4});
  expect_near(values(b.diff), {-2, -4, -6, -8});
  expect_near(values(c.diff), {0.5f, 1, 1.5f, 2});
}

TEST(EltwiseLayer, DefaultIsPlainSum) {
  auto l = make_layer("Eltwise");
  Blob a, b, y;
  set(a, {3}, {1, 2, 3});
  set(b, {3}, {10, 20, 30});
  forward(*l, {&a, &b}, {&y});
  expect_near(values(y.data), {11, 22, 33});
}

TEST(EltwiseLayer, ProdGradientsStableAndDividing) {
  for (const std::string stable : {"true", "false"}) {
    SCOPED_TRACE("stable_prod_grad: " + stable);
    auto l = make_layer("Eltwise", "eltwise_param { operation: PROD stable_prod_grad: " + stable + " }");
    Blob a, b, c, y;
    set(a, {3}, {1, 2, -3});
    set(b, {3}, {4, 0.5f, 2});
    set(c, {3}, {2, 3, 0.25f});
    forward(*l, {&a, &b, &c}, {&y});
    expect_near(values(y.data), {8, 3, -1.5f});
    set_diff(y, {1, 2, -1});
    backward(*l, {&y}, {&a, &b, &c});
    expect_near(values(a.diff), {8, 3, -0.5f});   // dy * b * c
    expect_near(values(b.diff), {2, 12, 0.75f});  // dy * a * c
    expect_near(values(c.diff), {4, 2, 6});       // dy * a * b
  }
}

TEST(EltwiseLayer, StableProdGradientIsExactAtZero) {
  auto l = make_layer("Eltwise", "eltwise_param { operation: PROD }");
  Blob a, b, y;
  set(a, {2}, {0, 3});
  set(b, {2}, {5, 0});
  forward(*l, {&a, &b}, {&y});
  set_diff(y, {2, 2});
  backward(*l, {&y}, {&a, &b});
  expect_near(values(a.diff), {10, 0}, 0.0f);
  expect_near(values(b.diff), {0, 6}, 0.0f);
}

TEST(EltwiseLayer, MaxRoutesGradientToTheWinnerAndTiesToTheFirst) {
  auto l = make_layer("Eltwise", "eltwise_param { operation: MAX }");
  Blob a, b, c, y;
  set(a, {4}, {1, 5, -1, 2});
  set(b, {4}, {3, 5, -2, 2});
  set(c, {4}, {2, 0, -3, 7});
  forward(*l, {&a, &b, &c}, {&y});
  expect_near(values(y.data), {3, 5, -1, 7}, 0.0f);
  set_diff(y, {10, 20, 30, 40});
  backward(*l, {&y}, {&a, &b, &c});
  expect_near(values(a.diff), {0, 20, 30, 0}, 0.0f);
  expect_near(values(b.diff), {10, 0, 0, 0}, 0.0f);
  expect_near(values(c.diff), {0, 0, 0, 40}, 0.0f);
}

TEST(EltwiseLayer, Errors) {
  expect_error<ShapeError>(
      [] {
        auto l = make_layer("Eltwise");
        Blob a({2, 3}), b({2, 4}), y;
        l->setup({&a, &b}, {&y});
        l->reshape({&a, &b}, {&y});
      },
      {"layer 'l' (Eltwise)", "same shape", "bottom 0 [2, 3]", "bottom 1 [2, 4]"});
  expect_error<ConfigError>(
      [] {
        auto l = make_layer("Eltwise", "eltwise_param { coeff: 1 coeff: 2 coeff: 3 }");
        Blob a({2}), b({2}), y;
        l->setup({&a, &b}, {&y});
      },
      {"3 coeff values for 2 bottoms"});
  expect_error<ConfigError>([] { make_layer("Eltwise", "eltwise_param { operation: MAX coeff: 1 coeff: 1 }"); },
                            {"coeff applies only to operation SUM"});
  expect_error<ConfigError>([] { make_layer("Eltwise", "eltwise_param { operation: MIN }"); }, {"MIN"});
  EXPECT_EQ(make_layer("Eltwise")->min_bottoms(), 2);
}

// --------------------------------------------------------------- Split ----

TEST(SplitLayer, CopiesForwardAndSumsGradients) {
  auto l = make_layer("Split");
  EXPECT_EQ(l->max_tops(), -1);
  Blob x, t0, t1, t2;
  set(x, {2, 2}, {1, 2, 3, 4});
  forward(*l, {&x}, {&t0, &t1, &t2});
  for (Blob* t : {&t0, &t1, &t2}) {
    EXPECT_EQ(t->shape(), (Shape{2, 2}));
    expect_near(values(t->data), {1, 2, 3, 4}, 0.0f);
  }
  set_diff(t0, {1, 1, 1, 1});
  set_diff(t1, {10, 20, 30, 40});
  set_diff(t2, {-1, 0, 1, 2});
  backward(*l, {&t0, &t1, &t2}, {&x});
  expect_near(values(x.diff), {10, 21, 32, 43}, 0.0f);

  x.diff.fill(5.0f);
  l->backward_cpu({&t0, &t1, &t2}, {false}, {&x});
  expect_near(values(x.diff), {5, 5, 5, 5}, 0.0f);
}

TEST(SplitLayer, ZeroBatchAndNoInPlace) {
  auto l = make_layer("Split");
  Blob x({0, 3}), t0, t1;
  forward(*l, {&x}, {&t0, &t1});
  EXPECT_EQ(t1.shape(), (Shape{0, 3}));
  backward(*l, {&t0, &t1}, {&x});

  auto l2 = make_layer("Split");
  Blob b({2}), t;
  expect_error<ConfigError>([&] { l2->setup({&b}, {&t, &b}); }, {"top 1 is the bottom itself"});
}

// ------------------------------------------------- through the Net ----

std::unique_ptr<Net> make_net(const std::string& text) {
  return std::make_unique<Net>(parse_config_text(text, "net.prototxt"), NetOptions{});
}

// x feeds two layers, so the Net inserts a Split; its backward must add both
// paths: y = flatten(x) * reshape(x) = x^2, dy/dx = 2x.
TEST(SplitLayer, InsertedByTheNetSumsBothPaths) {
  auto net = make_net(R"(
    force_backward: true
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "f" type: "Flatten" bottom: "x" top: "a" }
    layer { name: "r" type: "Reshape" bottom: "x" top: "b" reshape_param { shape { dim: 0 dim: -1 } } }
    layer { name: "e" type: "Eltwise" bottom: "a" bottom: "b" top: "y" eltwise_param { operation: PROD } }
  )");
  bool has_split = false;
  for (int i = 0; i < net->num_layers(); ++i) has_split = has_split || net->layer(i).type() == "Split";
  EXPECT_TRUE(has_split);
  EXPECT_EQ(net->input_names(), (std::vector<std::string>{"x"}));
  set(net->blob("x"), {2, 3}, {1, -2, 3, 0.5f, 0, -1});
  net->forward();
  expect_near(values(net->blob("y").data), {1, 4, 9, 0.25f, 0, 1});
  net->blob("y").diff.fill(1.0f);
  net->backward();
  expect_near(values(net->blob("x").diff), {2, -4, 6, 1, 0, -2});
}

TEST(SplitLayer, WrittenByTheUser) {
  auto net = make_net(R"(
    force_backward: true
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 4 } } }
    layer { name: "s" type: "Split" bottom: "x" top: "x1" top: "x2" }
    layer { name: "c" type: "Concat" bottom: "x1" bottom: "x2" top: "y" concat_param { axis: 0 } }
  )");
  set(net->blob("x"), {4}, {1, 2, 3, 4});
  net->forward();
  expect_near(values(net->blob("y").data), {1, 2, 3, 4, 1, 2, 3, 4}, 0.0f);
  set_diff(net->blob("y"), iota(8, 1.0f));
  net->backward();
  expect_near(values(net->blob("x").diff), {1 + 5, 2 + 6, 3 + 7, 4 + 8}, 0.0f);
}

TEST(InputLayer, NetKeepsAUserResizedInput) {
  auto net = make_net(R"(
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 dim: 2 } } }
    layer { name: "f" type: "Flatten" bottom: "x" top: "y" }
  )");
  set(net->blob("x"), {3, 2, 2}, iota(12));
  net->forward();
  EXPECT_EQ(net->blob("y").shape(), (Shape{3, 4}));
  expect_near(values(net->blob("y").data), iota(12), 0.0f);
}

}  // namespace
}  // namespace strata
