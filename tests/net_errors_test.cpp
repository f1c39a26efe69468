// The errors a user meets while writing a net (unknown types and keys,
// missing bottoms, duplicate tops, in-place misuse, shape mismatches, legacy
// formats) and compatibility with Caffe's own prototxt files.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/net.h"
#include "framework/tensor.h"
#include "tests/caffe_lenet.h"
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

// ------------------------------------------------------ config errors ----

TEST(NetErrors, UnknownLayerTypeListsKnownTypesAndSuggestsNearest) {
  const std::string msg = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "fc" type: "InnerProdcut" bottom: "x" top: "y" }
)");
  EXPECT_CONTAINS(msg, "unknown layer type 'InnerProdcut'");
  EXPECT_CONTAINS(msg, "did you mean 'InnerProduct'?");
  EXPECT_CONTAINS(msg, "known types: ");
  for (const char* t : {"Convolution", "Pooling", "ReLU", "SoftmaxWithLoss", "Input", "Split"}) EXPECT_CONTAINS(msg, t);
  EXPECT_CONTAINS(msg, "layer 'fc'");
  EXPECT_CONTAINS(msg, "net.prototxt:3:");

  // Nothing plausible: no suggestion, but still the list.
  const std::string far = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } }
layer { name: "q" type: "Zzzzzzzzzzzz" bottom: "x" top: "y" }
)");
  EXPECT_CONTAINS(far, "unknown layer type 'Zzzzzzzzzzzz'");
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_CONTAINS(far, "known types: ");
}

// NaN passes every range check written as `v < 0`, so a NaN multiplier
// would train silently to a NaN net: every float key refuses inf and nan.
TEST(NetErrors, NonFiniteNumbersAreRefusedWithTheKey) {
  for (const char* bad : {"lr_mult: nan", "decay_mult: inf", "lr_mult: -inf"}) {
    const std::string msg = build_error(std::string(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 2 }
        param { )") + bad + R"( } }
)");
    EXPECT_CONTAINS(msg, "expected a finite number");
    EXPECT_CONTAINS(msg, std::string(bad).substr(0, std::string(bad).find(':')));
    EXPECT_CONTAINS(msg, "net.prototxt:4:");
  }
  const std::string filler = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: nan } } }
)");
  EXPECT_CONTAINS(filler, "expected a finite number");
  EXPECT_CONTAINS(filler, "std");
}

TEST(NetErrors, UnknownKeyInLayerNamesKeyLocationAndLayer) {
  const std::string msg = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer {
  name: "fc"
  type: "InnerProduct"
  bottom: "x"
  tops: "y"
  inner_product_param { num_output: 2 }
}
)");
  EXPECT_CONTAINS(msg, "unknown key 'tops'");
  EXPECT_CONTAINS(msg, "layer 'fc'");
  EXPECT_CONTAINS(msg, "net.prototxt:7:3");
  EXPECT_CONTAINS(msg, "did you mean 'top'?");
}

TEST(NetErrors, UnknownKeyInParamBlocks) {
  const std::string in_param = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer {
  name: "fc" type: "InnerProduct" bottom: "x" top: "y"
  param { lr_mul: 2 }
  inner_product_param { num_output: 2 }
}
)");
  EXPECT_CONTAINS(in_param, "unknown key 'lr_mul'");
  EXPECT_CONTAINS(in_param, "param of layer 'fc'");
  EXPECT_CONTAINS(in_param, "net.prototxt:5:11");
  EXPECT_CONTAINS(in_param, "did you mean 'lr_mult'?");

  const std::string in_layer_param = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer {
  name: "fc" type: "InnerProduct" bottom: "x" top: "y"
  inner_product_param {
    num_ouput: 2
  }
}
)");
  EXPECT_CONTAINS(in_layer_param, "unknown key 'num_ouput'");
  EXPECT_CONTAINS(in_layer_param, "inner_product_param of layer 'fc'");
  EXPECT_CONTAINS(in_layer_param, "net.prototxt:6:5");
  EXPECT_CONTAINS(in_layer_param, "did you mean 'num_output'?");

  // A layer's own block given to the wrong type is an unknown key too.
  const std::string wrong_block = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "y" pooling_param { pool: MAX } }
)");
  EXPECT_CONTAINS(wrong_block, "unknown key 'pooling_param'");
  EXPECT_CONTAINS(wrong_block, "layer 'r'");
  EXPECT_CONTAINS(wrong_block, "net.prototxt:3:");

  const std::string top_level = build_error(R"(
name: "n"
forcebackward: true
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } }
)");
  EXPECT_CONTAINS(top_level, "unknown key 'forcebackward'");
  EXPECT_CONTAINS(top_level, "net.prototxt:3:1");
  EXPECT_CONTAINS(top_level, "force_backward");
}

TEST(NetErrors, MissingBottomNamesLayerAndListsBlobs) {
  const std::string msg = build_error(R"(
layer { name: "in" type: "Input" top: "x" top: "label" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "h" }
layer { name: "fc" type: "InnerProduct" bottom: "hh" top: "y" inner_product_param { num_output: 2 } }
)");
  EXPECT_CONTAINS(msg, "layer 'fc' (InnerProduct)");
  EXPECT_CONTAINS(msg, "net.prototxt:4:");
  EXPECT_CONTAINS(msg, "bottom 'hh'");
  EXPECT_CONTAINS(msg, "blobs so far: x, label, h");

  // A bottom produced only in the other phase is missing in this one.
  const std::string phase = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "h" include { phase: TEST } }
layer { name: "s" type: "Sigmoid" bottom: "h" top: "y" }
)");
  EXPECT_CONTAINS(phase, "layer 's'");
  EXPECT_CONTAINS(phase, "bottom 'h'");
  EXPECT_CONTAINS(phase, "phase TRAIN");
}

TEST(NetErrors, DuplicateTopNames) {
  const std::string two_layers = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "a" type: "ReLU" bottom: "x" top: "y" }
layer { name: "b" type: "Sigmoid" bottom: "x" top: "y" }
)");
  EXPECT_CONTAINS(two_layers, "layer 'b' (Sigmoid)");
  EXPECT_CONTAINS(two_layers, "top 'y' is already produced by layer 'a'");

  // The same name twice among one layer's tops (this used to read past the
  // end of the layer list and crash).
  const std::string one_layer = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "s" type: "Split" bottom: "x" top: "y" top: "y" }
)");
  EXPECT_CONTAINS(one_layer, "layer 's' (Split)");
  EXPECT_CONTAINS(one_layer, "top 'y'");
}

// Caffe builds a net with two layers of one name (its examples/mnist/
// mnist_autoencoder.prototxt has two 'loss' layers in the same phase);
// strata keys parameters and snapshots by layer name, so the later one is
// renamed with a suffix and a note says so.
TEST(NetCaffeCompat, DuplicateLayerNamesGetASuffix) {
  const auto net = make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 2 } }
layer { name: "a" type: "InnerProduct" bottom: "y" top: "z" inner_product_param { num_output: 2 } }
layer { name: "a_2" type: "ReLU" bottom: "z" top: "w" }
)");
  EXPECT_EQ(layer_names(*net), (std::vector<std::string>{"in", "a", "a_3", "a_2"}));
  EXPECT_NO_THROW(param_blob(*net, "a_3.weight"));
}

TEST(NetErrors, InPlaceOnlyWhereSupported) {
  const std::string msg = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "fc" type: "InnerProduct" bottom: "x" top: "x" inner_product_param { num_output: 3 } }
)");
  EXPECT_CONTAINS(msg, "layer 'fc' (InnerProduct)");
  EXPECT_CONTAINS(msg, "top 'x' is also a bottom");
  EXPECT_CONTAINS(msg, "cannot run in place");

  // ReLU can: the top is the bottom blob itself.
  auto net = make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 4 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "x" }
)");
  EXPECT_EQ(net->tops(1).at(0), net->bottoms(1).at(0));
  set_values(net->blob("x").data, {-1, 2, -3, 4});
  net->forward();
  EXPECT_EQ(values(net->blob("x").data), (std::vector<float>{0, 2, 0, 4}));

  // In place on a blob that several layers read cannot work with the Split.
  const std::string split = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 4 } } }
layer { name: "s" type: "Sigmoid" bottom: "x" top: "y" }
layer { name: "r" type: "ReLU" bottom: "x" top: "x" }
layer { name: "t" type: "TanH" bottom: "x" top: "z" }
)");
  EXPECT_CONTAINS(split, "read by several layers and modified in place by layer 'r'");
}

TEST(NetErrors, LossWeightOnNonScalarTop) {
  const std::string msg = build_error(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "y" loss_weight: 1 }
)");
  EXPECT_CONTAINS(msg, "layer 'r'");
  EXPECT_CONTAINS(msg, "loss_weight");
  EXPECT_CONTAINS(msg, "[2, 3]");
}

// ------------------------------------------------------ shape errors ----

TEST(NetShapes, MismatchNamesConsumerAndProducersWithShapes) {
  const std::string concat = error_of<ShapeError>([] {
    make_net(R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 3 } shape { dim: 3 dim: 5 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "a" inner_product_param { num_output: 4 } }
layer { name: "cat" type: "Concat" bottom: "a" bottom: "y" top: "c" }
)");
  });
  EXPECT_CONTAINS(concat, "layer 'cat' (Concat)");
  EXPECT_CONTAINS(concat, "net.prototxt:4:");
  EXPECT_CONTAINS(concat, "bottom 'a' [2, 4] comes from layer 'ip' (InnerProduct)");
  EXPECT_CONTAINS(concat, "bottom 'y' [3, 5] comes from layer 'in' (Input)");

  const std::string eltwise = error_of<ShapeError>([] {
    make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "p" type: "InnerProduct" bottom: "x" top: "a" inner_product_param { num_output: 3 } }
layer { name: "q" type: "InnerProduct" bottom: "x" top: "b" inner_product_param { num_output: 4 } }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "c" }
)");
  });
  EXPECT_CONTAINS(eltwise, "layer 'sum' (Eltwise)");
  EXPECT_CONTAINS(eltwise, "[2, 3]");
  EXPECT_CONTAINS(eltwise, "[2, 4]");
  EXPECT_CONTAINS(eltwise, "comes from layer 'p' (InnerProduct)");
  EXPECT_CONTAINS(eltwise, "comes from layer 'q' (InnerProduct)");
}

// When the producer's top also feeds another layer, the consumer reads a
// Split output; the message still names the blob and layer of the config.
TEST(NetShapes, MismatchLooksThroughAutomaticSplits) {
  const std::string msg = error_of<ShapeError>([] {
    make_net(R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 5 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "a" inner_product_param { num_output: 4 } }
layer { name: "r" type: "ReLU" bottom: "a" top: "r" }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "y" top: "c" }
)");
  });
  EXPECT_CONTAINS(msg, "layer 'sum' (Eltwise)");
  EXPECT_CONTAINS(msg, "bottom 'a' [2, 4] comes from layer 'ip' (InnerProduct)");
  EXPECT_CONTAINS(msg, "bottom 'y' [2, 5] comes from layer 'in' (Input)");
}

// ----------------------------------------------------------- legacy ----

TEST(NetLegacy, InputDeclarationsBecomeAnInputLayer) {
  auto net = make_net(R"(
name: "deploy"
input: "data"
input_shape { dim: 1 dim: 3 dim: 4 dim: 4 }
input: "aux"
input_shape { dim: 1 dim: 2 }
layer { name: "f" type: "Flatten" bottom: "data" top: "flat" }
)");
  ASSERT_EQ(net->num_layers(), 2);
  EXPECT_EQ(net->layer(0).type(), "Input");
  EXPECT_EQ(net->input_names(), (std::vector<std::string>{"data", "aux"}));
  EXPECT_EQ(net->blob("data").shape(), (Shape{1, 3, 4, 4}));
  EXPECT_EQ(net->blob("aux").shape(), (Shape{1, 2}));
  net->forward();
  EXPECT_EQ(net->blob("flat").shape(), (Shape{1, 48}));

  auto dims = make_net(R"(
input: "data"
input_dim: 2 input_dim: 1 input_dim: 5 input_dim: 5
layer { name: "f" type: "Flatten" bottom: "data" top: "flat" }
)");
  EXPECT_EQ(dims->layer(0).type(), "Input");
  EXPECT_EQ(dims->blob("data").shape(), (Shape{2, 1, 5, 5}));

  const std::string missing = build_error(R"(
input: "data"
layer { name: "f" type: "Flatten" bottom: "data" top: "flat" }
)");
  EXPECT_CONTAINS(missing, "net input 'data'");
  EXPECT_CONTAINS(missing, "input_shape");
}

// V1 files are upgraded on load (framework/caffe/net_upgrade.h); what cannot be
// upgraded is named, all of it at once.
TEST(NetLegacy, V1FilesThatCannotBeUpgradedSayWhy) {
  const std::string mixed = build_error(R"(
name: "old"
layers { name: "relu" type: RELU bottom: "x" top: "x" }
layer { name: "r2" type: "ReLU" bottom: "x" top: "x" }
)");
  EXPECT_CONTAINS(mixed, "both `layer { }`");
  EXPECT_CONTAINS(mixed, "net.prototxt:3:1");

  const std::string bad = build_error(R"(
name: "old"
layers { name: "a" type: CONVOLUSION bottom: "data" top: "a" }
layers { name: "b" type: RELU bottom: "a" top: "a" blobs_lrr: 1 }
layers { layer { name: "c" type: "conv" } }
)");
  EXPECT_CONTAINS(bad, "3 problems");
  EXPECT_CONTAINS(bad, "type CONVOLUSION is not a V1 layer type");
  EXPECT_CONTAINS(bad, "unknown V1 key 'blobs_lrr'");
  EXPECT_CONTAINS(bad, "V0 format");
}

// ----------------------------------------------- Caffe LeNet excerpt ----

// examples/mnist/lenet_train_test.prototxt with an Input layer in place of
// the LMDB Data layers (batch 4 instead of 64/100).
const std::string kLeNet = test::caffe_lenet_with_input(4);

void fill_lenet_inputs(Net& net) {
  float* x = net.blob("data").data.data<float>();
  for (int64_t i = 0; i < net.blob("data").numel(); ++i) {
    x[i] = 0.5f + 0.5f * std::sin(0.37f * static_cast<float>(i) + 0.1f * static_cast<float>(i % 28));
  }
  set_values(net.blob("label").data, {3, 7, 0, 9});
}

TEST(NetLeNet, CaffeTrainValBuildsAndTrains) {
  auto net = make_net(kLeNet, Phase::kTrain);
  EXPECT_EQ(layer_names(*net), (std::vector<std::string>{"mnist", "conv1", "pool1", "conv2", "pool2", "ip1",
                                                          "relu1", "ip2", "loss"}));
  EXPECT_EQ(net->blob("conv1").shape(), (Shape{4, 20, 24, 24}));
  EXPECT_EQ(net->blob("pool1").shape(), (Shape{4, 20, 12, 12}));
  EXPECT_EQ(net->blob("conv2").shape(), (Shape{4, 50, 8, 8}));
  EXPECT_EQ(net->blob("pool2").shape(), (Shape{4, 50, 4, 4}));
  EXPECT_EQ(net->blob("ip1").shape(), (Shape{4, 500}));
  EXPECT_EQ(net->blob("ip2").shape(), (Shape{4, 10}));
  EXPECT_EQ(net->output_names(), (std::vector<std::string>{"loss"}));
  ASSERT_EQ(net->params().size(), 8u);
  EXPECT_EQ(param_blob(*net, "conv1.weight").shape(), (Shape{20, 1, 5, 5}));
  EXPECT_EQ(param_blob(*net, "ip1.weight").shape(), (Shape{500, 800}));
  EXPECT_EQ(net->params()[static_cast<size_t>(net->param_index("conv2.bias"))].lr_mult, 2.0f);
  EXPECT_EQ(net->memory_report().param_bytes, (520u + 25050u + 400500u + 5010u) * 4);
  for (int i = 1; i < net->num_layers(); ++i) EXPECT_TRUE(net->layer_needs_backward(i)) << net->layer(i).name();
  EXPECT_FALSE(net->layer_needs_backward(0));

  fill_lenet_inputs(*net);
  net->zero_param_diffs();
  const float loss0 = net->forward_backward();
  EXPECT_TRUE(std::isfinite(loss0));
  EXPECT_NEAR(loss0, std::log(10.0f), 1.0f);  // near chance at initialisation
  for (const auto& p : net->params()) {
    const auto g = values(p.blob->diff);
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return std::isfinite(v); })) << p.name;
    EXPECT_FALSE(all_zero(p.blob->diff)) << p.name;
  }
  // Plain gradient steps (lr_mult honoured) bring the loss down.
  float loss = loss0;
  for (int step = 0; step < 10; ++step) {
    const float previous = loss;
    for (auto& p : net->params()) {
      float* w = p.blob->data.data<float>();
      const float* g = p.blob->diff.data<float>();
      for (int64_t i = 0; i < p.blob->numel(); ++i) w[i] -= 0.01f * p.lr_mult * g[i];
    }
    net->zero_param_diffs();
    loss = net->forward_backward();
    EXPECT_LT(loss, previous) << "step " << step;
  }
  EXPECT_LT(loss, 0.5f * loss0);

  auto test = make_net(kLeNet, Phase::kTest);
  EXPECT_EQ(test->output_names(), (std::vector<std::string>{"accuracy", "loss"}));
  test->share_params_from(*net);
  fill_lenet_inputs(*test);
  const float test_loss = test->forward();
  EXPECT_NEAR(test_loss, values(net->blob("loss").data)[0], 1e-5f);  // same weights, same batch
  const float acc = values(test->blob("accuracy").data)[0];
  EXPECT_GE(acc, 0.0f);
  EXPECT_LE(acc, 1.0f);
}

TEST(NetCaffeCompat, DataLayerWhoseDatabaseCannotBeOpenedNamesThePathAndTheBackend) {
  const std::string msg = error_of<IoError>([] {
    make_net(R"(
      layer { name: "mnist" type: "Data" top: "data" top: "label"
              data_param { source: "examples/mnist/mnist_train_lmdb" batch_size: 64 backend: LMDB } }
    )");
  });
  EXPECT_NE(msg.find("LMDB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("examples/mnist/mnist_train_lmdb"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer 'mnist' (Data)"), std::string::npos) << msg;
}

TEST(NetCaffeCompat, BatchNormAcceptsCaffesThreeFrozenParamBlocks) {
  auto net = make_net(R"(
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
    layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y"
            param { lr_mult: 0 } param { lr_mult: 0 } param { lr_mult: 0 } }
  )");
  EXPECT_EQ(net->params().size(), 2u);
  // A surplus block that does more than freeze is still an error.
  const std::string msg = build_error(R"(
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
    layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y"
            param { lr_mult: 0 } param { lr_mult: 0 } param { lr_mult: 1 } }
  )");
  EXPECT_NE(msg.find("3 param blocks"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
