// Channels-last blobs (NetOptions::channels_last, framework/layout.h): the
// conversions between NCHW and NHWC, which blobs a net stores NHWC (those
// between layers that take it, grown from the convolutions; converted once
// at the borders), and that such a net computes what the NCHW net does: on
// the CPU the same bits in every storage dtype and memory layout, on a GPU
// (cuDNN's NHWC kernels) within the dtype's tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "framework/config/config.h"
#include "framework/dtype.h"
#include "framework/error.h"
#include "framework/layer_check.h"
#include "framework/layer_harness.h"
#include "framework/layer_registry.h"
#include "framework/layout.h"
#include "framework/net.h"
#include "framework/rng.h"
#include "framework/solver/solver_config.h"
#include "tests/solver_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// x -> conv1 (+relu1 in place) -> pool1 (MAX, overhanging windows) -> conv2
// (groups, stride 2) -> conv3 (dilated, no bias), read by conv4 (1x1) and by
// add (so a Split) -> add -> pool2 (AVE, padded) -> ip (NCHW alone) -> loss.
const char* kNet = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 3 dim: 3 dim: 11 dim: 11 } shape { dim: 3 dim: 5 } } }
layer { name: "conv1" type: "Convolution" bottom: "x" top: "c1" convolution_param { num_output: 6 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "relu1" type: "ReLU" bottom: "c1" top: "c1" }
layer { name: "pool1" type: "Pooling" bottom: "c1" top: "p1" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "p1" top: "c2" convolution_param { num_output: 8 kernel_size: 3 stride: 2 pad: 1 group: 2 weight_filler { type: "gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "conv3" type: "Convolution" bottom: "c2" top: "c3" convolution_param { num_output: 4 kernel_size: 2 pad: 1 dilation: 2 bias_term: false weight_filler { type: "gaussian" std: 0.4 } } }
layer { name: "conv4" type: "Convolution" bottom: "c3" top: "c4" convolution_param { num_output: 4 kernel_size: 1 weight_filler { type: "gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "add" type: "Eltwise" bottom: "c3" bottom: "c4" top: "s" }
layer { name: "pool2" type: "Pooling" bottom: "s" top: "p2" pooling_param { pool: AVE kernel_size: 2 stride: 2 pad: 1 } }
layer { name: "ip" type: "InnerProduct" bottom: "p2" top: "h" inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "y" top: "loss" }
)";

// A residual-free ResNet stem: conv -> BatchNorm -> Scale -> ReLU (all in
// place, Caffe's habit) -> conv -> BatchNorm -> global pooling -> ip.
const char* kBatchNormNet = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 4 dim: 3 dim: 8 dim: 8 } shape { dim: 4 dim: 3 } } }
layer { name: "conv1" type: "Convolution" bottom: "x" top: "c1" convolution_param { num_output: 6 kernel_size: 3 pad: 1 bias_term: false weight_filler { type: "gaussian" std: 0.4 } } }
layer { name: "bn1" type: "BatchNorm" bottom: "c1" top: "c1" }
layer { name: "scale1" type: "Scale" bottom: "c1" top: "c1" scale_param { bias_term: true filler { type: "gaussian" mean: 1 std: 0.2 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "relu1" type: "ReLU" bottom: "c1" top: "c1" }
layer { name: "conv2" type: "Convolution" bottom: "c1" top: "c2" convolution_param { num_output: 5 kernel_size: 3 stride: 2 weight_filler { type: "gaussian" std: 0.4 } } }
layer { name: "bn2" type: "BatchNorm" bottom: "c2" top: "b2" }
layer { name: "pool" type: "Pooling" bottom: "b2" top: "p" pooling_param { pool: AVE global_pooling: true } }
layer { name: "ip" type: "InnerProduct" bottom: "p" top: "h" inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "y" top: "loss" }
)";

NetOptions options(bool channels_last, DType storage, BlobMemory memory, Device device = Device::cpu()) {
  NetOptions o;
  o.channels_last = channels_last;
  o.storage_dtype = storage;
  o.blob_memory = memory;
  o.device = device;
  return o;
}

std::unique_ptr<Net> make_net(bool channels_last, DType storage = DType::kF32,
                              BlobMemory memory = BlobMemory::kByLifetimeChecked, Device device = Device::cpu(),
                              const char* text = kNet) {
  return std::make_unique<Net>(parse_config_text(text, "net.prototxt"), options(channels_last, storage, memory, device));
}

// A tensor's values as f32 on the host (any float dtype, any device).
std::vector<float> host_values(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  Tensor wide(host.shape());
  cast_into(wide, host);
  return test::values(wide);
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

struct Steps {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // every parameter's, each step
};

// Forward and backward of two steps from new inputs, the weights moved
// between them by plain SGD.
Steps run(Net& net) {
  Steps out;
  Rng rng(5);
  for (int step = 0; step < 2; ++step) {
    for (const char* in : {"x", "y"}) {
      Tensor host(net.blob(in).shape());
      for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = static_cast<float>(rng.uniform(-1, 1));
      net.blob(in).data.copy_from(host);
    }
    for (const NetParam& p : net.params()) p.blob->diff.fill(0.0f);
    out.losses.push_back(net.forward());
    net.backward();
    for (const NetParam& p : net.params()) {
      out.grads.push_back(host_values(p.blob->diff));
      Tensor w(p.blob->shape());
      std::vector<float> v = host_values(p.blob->data);
      for (size_t i = 0; i < v.size(); ++i) v[i] -= 0.1f * out.grads.back()[i];
      test::set_values(w, v);
      p.blob->data.copy_from(w.to(p.blob->data.device()));
    }
  }
  return out;
}

// The losses and every gradient of two runs, bit for bit.
void expect_same_bits(const Steps& a, const Steps& b) {
  EXPECT_EQ(bits(a.losses), bits(b.losses));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t k = 0; k < a.grads.size(); ++k) EXPECT_EQ(bits(a.grads[k]), bits(b.grads[k])) << "gradient " << k;
}

TEST(ConvertLayout, NhwcPutsTheChannelsLastInEveryDtype) {
  const int64_t N = 2, C = 3, H = 2, W = 4;
  Tensor nchw({N, C, H, W});
  for (int64_t i = 0; i < nchw.numel(); ++i) nchw.data<float>()[i] = static_cast<float>(i);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor nhwc({N, C, H, W}, dtype);
    convert_layout_into(nhwc, Layout::kNHWC, nchw, Layout::kNCHW);
    const std::vector<float> got = host_values(nhwc);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t p = 0; p < H * W; ++p) {
          // Small whole numbers: exact in every dtype.
          EXPECT_EQ(got[static_cast<size_t>((n * H * W + p) * C + c)], static_cast<float>((n * C + c) * H * W + p));
        }
      }
    }
    Tensor back({N, C, H, W});
    convert_layout_into(back, Layout::kNCHW, nhwc, Layout::kNHWC);
    EXPECT_EQ(test::values(back), test::values(nchw));
  }
  // Added into f32 (a KRSC weight gradient into the KCRS one).
  Tensor nhwc({N, C, H, W});
  convert_layout_into(nhwc, Layout::kNHWC, nchw, Layout::kNCHW);
  Tensor acc({N, C, H, W});
  acc.fill(1.0f);
  convert_layout_into(acc, Layout::kNCHW, nhwc, Layout::kNHWC, /*accumulate=*/true);
  for (int64_t i = 0; i < acc.numel(); ++i) EXPECT_EQ(acc.data<float>()[i], static_cast<float>(i) + 1.0f);
  // Rank 2: one order in both layouts; rounded as cast_into.
  Tensor rows({3, 4}), rounded({3, 4}, DType::kBF16);
  for (int64_t i = 0; i < rows.numel(); ++i) rows.data<float>()[i] = 1.0f + static_cast<float>(i) / 1024.0f;
  convert_layout_into(rounded, Layout::kNHWC, rows, Layout::kNCHW);
  for (int64_t i = 0; i < rows.numel(); ++i) {
    EXPECT_EQ(host_values(rounded)[static_cast<size_t>(i)], bf16_to_float(float_to_bf16(rows.data<float>()[i])));
  }
  // Counts that differ: a clear error.
  Tensor wrong({N, C, H, W + 1});
  const std::string msg = test::error_of<ShapeError>([&] { convert_layout_into(wrong, Layout::kNHWC, nchw, Layout::kNCHW); });
  EXPECT_CONTAINS(msg, "same element count");
}

TEST(ChannelsLast, TheBlobsBetweenTheConvolutionsAreNhwc) {
  auto net = make_net(true);
  auto nhwc = [&](const char* name) { return net->layout_of(net->blob(name)) == Layout::kNHWC; };
  for (const char* b : {"c1", "p1", "c2", "c3", "c4", "s"}) EXPECT_TRUE(nhwc(b)) << b;
  // The input, and what the InnerProduct (NCHW alone) reads.
  for (const char* b : {"x", "y", "p2", "h", "loss"}) EXPECT_FALSE(nhwc(b)) << b;
  auto call = [&](const char* layer) {
    for (int i = 0; i < net->num_layers(); ++i) {
      if (net->layer(i).name() == layer) return net->layer(i).call_layout();
    }
    ADD_FAILURE() << "no layer " << layer;
    return Layout::kNCHW;
  };
  for (const char* l : {"conv1", "relu1", "pool1", "conv2", "conv3", "conv4", "add", "pool2"}) {
    EXPECT_EQ(call(l), Layout::kNHWC) << l;
  }
  EXPECT_EQ(call("ip"), Layout::kNCHW);
  // 6 named blobs and the Split's two tops; conv1 reads x and pool2 writes
  // p2 in NCHW: the two borders.
  const StorageReport& r = net->storage_report();
  EXPECT_EQ(r.channels_last, 8) << r.str();
  EXPECT_EQ(r.layout_layers, 2) << r.str();
  EXPECT_CONTAINS(r.str(), "8 blob(s) stored channels-last (NHWC), 2 layer(s) at their borders converting");
  // A blob code outside the layers reads stays NCHW; the layers around it convert.
  net->keep_blobs({"c2"});
  EXPECT_FALSE(nhwc("c2"));
  EXPECT_TRUE(nhwc("p1"));
  EXPECT_EQ(net->storage_report().channels_last, 7);
  EXPECT_EQ(net->storage_report().layout_layers, 4) << net->storage_report().str();
  // Off (the default): none.
  auto off = make_net(false);
  for (const char* b : {"c1", "p1", "c2", "c3", "c4", "s"}) EXPECT_EQ(off->layout_of(off->blob(b)), Layout::kNCHW);
  EXPECT_EQ(off->storage_report().str(), "");
}

// No convolution: nothing runs faster channels-last, so nothing is stored so.
TEST(ChannelsLast, NothingWithoutAConvolution) {
  const char* text = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } shape { dim: 2 dim: 3 dim: 3 dim: 3 } } }
layer { name: "pool" type: "Pooling" bottom: "x" top: "p" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "relu" type: "ReLU" bottom: "p" top: "r" }
layer { name: "loss" type: "EuclideanLoss" bottom: "r" bottom: "y" top: "loss" }
)";
  Net net(parse_config_text(text, "net.prototxt"), options(true, DType::kF32, BlobMemory::kByLifetime));
  EXPECT_EQ(net.storage_report().channels_last, 0);
  EXPECT_EQ(net.layout_of(net.blob("p")), Layout::kNCHW);
}

// On the CPU the convolution gathers each chunk into NCHW and pooling each
// plane: the NCHW net's bits, in every storage dtype and memory layout.
TEST(ChannelsLast, OnTheCpuTheBitsOfTheNchwNet) {
  for (DType storage : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (BlobMemory memory : {BlobMemory::kSeparate, BlobMemory::kByLifetime, BlobMemory::kByLifetimeChecked}) {
      SCOPED_TRACE(std::string(dtype_name(storage)) + " memory " + std::to_string(static_cast<int>(memory)));
      auto on = make_net(true, storage, memory);
      auto off = make_net(false, storage, memory);
      ASSERT_EQ(on->storage_report().channels_last, 8);
      const Steps a = run(*on);
      const Steps b = run(*off);
      expect_same_bits(a, b);
      if (memory != BlobMemory::kSeparate) continue;
      // Every blob its own memory: c2 really is NHWC there, the same values.
      const Tensor& stored = on->blob("c2").data;
      Tensor as_nchw(stored.shape());
      convert_layout_into(as_nchw, Layout::kNCHW, stored, Layout::kNHWC);
      EXPECT_EQ(bits(test::values(as_nchw)), bits(host_values(off->blob("c2").data)));
      EXPECT_NE(bits(host_values(stored)), bits(host_values(off->blob("c2").data)));
    }
  }
}

// A recompute range across the NHWC blobs: its forward runs again in
// backward with the same conversions, the same bits.
TEST(ChannelsLast, ARecomputeRangeGivesTheNchwBits) {
  const std::string text = std::string(kNet) + R"(recompute { from: "conv2" to: "add" })";
  for (DType storage : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(storage));
    auto on = make_net(true, storage, BlobMemory::kByLifetimeChecked, Device::cpu(), text.c_str());
    auto off = make_net(false, storage, BlobMemory::kByLifetimeChecked, Device::cpu(), text.c_str());
    ASSERT_EQ(on->blob_plan().recomputed, off->blob_plan().recomputed);
    ASSERT_GT(on->blob_plan().recomputed, 0);
    const Steps a = run(*on);
    const Steps b = run(*off);
    expect_same_bits(a, b);
  }
}

// BatchNorm and Scale (over the channels) take NHWC as [N * H * W, C, 1]:
// the sums in the same order, so a ResNet-style stem is NHWC throughout and
// gives the NCHW bits.
TEST(ChannelsLast, BatchNormAndScaleKeepAStemNhwc) {
  for (DType storage : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(storage));
    auto on = make_net(true, storage, BlobMemory::kByLifetimeChecked, Device::cpu(), kBatchNormNet);
    auto off = make_net(false, storage, BlobMemory::kByLifetimeChecked, Device::cpu(), kBatchNormNet);
    for (const char* b : {"c1", "c2", "b2"}) EXPECT_EQ(on->layout_of(on->blob(b)), Layout::kNHWC) << b;
    EXPECT_EQ(on->layout_of(on->blob("p")), Layout::kNCHW);  // read by the InnerProduct
    // conv1 reads x, pool writes p: the two borders.
    EXPECT_EQ(on->storage_report().layout_layers, 2) << on->storage_report().str();
    const Steps a = run(*on);
    const Steps b = run(*off);
    expect_same_bits(a, b);
    // The running statistics too (BatchNorm's non-learnable parameters).
    for (size_t k = 0; k < on->params().size(); ++k) {
      EXPECT_EQ(bits(host_values(on->params()[k].blob->data)), bits(host_values(off->params()[k].blob->data)))
          << on->params()[k].name;
    }
  }
  // A Scale over more than the channels takes NCHW alone.
  std::string text = kBatchNormNet;
  const std::string scale_param = "scale_param { bias_term: true";
  text.replace(text.find(scale_param), scale_param.size(), "scale_param { axis: 1 num_axes: 2 bias_term: true");
  auto wide = make_net(true, DType::kF32, BlobMemory::kByLifetime, Device::cpu(), text.c_str());
  EXPECT_EQ(wide->layout_of(wide->blob("c1")), Layout::kNCHW);
  EXPECT_EQ(wide->layout_of(wide->blob("c2")), Layout::kNHWC);
}

// Every example of every layer that takes NHWC blobs, called NHWC against
// NCHW on the CPU (check_channels_last): the same bits, forward and
// backward. The list may grow, never shrink unnoticed.
TEST(ChannelsLast, EveryLayerThatTakesNhwcGivesItsNchwBits) {
  std::set<std::string> checked;
  const LayerRegistry& reg = LayerRegistry::instance();
  for (const std::string& type : reg.types()) {
    for (const LayerExample& ex : reg.find(type).schema().examples) {
      if (!example_takes_channels_last(type, ex)) continue;
      SCOPED_TRACE(describe_example(type, ex));
      for (const std::string& p : check_channels_last(type, ex)) ADD_FAILURE() << p;
      checked.insert(type);
    }
  }
  for (const char* type : {"BatchNorm", "BNLL", "Convolution", "Dropout", "Eltwise", "ELU", "Exp", "GELU", "Pooling",
                           "ReLU", "Scale", "Sigmoid", "Split", "TanH", "Threshold"}) {
    EXPECT_TRUE(checked.count(type)) << type << " no longer takes NHWC blobs (Layer::channels_last)";
  }
  for (const char* type : {"InnerProduct", "Concat", "LRN", "Softmax", "Flatten"}) {
    EXPECT_FALSE(checked.count(type)) << type << " reads its channels by position: NCHW alone";
  }
  // Dropout's examples draw no mask (TEST, ratio 0): one at TRAIN, whose
  // NHWC call keeps the NCHW call's elements.
  LayerExample drop;
  drop.config = "dropout_param { dropout_ratio: 0.5 }";
  drop.bottom_shapes = {{2, 3, 4, 5}};
  drop.phase = Phase::kTrain;
  for (const std::string& p : check_channels_last("Dropout", drop)) ADD_FAILURE() << p;
}

// y = x * (1 + channel) over [N, C, H, W]: it reads the channel by
// position, as if NCHW, yet declares that it takes NHWC.
class ChannelIndexingLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema() {
    LayerSchema s;
    s.summary = "test only: y = x * (1 + c), the channel taken from an NCHW position";
    s.examples = {layer_example("", {{2, 3, 2, 2}})};
    return s;
  }
  ChannelsLast channels_last() const override { return ChannelsLast::kTakes; }
  BackwardReads backward_reads() const override { return {false, false}; }
  void reshape(const BlobVec& bottom, const BlobVec& top) override { top[0]->reshape_like(*bottom[0]); }
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override {
    apply(bottom[0]->data.data<float>(), top[0]->data.data<float>(), bottom[0]->shape());
  }
  void backward_cpu(const BlobVec& top, const std::vector<bool>&, const BlobVec& bottom) override {
    apply(top[0]->diff.data<float>(), bottom[0]->diff.data<float>(), bottom[0]->shape());
  }

 private:
  static void apply(const float* x, float* y, const Shape& s) {
    const int64_t plane = s[2] * s[3];
    for (int64_t i = 0; i < s[0] * s[1] * plane; ++i) y[i] = x[i] * static_cast<float>(1 + (i / plane) % s[1]);
  }
};

TEST(ChannelsLast, TheCheckCatchesALayerThatReadsChannelsByPosition) {
  ScopedLayerRegistration reg(layer_registration<ChannelIndexingLayer>("TestOnlyChannelIndexing"));
  const LayerExample ex = ChannelIndexingLayer::schema().examples[0];
  EXPECT_TRUE(example_takes_channels_last("TestOnlyChannelIndexing", ex));
  const std::vector<std::string> problems = check_channels_last("TestOnlyChannelIndexing", ex);
  ASSERT_FALSE(problems.empty());
  EXPECT_CONTAINS(problems[0], "top 0 element");
  bool named_gradient = false;
  for (const std::string& p : problems) named_gradient |= p.find("bottom 0 gradient") != std::string::npos;
  EXPECT_TRUE(named_gradient);
  // One that takes NCHW alone is named as such.
  LayerExample ip;
  ip.config = "inner_product_param { num_output: 2 }";
  ip.bottom_shapes = {{2, 3, 2, 2}};
  const std::vector<std::string> p = check_channels_last("InnerProduct", ip);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_CONTAINS(p[0], "does not take channels-last");
}

TEST(ChannelsLast, TheSolverKey) {
  EXPECT_FALSE(solver_test::parse_solver("net: \"n\" base_lr: 0.1").channels_last);
  EXPECT_TRUE(solver_test::parse_solver("net: \"n\" base_lr: 0.1 channels_last: true").channels_last);
}

#ifdef STRATA_WITH_CUDA
// One layer on a GPU in NHWC against the same layer on the CPU in NHWC
// (whose bits are NCHW's, above), in each dtype: the top, the bottom's
// gradient and the parameters' gradients.
void expect_gpu_nhwc_matches_cpu(const std::string& type, const std::string& config, const Shape& in, bool exact) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(type + " " + dtype_name(dtype));
    LayerHarness h = make_harness(type, config, {in}, Phase::kTrain, 7);
    h.layer->set_call_layout(Layout::kNHWC);
    Rng rng(11);
    for (Blob* b : h.bottom) {
      for (int64_t i = 0; i < b->numel(); ++i) b->data.data<float>()[i] = static_cast<float>(rng.uniform(-1, 1));
    }
    store_blobs_as(h, dtype);  // the twin's blobs take the same dtypes
    h.setup();
    CudaTwin g = make_cuda_twin(type, config, Phase::kTrain, 7, h, Device::cuda(0));
    g.layer->set_call_layout(Layout::kNHWC);
    g.setup_from(h);
    h.forward();
    g.forward();
    Tensor dy(h.top[0]->shape());
    for (int64_t i = 0; i < dy.numel(); ++i) dy.data<float>()[i] = static_cast<float>(rng.uniform(-1, 1));
    cast_into(h.top[0]->diff, dy);
    g.top[0]->diff.copy_from(h.top[0]->diff);
    for (const LayerParam& p : h.layer->params()) p.blob->diff.fill(0.0f);
    for (const LayerParam& p : g.layer->params()) p.blob->diff.fill(0.0f);
    h.backward({true});
    g.backward({true});
    const float tol = exact ? 0.0f : dtype == DType::kF32 ? 1e-3f : dtype == DType::kF16 ? 1e-2f : 4e-2f;
    auto expect = [&](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
      ASSERT_EQ(got.size(), want.size()) << what;
      float scale = 1e-3f;
      for (float w : want) scale = std::max(scale, std::fabs(w));
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * scale) << what << " at " << i;
    };
    expect(host_values(g.top[0]->data), host_values(h.top[0]->data), "top");
    expect(host_values(g.bottom[0]->diff), host_values(h.bottom[0]->diff), "bottom gradient");
    for (size_t p = 0; p < h.layer->params().size(); ++p) {
      expect(host_values(g.layer->params()[p].blob->diff), host_values(h.layer->params()[p].blob->diff), "param gradient");
    }
  }
}

// Every example of every layer that takes NHWC blobs and has CUDA code,
// called NHWC on a GPU against NHWC on the CPU (whose bits are NCHW's, see
// EveryLayerThatTakesNhwcGivesItsNchwBits), in FP32 math: the tops, the
// bottom gradients and the parameter gradients within the CPU-vs-CUDA
// check's tolerance.
TEST(ChannelsLast, OnAGpuEveryLayerThatTakesNhwcMatchesTheCpu) {
  STRATA_SKIP_WITHOUT_GPU("the layers' NHWC paths on a GPU are compiled, not run");
  const LayerRegistry& reg = LayerRegistry::instance();
  int checked = 0;
  for (const std::string& type : reg.types()) {
    if (!cuda_check_unavailable(type).empty()) continue;
    for (const LayerExample& ex : reg.find(type).schema().examples) {
      if (!example_takes_channels_last(type, ex)) continue;
      SCOPED_TRACE(describe_example(type, ex));
      LayerHarness h = make_harness(type, ex, kLayerCheckSeed);
      h.layer->set_call_layout(Layout::kNHWC);
      for (Blob* b : h.bottom) {
        Tensor nhwc(b->shape());
        convert_layout_into(nhwc, Layout::kNHWC, b->data, Layout::kNCHW);
        b->data.copy_from(nhwc);
      }
      h.setup();
      CudaTwin g = make_cuda_twin(type, ex.config, ex.phase, kLayerCheckSeed, h, Device::cuda(0));
      g.layer->set_call_layout(Layout::kNHWC);
      g.setup_from(h);
      h.forward();
      g.forward();
      std::vector<std::string> problems;
      for (size_t k = 0; k < h.top.size(); ++k) {
        compare_values(problems, "top " + std::to_string(k), "CPU", to_vector(h.top[k]->data), "CUDA",
                       widened(g.top[k]->data), kCudaCheckFp32Tolerance);
      }
      Rng rng(kLayerCheckSeed + 1);
      const std::vector<std::vector<float>> w = top_weights(h, rng);
      for (size_t k = 0; k < h.top.size(); ++k) {
        h.top[k]->diff.resize(h.top[k]->shape());
        copy_into(h.top[k]->diff, w[k]);
        g.top[k]->diff.copy_from(h.top[k]->diff);
      }
      for (const LayerParam& p : h.layer->params()) p.blob->diff.fill(0.0f);
      for (const LayerParam& p : g.layer->params()) p.blob->diff.fill(0.0f);
      const std::vector<bool> pd = gradient_targets(h, ex);
      h.backward(pd);
      g.backward(pd);
      for (size_t i = 0; i < h.bottom.size(); ++i) {
        if (!pd[i]) continue;
        compare_values(problems, "bottom " + std::to_string(i) + " gradient", "CPU", to_vector(h.bottom[i]->diff),
                       "CUDA", widened(g.bottom[i]->diff), kCudaCheckFp32Tolerance);
      }
      for (size_t p = 0; p < h.layer->params().size(); ++p) {
        compare_values(problems, "param " + std::to_string(p) + " gradient", "CPU",
                       to_vector(h.layer->params()[p].blob->diff), "CUDA",
                       widened(g.layer->params()[p].blob->diff), kCudaCheckFp32Tolerance);
      }
      for (const std::string& p : problems) ADD_FAILURE() << p;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(ChannelsLast, OnAGpuPoolingAndConvolutionInNhwcMatchTheCpu) {
  STRATA_SKIP_WITHOUT_GPU("the NHWC pooling kernels and cuDNN's NHWC convolutions are compiled, not run");
  // Pooling: the CPU's windows and sums, the same bits.
  expect_gpu_nhwc_matches_cpu("Pooling", "pooling_param { pool: MAX kernel_size: 3 stride: 2 }", {2, 5, 9, 7}, true);
  expect_gpu_nhwc_matches_cpu("Pooling", "pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }", {2, 5, 9, 7},
                              true);
  // Convolution: cuDNN's sums, within each dtype's rounding.
  expect_gpu_nhwc_matches_cpu("Convolution",
                              "convolution_param { num_output: 8 kernel_size: 3 pad: 1 stride: 2 group: 2 "
                              "weight_filler { type: \"gaussian\" std: 0.3 } bias_filler { type: \"gaussian\" std: 0.2 } }",
                              {2, 4, 9, 7}, false);
}

// cuDNN's NHWC convolutions (KRSC weight copy, its gradient turned back),
// the pooling kernels over NHWC and the bias kernels over rows of channels:
// the NCHW net on the same GPU within each dtype's rounding (other cuDNN
// algorithms, so not the same bits), and the conversions the CPU's bits.
TEST(ChannelsLast, OnAGpuTheNchwNetWithinTheDtypesRounding) {
  STRATA_SKIP_WITHOUT_GPU("cuDNN's NHWC convolutions, the NHWC pooling and bias kernels are compiled, not run");
  for (const char* text : {kNet, kBatchNormNet}) {
  for (DType storage : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(dtype_name(storage)) + (text == kNet ? "" : " batch norm net"));
    const float tol = storage == DType::kF32 ? 2e-3f : storage == DType::kF16 ? 2e-2f : 6e-2f;
    auto on = make_net(true, storage, BlobMemory::kByLifetimeChecked, Device::cuda(0), text);
    auto off = make_net(false, storage, BlobMemory::kByLifetimeChecked, Device::cuda(0), text);
    ASSERT_GT(on->storage_report().channels_last, 0);
    const Steps a = run(*on);
    const Steps b = run(*off);
    test::expect_near(a.losses, b.losses, tol);
    ASSERT_EQ(a.grads.size(), b.grads.size());
    for (size_t k = 0; k < a.grads.size(); ++k) {
      SCOPED_TRACE("gradient " + std::to_string(k));
      float scale = 0.0f;
      for (float g : b.grads[k]) scale = std::max(scale, std::fabs(g));
      for (size_t i = 0; i < a.grads[k].size(); ++i) EXPECT_NEAR(a.grads[k][i], b.grads[k][i], tol * std::max(scale, 1e-3f));
    }
  }
  }
}

// A TEST net that runs backward (force_backward: true): the convolution's
// backward scratch (its weight gradient in KRSC, the bias gradient's slab
// sums) is carved in TEST too.
TEST(ChannelsLast, OnAGpuATestNetWithForceBackwardRunsItsBackward) {
  STRATA_SKIP_WITHOUT_GPU("cuDNN's NHWC backward in a TEST net is compiled, not run");
  const std::string text = std::string("force_backward: true\n") + kNet;
  Steps results[2];
  for (bool channels_last : {true, false}) {
    NetOptions o = options(channels_last, DType::kBF16, BlobMemory::kByLifetime, Device::cuda(0));
    o.phase = Phase::kTest;
    Net net(parse_config_text(text, "net.prototxt"), o);
    results[channels_last ? 0 : 1] = run(net);
  }
  ASSERT_EQ(results[0].grads.size(), results[1].grads.size());
  for (size_t k = 0; k < results[0].grads.size(); ++k) {
    float scale = 1e-3f;
    for (float g : results[1].grads[k]) scale = std::max(scale, std::fabs(g));
    for (size_t i = 0; i < results[0].grads[k].size(); ++i) {
      EXPECT_NEAR(results[0].grads[k][i], results[1].grads[k][i], 6e-2f * scale) << "gradient " << k << " at " << i;
    }
  }
}

TEST(ConvertLayout, OnAGpuTheCpuBits) {
  STRATA_SKIP_WITHOUT_GPU("the layout transpose kernel is compiled, not run");
  Rng rng(9);
  // Not multiples of the 32x32 tiles, and more than one tile each way.
  Tensor nchw({3, 37, 5, 9});
  for (int64_t i = 0; i < nchw.numel(); ++i) nchw.data<float>()[i] = static_cast<float>(rng.uniform(-3, 3));
  const Tensor on_gpu = nchw.to(Device::cuda(0));
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor cpu({3, 37, 5, 9}, dtype), gpu({3, 37, 5, 9}, dtype, Device::cuda(0));
    convert_layout_into(cpu, Layout::kNHWC, nchw, Layout::kNCHW);
    convert_layout_into(gpu, Layout::kNHWC, on_gpu, Layout::kNCHW);
    EXPECT_EQ(bits(host_values(gpu)), bits(host_values(cpu)));
    Tensor back_cpu({3, 37, 5, 9}), back_gpu({3, 37, 5, 9}, DType::kF32, Device::cuda(0));
    back_cpu.fill(0.5f);
    back_gpu.fill(0.5f);
    convert_layout_into(back_cpu, Layout::kNCHW, cpu, Layout::kNHWC, /*accumulate=*/true);
    convert_layout_into(back_gpu, Layout::kNCHW, gpu, Layout::kNHWC, /*accumulate=*/true);
    EXPECT_EQ(bits(host_values(back_gpu)), bits(host_values(back_cpu)));
  }
  // Both ways for 3 channels (an RGB image: the element-by-element kernel)
  // and for 8 channels of more than 65535 row tiles of H * W pixels (NHWC ->
  // NCHW: rows are the pixels; the tiled kernel steps over them).
  for (const Shape& shape : {Shape{2, 3, 17, 23}, Shape{1, 8, 1460, 1460}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor x(shape);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 1000);
    const Tensor gx = x.to(Device::cuda(0));
    for (Layout from : {Layout::kNCHW, Layout::kNHWC}) {
      const Layout to = from == Layout::kNCHW ? Layout::kNHWC : Layout::kNCHW;
      Tensor cpu(shape), gpu(shape, DType::kF32, Device::cuda(0));
      convert_layout_into(cpu, to, x, from);
      convert_layout_into(gpu, to, gx, from);
      EXPECT_EQ(bits(host_values(gpu)), bits(host_values(cpu)));
    }
  }
}

#endif  // STRATA_WITH_CUDA

}  // namespace
}  // namespace strata
