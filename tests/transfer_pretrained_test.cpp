// transfer::load_pretrained: our own files, the torchvision VGG map (with and
// without BN) on tiny synthetic files written with framework/io/safetensors.h,
// format detection, the load report, shape mismatches and their --reinit
// advice, re-initialising by flag and by `reinit: true`.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/io/checkpoint.h"
#include "framework/error.h"
#include "framework/net.h"
#include "framework/io/safetensors.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"
#include "transfer/pretrained.h"
#include "transfer/weights_file.h"

namespace strata {
namespace {

using test::error_of;
using test::make_net;
using transfer::load_pretrained;
using transfer::PretrainedOptions;
using transfer::WeightsFormat;

// Tensors to write, each filled with `seed + i * 0.001` so every value says where it came from.
struct FakeTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
};

FakeTensor fake(const std::string& name, const Shape& shape, float seed) {
  FakeTensor t{name, shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)))};
  for (size_t i = 0; i < t.values.size(); ++i) t.values[i] = seed + 0.001f * static_cast<float>(i);
  return t;
}

void write_file(const std::string& path, const std::vector<FakeTensor>& tensors) {
  std::vector<TensorToWrite> out;
  for (const FakeTensor& t : tensors) out.push_back({t.name, DType::kF32, t.shape, t.values.data()});
  write_safetensors(path, out, {});
}

std::vector<float> param_values(const Net& net, const std::string& name) {
  return test::values(test::param_blob(net, name).data);
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v) {
    if (x == s) return true;
  }
  return false;
}

// A tiny VGG in the layer names of models/: two conv blocks, fc6..fc8.
std::string tiny_vgg(bool bn, int classes = 5, const std::string& fc8_extra = "") {
  auto conv = [&](const std::string& id, const std::string& bottom, int out) {
    std::string s = "layer { name: \"conv" + id + "\" type: \"Convolution\" bottom: \"" + bottom + "\" top: \"conv" +
                    id + "\" convolution_param { num_output: " + std::to_string(out) + " kernel_size: 3 pad: 1 } }\n";
    std::string top = "conv" + id;
    if (bn) {
      s += "layer { name: \"bn" + id + "\" type: \"BatchNorm\" bottom: \"" + top + "\" top: \"" + top + "\" }\n";
      s += "layer { name: \"scale" + id + "\" type: \"Scale\" bottom: \"" + top + "\" top: \"" + top +
           "\" scale_param { bias_term: true } }\n";
    }
    s += "layer { name: \"relu" + id + "\" type: \"ReLU\" bottom: \"" + top + "\" top: \"" + top + "\" }\n";
    return s;
  };
  std::string s = "name: \"tiny_vgg\"\n"
                  "layer { name: \"in\" type: \"Input\" top: \"data\" input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } } }\n";
  s += conv("1_1", "data", 4);
  s += "layer { name: \"pool1\" type: \"Pooling\" bottom: \"conv1_1\" top: \"pool1\" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n";
  s += conv("2_1", "pool1", 6);
  s += "layer { name: \"pool2\" type: \"Pooling\" bottom: \"conv2_1\" top: \"pool2\" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n";
  s += "layer { name: \"fc6\" type: \"InnerProduct\" bottom: \"pool2\" top: \"fc6\" inner_product_param { num_output: 8 } }\n"
       "layer { name: \"relu6\" type: \"ReLU\" bottom: \"fc6\" top: \"fc6\" }\n"
       "layer { name: \"fc7\" type: \"InnerProduct\" bottom: \"fc6\" top: \"fc7\" inner_product_param { num_output: 8 } }\n"
       "layer { name: \"relu7\" type: \"ReLU\" bottom: \"fc7\" top: \"fc7\" }\n";
  s += "layer { name: \"fc8\" type: \"InnerProduct\" bottom: \"fc7\" top: \"fc8\" inner_product_param { num_output: " +
       std::to_string(classes) + " } " + fc8_extra + " }\n";
  return s;
}

// What torchvision's vgg state dict looks like for tiny_vgg (features indices
// count ReLU and pooling modules, as torchvision's do).
std::vector<FakeTensor> torchvision_vgg_tensors(bool bn, int classes = 5) {
  std::vector<FakeTensor> t;
  if (bn) {
    t = {fake("features.0.weight", {4, 3, 3, 3}, 1.0f), fake("features.0.bias", {4}, 2.0f),
         fake("features.1.weight", {4}, 3.0f), fake("features.1.bias", {4}, 4.0f),
         fake("features.1.running_mean", {4}, 5.0f), fake("features.1.running_var", {4}, 6.0f),
         fake("features.1.num_batches_tracked", {}, 0.0f),
         fake("features.4.weight", {6, 4, 3, 3}, 7.0f), fake("features.4.bias", {6}, 8.0f),
         fake("features.5.weight", {6}, 9.0f), fake("features.5.bias", {6}, 10.0f),
         fake("features.5.running_mean", {6}, 11.0f), fake("features.5.running_var", {6}, 12.0f),
         fake("features.5.num_batches_tracked", {}, 0.0f)};
  } else {
    t = {fake("features.0.weight", {4, 3, 3, 3}, 1.0f), fake("features.0.bias", {4}, 2.0f),
         fake("features.3.weight", {6, 4, 3, 3}, 7.0f), fake("features.3.bias", {6}, 8.0f)};
  }
  t.push_back(fake("classifier.0.weight", {8, 6}, 20.0f));
  t.push_back(fake("classifier.0.bias", {8}, 21.0f));
  t.push_back(fake("classifier.3.weight", {8, 8}, 22.0f));
  t.push_back(fake("classifier.3.bias", {8}, 23.0f));
  t.push_back(fake("classifier.6.weight", {classes, 8}, 24.0f));
  t.push_back(fake("classifier.6.bias", {classes}, 25.0f));
  return t;
}

class TransferPretrained : public ::testing::Test {
 protected:
  test::TempDir dir_{"strata_transfer_test"};
};

TEST_F(TransferPretrained, StrataFileLoadsByNameWithAutoDetection) {
  auto src = make_net(tiny_vgg(false), Phase::kTrain, 7);
  save_weights(*src, dir_.file("w.safetensors"));
  auto dst = make_net(tiny_vgg(false), Phase::kTrain, 8);
  ASSERT_NE(param_values(*src, "conv1_1.weight"), param_values(*dst, "conv1_1.weight"));
  const LoadReport r = load_pretrained(*dst, dir_.file("w.safetensors"), {});
  EXPECT_EQ(r.loaded.size(), 10u);
  EXPECT_TRUE(r.missing.empty());
  EXPECT_TRUE(r.unexpected.empty());
  EXPECT_TRUE(contains(r.loaded, "fc8.bias"));
  for (const NetParam& p : src->params()) EXPECT_EQ(param_values(*src, p.name), param_values(*dst, p.name)) << p.name;
}

TEST_F(TransferPretrained, StrataFileWithForeignNamesIsAnErrorNamingTheFormats) {
  write_file(dir_.file("w.safetensors"), {fake("layer1.0.conv1.weight", {2, 2}, 1.0f)});
  auto net = make_net(tiny_vgg(false));
  const std::string msg = error_of<IoError>([&] { load_pretrained(*net, dir_.file("w.safetensors"), {}); });
  EXPECT_CONTAINS(msg, "layer1.0.conv1.weight");
  EXPECT_CONTAINS(msg, "--weights-format");
  EXPECT_CONTAINS(msg, "torchvision-vgg");
}

TEST_F(TransferPretrained, TorchvisionVggWithoutBnMapsStructurally) {
  write_file(dir_.file("vgg.safetensors"), torchvision_vgg_tensors(false));
  auto net = make_net(tiny_vgg(false));
  const LoadReport r = load_pretrained(*net, dir_.file("vgg.safetensors"), {});
  EXPECT_EQ(r.loaded.size(), 10u) << r.str();
  EXPECT_TRUE(r.missing.empty()) << r.str();
  EXPECT_TRUE(r.unexpected.empty()) << r.str();
  EXPECT_TRUE(contains(r.loaded, "conv2_1.weight (from features.3.weight)")) << r.str();
  EXPECT_TRUE(contains(r.loaded, "fc8.bias (from classifier.6.bias)")) << r.str();
  const auto t = torchvision_vgg_tensors(false);
  EXPECT_EQ(param_values(*net, "conv1_1.weight"), t[0].values);
  EXPECT_EQ(param_values(*net, "conv2_1.bias"), t[3].values);
  EXPECT_EQ(param_values(*net, "fc6.weight"), t[4].values);
  EXPECT_EQ(param_values(*net, "fc8.weight"), t[8].values);
}

TEST_F(TransferPretrained, TorchvisionVggWithBnSplitsBnIntoBatchNormAndScale) {
  write_file(dir_.file("vgg_bn.safetensors"), torchvision_vgg_tensors(true));
  auto net = make_net(tiny_vgg(true));
  const LoadReport r = load_pretrained(*net, dir_.file("vgg_bn.safetensors"), {});
  // 4 conv + 4 BN statistics + 4 Scale + 6 fc; num_batches_tracked dropped silently.
  EXPECT_EQ(r.loaded.size(), 18u) << r.str();
  EXPECT_TRUE(r.missing.empty()) << r.str();
  EXPECT_TRUE(r.unexpected.empty()) << r.str();
  const auto t = torchvision_vgg_tensors(true);
  std::map<std::string, std::vector<float>> by_name;
  for (const auto& x : t) by_name[x.name] = x.values;
  EXPECT_EQ(param_values(*net, "scale1_1.weight"), by_name["features.1.weight"]);
  EXPECT_EQ(param_values(*net, "scale1_1.bias"), by_name["features.1.bias"]);
  EXPECT_EQ(param_values(*net, "bn1_1.running_mean"), by_name["features.1.running_mean"]);
  EXPECT_EQ(param_values(*net, "bn2_1.running_var"), by_name["features.5.running_var"]);
  EXPECT_EQ(param_values(*net, "conv2_1.weight"), by_name["features.4.weight"]);
  EXPECT_EQ(param_values(*net, "fc7.bias"), by_name["classifier.3.bias"]);
}

TEST_F(TransferPretrained, VggFileWithBnForNetWithoutBnSaysWhichModelFits) {
  write_file(dir_.file("vgg_bn.safetensors"), torchvision_vgg_tensors(true));
  auto net = make_net(tiny_vgg(false));
  const std::string msg = error_of<ShapeError>([&] { load_pretrained(*net, dir_.file("vgg_bn.safetensors"), {}); });
  EXPECT_CONTAINS(msg, "features.1 is a BatchNorm");
  EXPECT_CONTAINS(msg, "_bn");
}

TEST_F(TransferPretrained, ExtraAndUnknownTensorsAreUnexpectedAndShortNetIsMissing) {
  auto t = torchvision_vgg_tensors(false);
  t.push_back(fake("features.7.weight", {6, 6, 3, 3}, 30.0f));  // a deeper VGG's third conv
  t.push_back(fake("classifier.9.weight", {2, 2}, 31.0f));
  t.push_back(fake("features.extra", {1}, 32.0f));
  t.erase(t.begin() + 9);  // classifier.6.bias
  write_file(dir_.file("vgg.safetensors"), t);
  auto net = make_net(tiny_vgg(false));
  const LoadReport r = load_pretrained(*net, dir_.file("vgg.safetensors"), {});
  EXPECT_TRUE(contains(r.unexpected, "features.7.weight")) << r.str();
  EXPECT_TRUE(contains(r.unexpected, "classifier.9.weight")) << r.str();
  EXPECT_TRUE(contains(r.unexpected, "features.extra")) << r.str();
  EXPECT_EQ(r.missing, std::vector<std::string>{"fc8.bias"}) << r.str();
  EXPECT_EQ(r.loaded.size(), 9u);
  const std::string text = r.str();
  EXPECT_CONTAINS(text, "loaded 9 parameters");
  EXPECT_CONTAINS(text, "missing from the file");
  EXPECT_CONTAINS(text, "features.7.weight");
}

TEST_F(TransferPretrained, HeadOfAnotherSizeIsAnErrorWithBothReinitSpellings) {
  write_file(dir_.file("vgg.safetensors"), torchvision_vgg_tensors(false, 1000));
  auto net = make_net(tiny_vgg(false, 5));
  const std::string msg = error_of<ShapeError>([&] { load_pretrained(*net, dir_.file("vgg.safetensors"), {}); });
  EXPECT_CONTAINS(msg, "fc8.weight' (from classifier.6.weight)");
  EXPECT_CONTAINS(msg, "[1000, 8]");
  EXPECT_CONTAINS(msg, "[5, 8]");
  EXPECT_CONTAINS(msg, "--reinit fc8");
  EXPECT_CONTAINS(msg, "reinit: true");
  EXPECT_CONTAINS(msg, "torchvision-vgg weights");
}

TEST_F(TransferPretrained, ReinitByOptionKeepsTheNewHead) {
  write_file(dir_.file("vgg.safetensors"), torchvision_vgg_tensors(false, 1000));
  auto net = make_net(tiny_vgg(false, 5));
  const std::vector<float> head = param_values(*net, "fc8.weight");
  PretrainedOptions o;
  o.reinit = {"fc8"};
  const LoadReport r = load_pretrained(*net, dir_.file("vgg.safetensors"), o);
  EXPECT_EQ(param_values(*net, "fc8.weight"), head);
  EXPECT_EQ(r.reinitialized, (std::vector<std::string>{"fc8.weight", "fc8.bias"}));
  EXPECT_TRUE(contains(r.mismatched, "fc8.weight (from classifier.6.weight)")) << r.str();
  EXPECT_EQ(r.loaded.size(), 8u);
  EXPECT_CONTAINS(r.str(), "re-initialised");
}

TEST_F(TransferPretrained, ReinitTrueInTheLayerBlockKeepsTheNewHead) {
  write_file(dir_.file("vgg.safetensors"), torchvision_vgg_tensors(false, 1000));
  auto net = make_net(tiny_vgg(false, 5, "reinit: true"));
  const std::vector<float> head = param_values(*net, "fc8.weight");
  const LoadReport r = load_pretrained(*net, dir_.file("vgg.safetensors"), {});
  EXPECT_EQ(param_values(*net, "fc8.weight"), head);
  EXPECT_EQ(r.reinitialized.size(), 2u);
  EXPECT_EQ(r.loaded.size(), 8u);
}

TEST_F(TransferPretrained, UnknownReinitLayerIsAConfigError) {
  write_file(dir_.file("vgg.safetensors"), torchvision_vgg_tensors(false));
  auto net = make_net(tiny_vgg(false));
  PretrainedOptions o;
  o.reinit = {"fc9"};
  const std::string msg = error_of<ConfigError>([&] { load_pretrained(*net, dir_.file("vgg.safetensors"), o); });
  EXPECT_CONTAINS(msg, "fc9");
}

TEST_F(TransferPretrained, NamedFormatOverridesDetection) {
  auto src = make_net(tiny_vgg(false), Phase::kTrain, 7);
  save_weights(*src, dir_.file("w.safetensors"));
  auto net = make_net(tiny_vgg(false));
  PretrainedOptions o;
  o.format = WeightsFormat::kTorchvisionVgg;  // our names are not torchvision's: nothing maps
  const LoadReport r = load_pretrained(*net, dir_.file("w.safetensors"), o);
  EXPECT_TRUE(r.loaded.empty());
  EXPECT_EQ(r.unexpected.size(), 10u);
  EXPECT_EQ(r.missing.size(), 10u);
}

// Writes `tensors` as F32, except `int64_name`, stored as torch does it: I64,
// a dtype strata does not read. (Written as U8 of the same byte count, then
// the header is patched in place: the two spellings have the same length.)
void write_with_i64(const std::string& path, const std::vector<FakeTensor>& tensors, const std::string& int64_name,
                    int64_t elements) {
  std::vector<TensorToWrite> out;
  std::vector<uint8_t> raw(static_cast<size_t>(8 * elements), 0);
  for (const FakeTensor& t : tensors) {
    if (t.name == int64_name) {
      out.push_back({t.name, DType::kU8, {8 * elements}, raw.data()});
    } else {
      out.push_back({t.name, DType::kF32, t.shape, t.values.data()});
    }
  }
  write_safetensors(path, out, {});
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string from = "\"dtype\":\"U8\",\"shape\":[" + std::to_string(8 * elements) + "]";
  std::string to = "\"dtype\":\"I64\",\"shape\":[" + (elements == 1 ? std::string() : std::to_string(elements)) + "]";
  to.append(from.size() - to.size(), ' ');  // JSON allows the spaces
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, from.size(), to);
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST_F(TransferPretrained, TorchInt64NumBatchesTrackedIsDroppedNotFatal) {
  auto tensors = torchvision_vgg_tensors(true);
  tensors.erase(tensors.begin() + 13);  // features.5.num_batches_tracked: one I64 is enough
  write_with_i64(dir_.file("vgg_bn.safetensors"), tensors, "features.1.num_batches_tracked", 1);
  std::map<std::string, std::string> foreign;
  const SafetensorsReader reader = transfer::open_weights_file(dir_.file("vgg_bn.safetensors"), &foreign);
  EXPECT_EQ(reader.tensors().size(), tensors.size());
  EXPECT_EQ(foreign, (std::map<std::string, std::string>{{"features.1.num_batches_tracked", "I64"}}));
  auto net = make_net(tiny_vgg(true));
  const LoadReport r = load_pretrained(*net, dir_.file("vgg_bn.safetensors"), {});
  EXPECT_EQ(r.loaded.size(), 18u) << r.str();
  EXPECT_TRUE(r.unexpected.empty()) << r.str();
  EXPECT_TRUE(r.missing.empty()) << r.str();
}

TEST_F(TransferPretrained, Int64WeightsAreAnErrorThatSaysHowToConvert) {
  auto src = make_net(tiny_vgg(false), Phase::kTrain, 7);
  std::vector<FakeTensor> tensors;
  for (const NetParam& p : src->params()) tensors.push_back(fake(p.name, p.blob->shape(), 1.0f));
  write_with_i64(dir_.file("w.safetensors"), tensors, "fc8.bias", 5);
  auto net = make_net(tiny_vgg(false));
  const std::string msg = error_of<IoError>([&] { load_pretrained(*net, dir_.file("w.safetensors"), {}); });
  EXPECT_CONTAINS(msg, "tensor 'fc8.bias' (for fc8.bias) is stored as I64");
  EXPECT_CONTAINS(msg, "convert_pth_to_safetensors.py");
}

TEST_F(TransferPretrained, SixteenBitFilesConvert) {
  std::vector<uint16_t> half = {float_to_f16(0.5f), float_to_f16(-2.0f), float_to_f16(1.25f), float_to_f16(3.0f)};
  auto net = make_net("layer { name: \"in\" type: \"Input\" top: \"x\" input_param { shape { dim: 1 dim: 2 } } }\n"
                      "layer { name: \"fc8\" type: \"InnerProduct\" bottom: \"x\" top: \"y\" "
                      "inner_product_param { num_output: 2 bias_term: false } }");
  write_safetensors(dir_.file("h.safetensors"), {{"fc8.weight", DType::kF16, {2, 2}, half.data()}}, {});
  load_pretrained(*net, dir_.file("h.safetensors"), {});
  EXPECT_EQ(param_values(*net, "fc8.weight"), (std::vector<float>{0.5f, -2.0f, 1.25f, 3.0f}));
}

}  // namespace
}  // namespace strata
