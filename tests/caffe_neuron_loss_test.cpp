// Caffe's elementwise and loss layers (Power, AbsVal, BNLL, Exp, Log,
// Threshold, ELU, EuclideanLoss, SigmoidCrossEntropyLoss, ContrastiveLoss,
// HingeLoss, InfogainLoss, MultinomialLogisticLoss): what the generic,
// golden and CPU-vs-CUDA tests do not cover: in place against out of place,
// the errors, and InfogainLoss with H = I against SoftmaxWithLoss.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "framework/caffe/caffe_proto.h"
#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/layer.h"
#include "framework/layer_registry.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test::backward;
using test::expect_error;
using test::expect_near;
using test::forward;
using test::make_layer;
using test::set;
using test::set_diff;
using test::values;

struct InPlaceCase {
  std::string type;
  std::string body;
  std::vector<float> x;
};

// Forward and backward in place give what they give out of place, for every
// configuration whose backward reads the input (a copy is kept) or the output.
TEST(CaffeNeurons, InPlaceMatchesOutOfPlace) {
  const std::vector<float> mixed{-2.5f, -0.7f, -0.1f, 0.3f, 1.2f, 3.0f};
  const std::vector<float> positive{0.2f, 0.5f, 0.9f, 1.3f, 2.0f, 4.0f};
  const std::vector<float> dy{0.5f, -1.0f, 2.0f, 1.5f, -0.3f, 0.8f};
  const std::vector<InPlaceCase> cases{
      {"Power", "power_param { power: 3 scale: -1.5 shift: 0.2 }", mixed},
      {"Power", "power_param { power: 0.5 scale: 2 shift: 0.5 }", positive},
      {"AbsVal", "", mixed},
      {"BNLL", "", mixed},
      {"Exp", "exp_param { base: 2 scale: 0.5 shift: 1 }", mixed},
      {"Log", "log_param { base: 10 scale: 2 shift: 0.5 }", positive},
      {"ELU", "", mixed},
      {"ELU", "elu_param { alpha: -0.5 }", mixed},
  };
  for (const InPlaceCase& c : cases) {
    SCOPED_TRACE(c.type + " {" + c.body + "}");
    const Shape shape{static_cast<int64_t>(c.x.size())};
    auto out_of_place = make_layer(c.type, c.body);
    Blob in, out;
    set(in, shape, c.x);
    forward(*out_of_place, {&in}, {&out});
    set_diff(out, dy);
    backward(*out_of_place, {&out}, {&in});

    auto in_place = make_layer(c.type, c.body);
    Blob b;
    set(b, shape, c.x);
    forward(*in_place, {&b}, {&b});
    expect_near(values(b.data), values(out.data), 0.0f);
    set_diff(b, dy);
    backward(*in_place, {&b}, {&b});
    expect_near(values(b.diff), values(in.diff), 0.0f);
  }
}

TEST(CaffeNeurons, HandValues) {
  auto power = make_layer("Power", "power_param { power: 2 scale: 0.5 shift: 1 }");
  Blob in, out;
  set(in, {3}, {-2.0f, 0.0f, 2.0f});
  forward(*power, {&in}, {&out});
  expect_near(values(out.data), {0.0f, 1.0f, 4.0f});
  set_diff(out, {1.0f, 1.0f, 1.0f});
  backward(*power, {&out}, {&in});
  expect_near(values(in.diff), {0.0f, 1.0f, 2.0f});  // 2 * 0.5 * (1 + 0.5 x)

  // power 0 or scale 0: a constant, and exactly zero gradient (Caffe), even at 0^-1.
  auto constant = make_layer("Power", "power_param { power: 0 }");
  set(in, {2}, {0.0f, 3.0f});
  forward(*constant, {&in}, {&out});
  expect_near(values(out.data), {1.0f, 1.0f});
  set_diff(out, {1.0f, 1.0f});
  backward(*constant, {&out}, {&in});
  expect_near(values(in.diff), {0.0f, 0.0f}, 0.0f);

  auto exp2 = make_layer("Exp", "exp_param { base: 2 shift: 1 }");
  set(in, {2}, {0.0f, 2.0f});
  forward(*exp2, {&in}, {&out});
  expect_near(values(out.data), {2.0f, 8.0f}, 1e-6f);

  auto log10 = make_layer("Log", "log_param { base: 10 }");
  set(in, {2}, {10.0f, 1000.0f});
  forward(*log10, {&in}, {&out});
  expect_near(values(out.data), {1.0f, 3.0f}, 1e-6f);

  auto bnll = make_layer("BNLL");
  set(in, {3}, {-1000.0f, 0.0f, 1000.0f});
  forward(*bnll, {&in}, {&out});
  expect_near(values(out.data), {0.0f, std::log(2.0f), 1000.0f}, 1e-6f);
  set_diff(out, {1.0f, 1.0f, 1.0f});
  backward(*bnll, {&out}, {&in});
  expect_near(values(in.diff), {0.0f, 0.5f, 1.0f}, 1e-6f);
}

TEST(CaffeNeurons, BadBasesAreConfigErrors) {
  expect_error<ConfigError>([] { make_layer("Exp", "exp_param { base: 0 }"); },
                            {"layer 'l' (Exp)", "test.prototxt:1", "exp_param.base 0", "positive, or -1"});
  expect_error<ConfigError>([] { make_layer("Log", "log_param { base: -2 }"); }, {"log_param.base -2", "-1 for e"});
  expect_error<ConfigError>([] { make_layer("Log", "log_param { base: 1 }"); }, {"log_param.base 1", "ln 1 = 0"});
}

TEST(Threshold, StepForwardAndNoGradient) {
  auto l = make_layer("Threshold", "threshold_param { threshold: 0.5 }");
  EXPECT_FALSE(l->can_backward_to(0));
  Blob in, out;
  set(in, {4}, {-1.0f, 0.5f, 0.51f, NAN});
  forward(*l, {&in}, {&out});
  expect_near(values(out.data), {0.0f, 0.0f, 1.0f, 0.0f}, 0.0f);
  set_diff(out, {1.0f, 1.0f, 1.0f, 1.0f});
  l->backward_cpu({&out}, {false}, {&in});  // nothing asked: nothing done
  expect_error<Error>([&] { l->backward_cpu({&out}, {true}, {&in}); },
                      {"layer 'l' (Threshold)", "no gradient", "propagate_down: false"});
}

TEST(CaffeLosses, EuclideanHandValueAndShapeError) {
  auto l = make_layer("EuclideanLoss");
  Blob a, b, loss;
  set(a, {2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
  set(b, {2, 2}, {0.0f, 2.0f, 5.0f, 4.0f});
  forward(*l, {&a, &b}, {&loss});
  expect_near(values(loss.data), {(1.0f + 4.0f) / 4.0f});
  set_diff(loss, {1.0f});
  backward(*l, {&loss}, {&a, &b});
  expect_near(values(a.diff), {0.5f, 0.0f, -1.0f, 0.0f});
  expect_near(values(b.diff), {-0.5f, 0.0f, 1.0f, 0.0f});

  Blob c;
  set(c, {2, 3}, std::vector<float>(6, 0.0f));
  expect_error<ShapeError>([&] { forward(*make_layer("EuclideanLoss"), {&a, &c}, {&loss}); },
                           {"same batch size and count per sample", "[2, 2]", "[2, 3]"});
}

TEST(CaffeLosses, SigmoidCrossEntropyNormalizations) {
  // Caffe's default is BATCH_SIZE; the legacy `normalize: true` means VALID.
  const std::vector<float> x{0.0f, 0.0f, 0.0f, 0.0f}, t{1.0f, 0.0f, -1.0f, 1.0f};
  const float ln2 = std::log(2.0f);
  for (const auto& [body, want] : std::vector<std::pair<std::string, float>>{
           {"", 4 * ln2 / 2},  // the -1 target counts as a target here
           {"loss_param { ignore_label: -1 }", 3 * ln2 / 2},
           {"loss_param { ignore_label: -1 normalize: true }", 3 * ln2 / 3},
           {"loss_param { ignore_label: -1 normalization: FULL }", 3 * ln2 / 4},
           {"loss_param { normalization: NONE }", 4 * ln2}}) {
    SCOPED_TRACE(body);
    auto l = make_layer("SigmoidCrossEntropyLoss", body);
    Blob xs, ts, loss;
    set(xs, {2, 2}, x);
    set(ts, {2, 2}, t);
    forward(*l, {&xs, &ts}, {&loss});
    expect_near(values(loss.data), {want}, 1e-6f);
  }
}

TEST(CaffeLosses, BadLabelsNameLayerValueAndSample) {
  Blob s, lab, loss;
  set(s, {2, 3}, {0.1f, 0.2f, 0.7f, 0.3f, 0.3f, 0.4f});
  set(lab, {2}, {1.0f, 3.0f});
  expect_error<Error>([&] { forward(*make_layer("HingeLoss"), {&s, &lab}, {&loss}); },
                      {"layer 'l' (HingeLoss)", "label 3", "sample 1", "[0, 3)"});
  expect_error<Error>([&] { forward(*make_layer("MultinomialLogisticLoss"), {&s, &lab}, {&loss}); },
                      {"layer 'l' (MultinomialLogisticLoss)", "label 3", "sample 1"});
}

// An InfogainLoss whose spec names `bottoms` bottoms (its constructor
// needs to know whether H comes as a third one).
std::unique_ptr<Layer> make_infogain(const std::string& body, int bottoms = 3) {
  const ConfigNode root = parse_config_text("layer { name: \"l\" type: \"InfogainLoss\" " + body + " }", "net.prototxt");
  LayerSpec spec;
  spec.name = "l";
  spec.type = "InfogainLoss";
  spec.node = root.children().at(0);
  for (int i = 0; i < bottoms; ++i) spec.bottoms.push_back("b" + std::to_string(i));
  spec.tops = {"loss"};
  return LayerRegistry::instance().find("InfogainLoss").create(spec, LayerContext{});
}

TEST(InfogainLoss, HFromASourceBinaryprotoEqualsHAsABottom) {
  const std::vector<float> x{0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.5f};
  const std::vector<float> hv{1.0f, 0.5f, 0.0f, 0.2f, 1.0f, 0.1f, 0.0f, 0.3f, 2.0f};
  const std::string dir = ::testing::TempDir();
  Tensor h(Shape{1, 1, 3, 3});
  std::copy(hv.begin(), hv.end(), h.data<float>());
  caffe::write_binaryproto(dir + "/H.binaryproto", h);

  Blob xa, la, ha, loss_a;
  set(xa, {2, 3}, x);
  set(la, {2}, {2.0f, 0.0f});
  set(ha, {3, 3}, hv);
  auto with_bottom = make_infogain("");
  forward(*with_bottom, {&xa, &la, &ha}, {&loss_a});
  set_diff(loss_a, {1.0f});
  with_bottom->backward_cpu({&loss_a}, {true, false, false}, {&xa, &la, &ha});

  Blob xb, lb, loss_b;
  set(xb, {2, 3}, x);
  set(lb, {2}, {2.0f, 0.0f});
  auto from_file = make_infogain("infogain_loss_param { source: '" + dir + "/H.binaryproto' }", 2);
  forward(*from_file, {&xb, &lb}, {&loss_b});
  set_diff(loss_b, {1.0f});
  from_file->backward_cpu({&loss_b}, {true, false}, {&xb, &lb});
  expect_near(values(loss_b.data), values(loss_a.data), 1e-7f);
  expect_near(values(xb.diff), values(xa.diff), 1e-7f);
}

TEST(InfogainLoss, MissingHIsAnErrorThatSaysWhatToDo) {
  expect_error<IoError>([&] { make_infogain("infogain_loss_param { source: '/nonexistent/H.binaryproto' }", 2); },
                        {"layer 'l' (InfogainLoss)", "net.prototxt:1", "infogain_loss_param.source",
                         "/nonexistent/H.binaryproto"});
  expect_error<ConfigError>([&] { make_infogain("", 2); }, {"infogain matrix H", "source", "third bottom"});
  EXPECT_NE(make_infogain("infogain_loss_param { source: 'H.binaryproto' }", 3), nullptr);  // Caffe: the bottom wins
}

// With H = I the infogain loss is the softmax loss: same loss, same gradient.
TEST(InfogainLoss, IdentityMatrixEqualsSoftmaxWithLoss) {
  const std::vector<float> x{0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.5f, 0.3f, 0.2f};
  const std::vector<float> labels{2.0f, 0.0f};
  const std::vector<float> eye{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  Blob xi, li, h, loss_i;
  set(xi, {2, 4}, x);
  set(li, {2}, labels);
  set(h, {4, 4}, eye);
  auto info = make_infogain("");
  forward(*info, {&xi, &li, &h}, {&loss_i});
  set_diff(loss_i, {1.0f});
  info->backward_cpu({&loss_i}, {true, false, false}, {&xi, &li, &h});

  Blob xs, ls, loss_s;
  set(xs, {2, 4}, x);
  set(ls, {2}, labels);
  auto softmax = make_layer("SoftmaxWithLoss");
  forward(*softmax, {&xs, &ls}, {&loss_s});
  set_diff(loss_s, {1.0f});
  softmax->backward_cpu({&loss_s}, {true, false}, {&xs, &ls});

  expect_near(values(loss_i.data), values(loss_s.data), 1e-6f);
  expect_near(values(xi.diff), values(xs.diff), 1e-6f);
}

TEST(InfogainLoss, MatrixOfTheWrongSizeIsAShapeError) {
  Blob x, lab, h, loss;
  set(x, {2, 3}, std::vector<float>(6, 0.0f));
  set(lab, {2}, {0.0f, 1.0f});
  set(h, {2, 2}, {1, 0, 0, 1});
  expect_error<ShapeError>([&] { forward(*make_infogain(""), {&x, &lab, &h}, {&loss}); },
                           {"C x C = 9", "3 classes", "[2, 2]"});
}

}  // namespace
}  // namespace strata
