// Caffe's layer set beyond the common layers (LRN, Deconvolution, Crop,
// Slice, Silence, Tile, Reduction, ArgMax, Embed, Bias, PReLU, DummyData):
// what the generic, golden and CPU-vs-CUDA tests do not reach: configs that
// must be refused with the key named, several tops, Caffe's rules where
// PyTorch has no counterpart (ArgMax's ties, DummyData), Caffe's own
// spelling in a whole net, and the per-element functions the CUDA kernels
// run where the CPU path computes another way (Deconvolution).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "layers/deconvolution.h"
#include "tests/layer_test_util.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test_util::LayerHarness;

std::string net_with(const std::string& layer, const std::string& shape = "dim: 2 dim: 3 dim: 4 dim: 4") {
  return "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { " + shape + " } } }\n" + layer;
}

std::string config_error(const std::string& layer, const std::string& shape = "dim: 2 dim: 3 dim: 4 dim: 4") {
  return test::error_of<ConfigError>([&] { test::make_net(net_with(layer, shape)); });
}

std::string shape_error(const std::string& layer, const std::string& shape) {
  return test::error_of<ShapeError>([&] { test::make_net(net_with(layer, shape)); });
}

// ---- LRN ----

TEST(CaffeLayers, LrnRejectsAnEvenWindowAndNamesTheKey) {
  const std::string e = config_error("layer { name: 'n' type: 'LRN' bottom: 'x' top: 'y' lrn_param { local_size: 4 } }");
  EXPECT_CONTAINS(e, "local_size");
  EXPECT_CONTAINS(e, "odd");
  EXPECT_CONTAINS(e, "layer 'n' (LRN)");
  EXPECT_CONTAINS(config_error("layer { name: 'n' type: 'LRN' bottom: 'x' top: 'y' lrn_param { k: 0 } }"), "k must be > 0");
  EXPECT_CONTAINS(config_error("layer { name: 'n' type: 'LRN' bottom: 'x' top: 'y' lrn_param { alpha: -1 } }"),
                  "alpha must be >= 0");
  EXPECT_CONTAINS(config_error("layer { name: 'n' type: 'LRN' bottom: 'x' top: 'y' lrn_param { norm_region: ACROSS } }"),
                  "ACROSS_CHANNELS");
  EXPECT_CONTAINS(config_error("layer { name: 'n' type: 'LRN' bottom: 'x' top: 'y' lrn_param { localsize: 5 } }"),
                  "did you mean 'local_size'");
  EXPECT_CONTAINS(config_error("layer { name: 'n' type: 'LRN' bottom: 'x' top: 'x' }"), "in place");
  EXPECT_CONTAINS(shape_error("layer { name: 'n' type: 'LRN' bottom: 'x' top: 'y' }", "dim: 2 dim: 3"), "4-D");
}

// AlexNet's spelling, as in BVLC's deploy.prototxt.
TEST(CaffeLayers, LrnRunsAsAlexNetWritesIt) {
  auto net = test::make_net(net_with(R"(
layer { name: "norm1" type: "LRN" bottom: "x" top: "norm1"
        lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 } })"));
  Blob& x = net->blob("x");
  x.data.fill(2.0f);
  net->forward();
  // Every channel of a 3-channel input sees all 3 within a window of 5:
  // s = 1 + 1e-4 / 5 * 3 * 4, y = 2 * s^-0.75.
  const float want = 2.0f * std::pow(1.0f + 1e-4f / 5.0f * 12.0f, -0.75f);
  for (float v : test::values(net->blob("norm1").data)) EXPECT_FLOAT_EQ(v, want);
}

// ---- Deconvolution ----

TEST(CaffeLayers, DeconvolutionRejectsBadConfigsNamingTheKey) {
  const std::string base = "layer { name: 'up' type: 'Deconvolution' bottom: 'x' top: 'y' convolution_param { ";
  EXPECT_CONTAINS(config_error(base + "kernel_size: 2 } }"), "num_output");
  EXPECT_CONTAINS(config_error(base + "num_output: 2 } }"), "missing kernel_size");
  EXPECT_CONTAINS(config_error(base + "num_output: 3 kernel_size: 2 group: 2 } }"), "not divisible by group");
  EXPECT_CONTAINS(config_error(base + "num_output: 2 kernel_size: 2 stride: 0 } }"), "stride must be >= 1");
  EXPECT_CONTAINS(config_error(base + "num_output: 2 kernel_size: 2 pad: 1 pad_h: 1 } }"), "give either pad");
  EXPECT_CONTAINS(config_error(base + "num_output: 2 kernel_size: 2 split: OUTPUT_CHANNELS } }"),
                  "unknown key 'split'");
  EXPECT_CONTAINS(shape_error(base + "num_output: 2 kernel_size: 1 pad: 3 } }", "dim: 1 dim: 3 dim: 4 dim: 4"),
                  "use less pad");
  EXPECT_CONTAINS(shape_error(base + "num_output: 2 kernel_size: 2 group: 2 } }", "dim: 1 dim: 3 dim: 4 dim: 4"),
                  "not divisible by group");
}

// The functions the CUDA kernels evaluate per element give what the CPU's
// im2col/GEMM path gives, for every generic example.
TEST(CaffeLayers, DeconvolutionDeviceFormulasMatchTheCpuPath) {
  const LayerSchema schema = LayerRegistry::instance().find("Deconvolution").schema();
  for (const LayerExample& ex : schema.examples) {
    SCOPED_TRACE(ex.config);
    LayerHarness h = test_util::make_harness("Deconvolution", ex, 7);
    h.setup();
    h.forward();
    auto& layer = dynamic_cast<DeconvolutionLayer&>(*h.layer);
    const DeconvGeometry g = layer.geometry();
    const Blob& w = *layer.params()[0].blob;
    const float* bias = layer.params().size() > 1 ? layer.params()[1].blob->data.data<float>() : nullptr;
    const float* x = h.bottom[0]->data.data<float>();
    const std::vector<float> y = test::values(h.top[0]->data);
    for (int64_t t = 0; t < h.top[0]->numel(); ++t) {
      ASSERT_NEAR(deconv_forward_at(g, t, x, w.data.data<float>(), bias), y[t], 1e-5f * (1.0f + std::fabs(y[t])))
          << "top element " << t;
    }
    Rng rng(3);
    h.top[0]->diff.resize(h.top[0]->shape());
    test_util::fill_gaussian(h.top[0]->diff, rng);
    for (const LayerParam& p : layer.params()) p.blob->diff.zero();
    h.backward();
    const float* dy = h.top[0]->diff.data<float>();
    const std::vector<float> dx = test::values(h.bottom[0]->diff);
    for (int64_t i = 0; i < h.bottom[0]->numel(); ++i) {
      ASSERT_NEAR(deconv_input_grad_at(g, i, dy, w.data.data<float>()), dx[i], 1e-5f * (1.0f + std::fabs(dx[i])))
          << "bottom gradient element " << i;
    }
    const std::vector<float> dw = test::values(w.diff);
    for (int64_t k = 0; k < w.numel(); ++k) {
      ASSERT_NEAR(deconv_weight_grad_at(g, k, h.bottom[0]->shape()[0], x, dy), dw[k],
                  1e-5f * (1.0f + std::fabs(dw[k])))
          << "weight gradient element " << k;
    }
  }
}

// ---- Crop, Slice, Silence ----

TEST(CaffeLayers, CropRejectsWhatDoesNotFitNamingTheKey) {
  const std::string ref = "layer { name: 'r' type: 'Input' top: 'r' input_param { shape { dim: 2 dim: 3 dim: 3 dim: 3 } } }\n";
  EXPECT_CONTAINS(config_error(ref + "layer { name: 'c' type: 'Crop' bottom: 'x' bottom: 'r' top: 'y' "
                                     "crop_param { offset: -1 } }"),
                  "offset must be >= 0");
  EXPECT_CONTAINS(shape_error(ref + "layer { name: 'c' type: 'Crop' bottom: 'x' bottom: 'r' top: 'y' "
                                    "crop_param { offset: 2 } }",
                              "dim: 2 dim: 3 dim: 4 dim: 4"),
                  "past the end of bottom 0");
  EXPECT_CONTAINS(shape_error(ref + "layer { name: 'c' type: 'Crop' bottom: 'x' bottom: 'r' top: 'y' "
                                    "crop_param { offset: 0 offset: 1 offset: 0 } }",
                              "dim: 2 dim: 3 dim: 4 dim: 4"),
                  "3 offsets for 2 cropped axes");
  EXPECT_CONTAINS(config_error("layer { name: 'c' type: 'Crop' bottom: 'x' top: 'y' }"), "bottom");
}

TEST(CaffeLayers, SliceFeedsSeveralConsumersAndChecksItsPoints) {
  auto net = test::make_net(net_with(R"(
layer { name: "s" type: "Slice" bottom: "x" top: "a" top: "b" slice_param { slice_point: 1 } }
layer { name: "sil" type: "Silence" bottom: "a" })"));
  Blob& x = net->blob("x");
  std::vector<float> v(static_cast<size_t>(x.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  test::set_values(x.data, v);
  net->forward();
  EXPECT_EQ(net->blob("a").shape(), (Shape{2, 1, 4, 4}));
  EXPECT_EQ(net->blob("b").shape(), (Shape{2, 2, 4, 4}));
  EXPECT_EQ(test::values(net->blob("b").data)[0], 16.0f);   // image 0, channel 1
  EXPECT_EQ(test::values(net->blob("b").data)[32], 64.0f);  // image 1, channel 1
  const std::string base = "layer { name: 's' type: 'Slice' bottom: 'x' top: 'a' top: 'b' slice_param { ";
  EXPECT_CONTAINS(config_error(base + "slice_point: 1 slice_point: 2 } }"), "give one slice_point fewer than tops");
  EXPECT_CONTAINS(config_error(base + "slice_point: 0 } }"), "strictly increasing");
  EXPECT_CONTAINS(config_error(base + "axis: 1 slice_dim: 1 } }"), "not both");
  EXPECT_CONTAINS(shape_error(base + "slice_point: 3 } }", "dim: 2 dim: 3 dim: 4 dim: 4"), "slice_point 3");
  EXPECT_CONTAINS(shape_error(base + "} }", "dim: 2 dim: 3 dim: 4 dim: 4"), "equal tops");
}

TEST(CaffeLayers, SilenceTakesBlobsAndGivesZeroGradients) {
  auto h = test_util::make_harness("Silence", "", {{2, 3}, {4}});
  h.setup();
  h.forward();
  EXPECT_TRUE(h.top.empty());
  h.bottom[0]->diff.fill(5.0f);
  h.bottom[1]->diff.fill(5.0f);
  h.backward({true, false});
  EXPECT_TRUE(test::all_zero(h.bottom[0]->diff));
  EXPECT_EQ(test::values(h.bottom[1]->diff)[0], 5.0f) << "a bottom without propagate_down is left alone";
  EXPECT_CONTAINS(config_error("layer { name: 's' type: 'Silence' bottom: 'x' top: 'y' }"), "top");
}

// ---- Tile, Reduction, ArgMax, Embed, Bias, PReLU ----

TEST(CaffeLayers, RefusedConfigsNameTheKey) {
  const std::string l = "layer { name: 'l' bottom: 'x' top: 'y' ";
  EXPECT_CONTAINS(config_error(l + "type: 'Tile' }"), "missing tiles");
  EXPECT_CONTAINS(config_error(l + "type: 'Tile' tile_param { tiles: 0 } }"), "tiles must be >= 1");
  EXPECT_CONTAINS(shape_error(l + "type: 'Tile' tile_param { tiles: 2 axis: 4 } }", "dim: 2 dim: 3"), "axis 4");
  EXPECT_CONTAINS(config_error(l + "type: 'Reduction' reduction_param { operation: MAX } }"), "SUMSQ");
  EXPECT_CONTAINS(shape_error(l + "type: 'Reduction' reduction_param { axis: 2 } }", "dim: 2 dim: 3"), "axis 2");
  EXPECT_CONTAINS(config_error(l + "type: 'ArgMax' argmax_param { top_k: 0 } }"), "top_k must be >= 1");
  EXPECT_CONTAINS(shape_error(l + "type: 'ArgMax' argmax_param { top_k: 7 } }", "dim: 2 dim: 3 dim: 2"),
                  "top_k 7 exceeds the 6 values");
  EXPECT_CONTAINS(config_error(l + "type: 'Embed' embed_param { num_output: 2 } }"), "input_dim");
  EXPECT_CONTAINS(config_error(l + "type: 'Embed' embed_param { num_output: 2 input_dim: 0 } }"),
                  "input_dim (the number of rows");
  EXPECT_CONTAINS(config_error(l + "type: 'Bias' bias_param { num_axes: -2 } }"), "num_axes must be >= -1");
  EXPECT_CONTAINS(shape_error(l + "type: 'Bias' bias_param { axis: 1 num_axes: 3 } }", "dim: 2 dim: 3"),
                  "does not fit the bottom");
  EXPECT_CONTAINS(config_error(l + "type: 'PReLU' prelu_param { channel_shared: true filler { type: 'bogus' } } }"),
                  "bogus");
  EXPECT_CONTAINS(shape_error(l + "type: 'PReLU' }", "dim: 5"), "channel axis");
}

// Caffe sorts (value, index) pairs descending: among equal values the
// larger index ranks first, and each rank is taken once.
TEST(CaffeLayers, ArgMaxBreaksTiesAsCaffeDoes) {
  auto h = test_util::make_harness("ArgMax", "argmax_param { top_k: 4 out_max_val: true }", {{1, 5}});
  test::set_values(h.bottom[0]->data, {2.0f, 7.0f, 2.0f, 7.0f, NAN});
  h.setup();
  h.forward();
  EXPECT_EQ(h.top[0]->shape(), (Shape{1, 2, 4}));
  const std::vector<float> y = test::values(h.top[0]->data);
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 4), (std::vector<float>{4, 3, 1, 2}));  // NaN first
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(std::vector<float>(y.begin() + 5, y.end()), (std::vector<float>{7, 7, 2}));
}

TEST(CaffeLayers, EmbedRefusesAnIndexOutsideTheTableNamingItsPosition) {
  auto h = test_util::make_harness("Embed", "embed_param { num_output: 2 input_dim: 3 }", {{2, 2}});
  test::set_values(h.bottom[0]->data, {0.0f, 2.0f, 3.0f, 1.0f});
  h.setup();
  const std::string e = test::error_of<ShapeError>([&] { h.forward(); });
  EXPECT_CONTAINS(e, "index 3 at position 2");
  EXPECT_CONTAINS(e, "[0, 3)");
  test::set_values(h.bottom[0]->data, {0.0f, 1.5f, 2.0f, 1.0f});
  EXPECT_CONTAINS(test::error_of<ShapeError>([&] { h.forward(); }), "index 1.5 at position 1");
}

// ---- DummyData (a data layer: no generic or golden case) ----

TEST(CaffeLayers, DummyDataFillsEveryTopAsCaffeSpellsIt) {
  auto net = test::make_net(R"(
layer { name: "data" type: "DummyData" top: "a" top: "b" top: "c"
        dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 4 } shape { dim: 1 dim: 2 dim: 2 }
                           data_filler { type: "constant" value: 1.5 } data_filler { type: "gaussian" std: 2 }
                           data_filler { type: "uniform" min: 3 max: 4 } } })");
  net->forward();
  EXPECT_EQ(net->blob("a").shape(), (Shape{2, 3}));
  EXPECT_EQ(net->blob("b").shape(), (Shape{4}));
  EXPECT_EQ(net->blob("c").shape(), (Shape{1, 2, 2}));
  for (float v : test::values(net->blob("a").data)) EXPECT_EQ(v, 1.5f);
  for (float v : test::values(net->blob("c").data)) EXPECT_TRUE(v >= 3.0f && v <= 4.0f) << v;
  const std::vector<float> first = test::values(net->blob("b").data);
  net->forward();
  EXPECT_NE(test::values(net->blob("b").data), first) << "a random filler draws anew on every forward";

  // Legacy dims, one filler (the default, constant 0) for both tops.
  auto legacy = test::make_net(R"(
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { num: 2 channels: 3 channels: 1 height: 4 width: 5 } })");
  legacy->forward();
  EXPECT_EQ(legacy->blob("x").shape(), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(legacy->blob("y").shape(), (Shape{2, 1, 4, 5}));
  EXPECT_TRUE(test::all_zero(legacy->blob("y").data));
}

TEST(CaffeLayers, DummyDataRefusesShapesThatDoNotFitTheTops) {
  const auto err = [](const std::string& param) {
    return test::error_of<ConfigError>([&] {
      test::make_net("layer { name: 'd' type: 'DummyData' top: 'a' top: 'b' dummy_data_param { " + param + " } }");
    });
  };
  EXPECT_CONTAINS(err(""), "needs shape");
  EXPECT_CONTAINS(err("shape { dim: 1 } shape { dim: 2 } shape { dim: 3 }"), "3 shape entries for 2 top(s)");
  EXPECT_CONTAINS(err("shape { dim: 1 } num: 1 channels: 1 height: 1 width: 1"), "not both");
  EXPECT_CONTAINS(err("num: 1 channels: 1 height: 1"), "missing width");
  EXPECT_CONTAINS(err("shape { dim: 1 } data_filler { type: 'constant' } data_filler { type: 'constant' } "
                      "data_filler { type: 'constant' }"),
                  "3 data_filler entries");
  EXPECT_CONTAINS(err("shape { dim: -1 }"), "dimensions must be >= 0");
  EXPECT_CONTAINS(err("shape { size: 1 }"), "unknown key 'size'");
}

}  // namespace
}  // namespace strata
