// Caffe's .caffemodel weights (transfer/caffemodel.h): files written here
// with the wire encoder as Caffe writes them (V2 `layer` entries with shape
// fields, V1 `layers` entries with num/channels/height/width), loaded by
// layer name into a net, checked value by value and by the net's output
// against the same weights set by hand; `strata convert`'s tensors; damage.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "framework/caffe/caffe_proto.h"
#include "framework/error.h"
#include "framework/caffe/protobuf_wire.h"
#include "framework/io/safetensors.h"
#include "framework/net.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"
#include "transfer/caffemodel.h"
#include "transfer/pretrained.h"

namespace strata {
namespace {

using protobuf::WireWriter;
using test::error_of;
using test::make_net;

const char* const kNet = R"(
  name: "tiny"
  layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 1 dim: 4 dim: 4 } } }
  layer { name: "conv1" type: "Convolution" bottom: "x" top: "c"
          convolution_param { num_output: 2 kernel_size: 3 } }
  layer { name: "bn" type: "BatchNorm" bottom: "c" top: "c" }
  layer { name: "sc" type: "Scale" bottom: "c" top: "c" scale_param { bias_term: true } }
  layer { name: "fc" type: "InnerProduct" bottom: "c" top: "y" inner_product_param { num_output: 3 } }
)";

std::vector<float> ramp(int64_t n, float start, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + step * static_cast<float>(i);
  return v;
}

caffe::BlobProto blob(const Shape& shape, std::vector<float> data, caffe::BlobShapeStyle style) {
  caffe::BlobProto b;
  b.shape = shape;
  b.data = std::move(data);
  b.style = style;
  return b;
}

// LayerParameter { name=1 type=2 blobs=7 } inside NetParameter.layer=100.
void add_layer(WireWriter& net, const std::string& name, const std::string& type,
               const std::vector<caffe::BlobProto>& blobs) {
  WireWriter l;
  l.put_bytes(1, name);
  l.put_bytes(2, type);
  for (const auto& b : blobs) l.put_bytes(7, caffe::serialize_blob_proto(b));
  net.put_message(100, l);
}

// V1LayerParameter { name=4 type=5 (enum) blobs=6 } inside NetParameter.layers=2.
void add_v1_layer(WireWriter& net, const std::string& name, int type, const std::vector<caffe::BlobProto>& blobs) {
  WireWriter l;
  l.put_bytes(4, name);
  l.put_varint(5, static_cast<uint64_t>(type));
  for (const auto& b : blobs) l.put_bytes(6, caffe::serialize_blob_proto(b));
  net.put_message(2, l);
}

struct Weights {
  std::vector<float> conv_w = ramp(18, -0.4f, 0.05f), conv_b = {0.1f, -0.2f};
  std::vector<float> mean = {0.3f, -0.1f}, var = {1.5f, 0.5f};
  float factor = 4.0f;  // Caffe's running sums are the statistics times this
  std::vector<float> scale = {1.25f, 0.75f}, shift = {0.05f, -0.05f};
  std::vector<float> fc_w = ramp(24, 0.2f, -0.02f), fc_b = {0.01f, 0.02f, 0.03f};
};

std::string caffemodel_bytes(const Weights& w) {
  using caffe::BlobShapeStyle;
  WireWriter net;
  net.put_bytes(1, "tiny");
  // conv1 and fc as a V1 file holds them: 4-D legacy shapes.
  add_v1_layer(net, "conv1", 4,
               {blob({2, 1, 3, 3}, w.conv_w, BlobShapeStyle::kLegacy), blob({2}, w.conv_b, BlobShapeStyle::kLegacy)});
  std::vector<float> m, v;
  for (float x : w.mean) m.push_back(x * w.factor);
  for (float x : w.var) v.push_back(x * w.factor);
  add_layer(net, "bn", "BatchNorm",
            {blob({2}, m, BlobShapeStyle::kShape), blob({2}, v, BlobShapeStyle::kShape),
             blob({1}, {w.factor}, BlobShapeStyle::kShape)});
  add_layer(net, "sc", "Scale", {blob({2}, w.scale, BlobShapeStyle::kShape), blob({2}, w.shift, BlobShapeStyle::kShape)});
  add_layer(net, "fc", "InnerProduct",
            {blob({3, 8}, w.fc_w, BlobShapeStyle::kLegacy), blob({3}, w.fc_b, BlobShapeStyle::kShape)});
  add_layer(net, "old_head", "InnerProduct", {blob({1, 1}, {9.0f}, BlobShapeStyle::kShape)});
  return net.str();
}

void set_param(Net& net, const std::string& name, const std::vector<float>& v) {
  const int id = net.param_index(name);
  ASSERT_GE(id, 0) << name;
  Tensor& t = net.params()[static_cast<size_t>(id)].blob->data;
  ASSERT_EQ(t.numel(), static_cast<int64_t>(v.size())) << name;
  test::set_values(t, v);
}

std::vector<float> param(Net& net, const std::string& name) {
  return test::values(net.params()[static_cast<size_t>(net.param_index(name))].blob->data);
}

TEST(Caffemodel, LoadsByLayerNameAndGivesTheExpectedOutputs) {
  test::TempDir dir("caffemodel");
  const Weights w;
  test::write_text(dir.file("tiny.caffemodel"), caffemodel_bytes(w));

  auto loaded = make_net(kNet, Phase::kTest);
  const LoadReport report = transfer::load_pretrained(*loaded, dir.file("tiny.caffemodel"), {});
  EXPECT_EQ(report.loaded.size(), 8u) << report.str();
  EXPECT_TRUE(report.missing.empty()) << report.str();
  ASSERT_EQ(report.unexpected.size(), 1u) << report.str();
  EXPECT_NE(report.unexpected[0].find("old_head.weight (no layer 'old_head' in the net)"), std::string::npos);
  EXPECT_EQ(param(*loaded, "bn.running_mean"), w.mean);
  EXPECT_EQ(param(*loaded, "bn.running_var"), w.var);
  EXPECT_EQ(param(*loaded, "fc.weight"), w.fc_w);

  auto by_hand = make_net(kNet, Phase::kTest, 7);
  set_param(*by_hand, "conv1.weight", w.conv_w);
  set_param(*by_hand, "conv1.bias", w.conv_b);
  set_param(*by_hand, "bn.running_mean", w.mean);
  set_param(*by_hand, "bn.running_var", w.var);
  set_param(*by_hand, "sc.weight", w.scale);
  set_param(*by_hand, "sc.bias", w.shift);
  set_param(*by_hand, "fc.weight", w.fc_w);
  set_param(*by_hand, "fc.bias", w.fc_b);
  const std::vector<float> x = ramp(32, -1.0f, 0.0625f);
  test::set_values(loaded->blob("x").data, x);
  test::set_values(by_hand->blob("x").data, x);
  loaded->forward();
  by_hand->forward();
  const std::vector<float> got = test::values(loaded->blob("y").data);
  EXPECT_EQ(got, test::values(by_hand->blob("y").data));

  // One output worked out from Caffe's definitions, for sample 0 and class 0.
  std::vector<float> c(8);
  for (int o = 0; o < 2; ++o) {
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        double s = w.conv_b[o];
        for (int ki = 0; ki < 3; ++ki)
          for (int kj = 0; kj < 3; ++kj) s += w.conv_w[o * 9 + ki * 3 + kj] * x[(i + ki) * 4 + j + kj];
        const double bn = (s - w.mean[o]) / std::sqrt(w.var[o] + 1e-5);
        c[o * 4 + i * 2 + j] = static_cast<float>(bn * w.scale[o] + w.shift[o]);
      }
    }
  }
  double y0 = w.fc_b[0];
  for (int k = 0; k < 8; ++k) y0 += w.fc_w[k] * c[k];
  EXPECT_NEAR(got[0], y0, 1e-4);
}

TEST(Caffemodel, ConvertWritesNamedTensorsInNaturalShapes) {
  test::TempDir dir("caffemodel");
  test::write_text(dir.file("tiny.caffemodel"), caffemodel_bytes(Weights()));
  EXPECT_EQ(transfer::convert_caffemodel(dir.file("tiny.caffemodel"), dir.file("tiny.safetensors")), 9u);
  const SafetensorsReader r(dir.file("tiny.safetensors"));
  std::map<std::string, Shape> shapes;
  for (const TensorView& t : r.tensors()) shapes[t.name] = t.shape;
  EXPECT_EQ(shapes["conv1.weight"], (Shape{2, 1, 3, 3}));
  EXPECT_EQ(shapes["conv1.bias"], (Shape{2}));
  EXPECT_EQ(shapes["fc.weight"], (Shape{3, 8}));
  EXPECT_EQ(shapes["bn.running_var"], (Shape{2}));
  EXPECT_EQ(shapes.count("bn.blob2"), 0u);
  EXPECT_EQ(r.metadata().at("caffe_net"), "tiny");

  // The converted file loads as strata weights into the same net.
  auto net = make_net(kNet, Phase::kTest);
  const LoadReport report = transfer::load_pretrained(*net, dir.file("tiny.safetensors"), {});
  EXPECT_EQ(report.loaded.size(), 8u) << report.str();
}

TEST(Caffemodel, DamagedAndForeignFilesAreNamed) {
  test::TempDir dir("caffemodel");
  std::string bytes = caffemodel_bytes(Weights());
  test::write_text(dir.file("cut.caffemodel"), bytes.substr(0, bytes.size() / 2));
  auto net = make_net(kNet, Phase::kTest);
  std::string msg = error_of<IoError>([&] { transfer::load_pretrained(*net, dir.file("cut.caffemodel"), {}); });
  EXPECT_NE(msg.find(dir.file("cut.caffemodel")), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed protobuf at byte"), std::string::npos) << msg;

  WireWriter other;
  add_layer(other, "something_else", "InnerProduct",
            {blob({2}, {1, 2}, caffe::BlobShapeStyle::kShape)});
  test::write_text(dir.file("other.caffemodel"), other.str());
  msg = error_of<IoError>([&] { transfer::load_pretrained(*net, dir.file("other.caffemodel"), {}); });
  EXPECT_NE(msg.find("matched by layer name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("something_else"), std::string::npos) << msg;

  // Another number of classes: the usual advice to re-initialise the head.
  auto wide = make_net(std::string(kNet).replace(std::string(kNet).find("num_output: 3"), 13, "num_output: 5"),
                       Phase::kTest);
  test::write_text(dir.file("tiny.caffemodel"), caffemodel_bytes(Weights()));
  msg = error_of<ShapeError>([&] { transfer::load_pretrained(*wide, dir.file("tiny.caffemodel"), {}); });
  EXPECT_NE(msg.find("fc.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--reinit"), std::string::npos) << msg;
  transfer::PretrainedOptions reinit;
  reinit.reinit = {"fc"};
  const LoadReport report = transfer::load_pretrained(*wide, dir.file("tiny.caffemodel"), reinit);
  EXPECT_EQ(report.loaded.size(), 6u) << report.str();
}

}  // namespace
}  // namespace strata
