// Layer scratch (framework/scratch.h): the carver's layout, the shared
// buffer, each layer call's place in the net's arena by step under a plan by
// lifetime (a buffer per layer under SEPARATE), training that gives the same
// bits with it as with a buffer per layer, and the checked mode that poisons
// a call's scratch before the call, catching a layer that keeps something in
// scratch from forward to backward.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/cpu/threads.h"
#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/net.h"
#include "framework/scratch.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "layers/convolution/convolution.h"
#include "tests/test_util.h"
#include "tests/train_util.h"

namespace strata {
namespace {

// -------------------------------------------------------------- carver ----

TEST(ScratchCarver, CountingAndCarvingLayOutTheSameAlignedDisjointTensors) {
  const std::vector<Shape> shapes = {{3}, {5, 7}, {0}, {1}, {16, 16}};
  ScratchCarver count_once;
  for (const Shape& s : shapes) EXPECT_EQ(count_once.take(s).numel(), 0);  // counting hands out nothing
  // 3 floats at 0, 35 at 64, none, 1 at 256, 256 at 320: 1344 bytes.
  EXPECT_EQ(count_once.bytes(), size_t{320 + 256 * 4});

  const Tensor block({static_cast<int64_t>(count_once.bytes())}, DType::kU8);
  ScratchCarver carver(block);
  std::vector<Tensor> taken;
  for (const Shape& s : shapes) taken.push_back(carver.take(s));
  EXPECT_EQ(carver.bytes(), count_once.bytes());
  const char* base = static_cast<const char*>(block.raw_data());
  for (size_t i = 0; i < taken.size(); ++i) {
    EXPECT_EQ(taken[i].shape(), shapes[i]);
    if (taken[i].numel() == 0) continue;
    EXPECT_TRUE(taken[i].shares_storage_with(block));
    const size_t offset = static_cast<size_t>(static_cast<const char*>(taken[i].raw_data()) - base);
    EXPECT_EQ(offset % ScratchCarver::kAlignment, 0u) << "tensor " << i;
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(taken[i].shares_storage_with(taken[j])) << i << " and " << j;
  }
}

TEST(ScratchCarver, ABlockTooSmallForTheLayoutIsAShapeError) {
  const Tensor block({100}, DType::kU8);
  ScratchCarver carver(block);
  carver.take({10});  // 40 bytes
  const std::string msg = test::error_of<ShapeError>([&] { carver.take({10}); });
  EXPECT_CONTAINS(msg, "scratch of 100 B is too small: the layout needs at least 104 B");
}

TEST(SharedScratch, GrowsToTheLargestRequestAndPoisonsWhenChecked) {
  SharedScratch s(Device::cpu());
  s.reserve(64);
  EXPECT_EQ(s.bytes(), 64u);
  s.reserve(32);  // never shrinks
  EXPECT_EQ(s.bytes(), 64u);
  const Tensor& a = s.get(256);
  EXPECT_EQ(a.nbytes(), 256u);
  const void* first = s.storage_id();
  s.get(128);
  EXPECT_EQ(s.storage_id(), first);  // big enough: the same buffer
  s.set_poison(true);
  const Tensor& b = s.get(16);
  const float* f = static_cast<const float*>(b.raw_data());
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(std::isnan(f[i])) << i;
}

// ----------------------------------------------------------------- nets ----

struct ThreadsFor {
  explicit ThreadsFor(int n) : saved(num_threads()) { set_num_threads(n); }
  ~ThreadsFor() { set_num_threads(saved); }
  int saved;
};

// Three convolutions of different sizes, each with its own scratch, run
// forward and backward.
const char* kNet = R"(
force_backward: true
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 dim: 16 dim: 16 } } }
layer { name: "conv1" type: "Convolution" bottom: "x" top: "c1" convolution_param { num_output: 16 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
layer { name: "conv2" type: "Convolution" bottom: "c1" top: "c2" convolution_param { num_output: 32 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
layer { name: "conv3" type: "Convolution" bottom: "c2" top: "c3" convolution_param { num_output: 8 kernel_size: 3 stride: 2 weight_filler { type: "xavier" } } }
)";

std::unique_ptr<Net> make_net(const std::string& text, BlobMemory memory) {
  NetOptions o;
  o.blob_memory = memory;
  return std::make_unique<Net>(parse_config_text(text, "net.prototxt"), o);
}

size_t largest_scratch(const Net& net, size_t* sum = nullptr) {
  size_t most = 0;
  for (int i = 0; i < net.num_layers(); ++i) {
    most = std::max(most, net.layer(i).scratch_bytes());
    if (sum) *sum += net.layer(i).scratch_bytes();
  }
  return most;
}

TEST(NetScratch, EveryCallHasAPlaceInTheArenaAtItsStep) {
  const ThreadsFor threads(2);
  const auto planned = make_net(kNet, BlobMemory::kByLifetime);
  size_t sum = 0;
  const size_t most = largest_scratch(*planned, &sum);
  ASSERT_GT(most, 0u);
  EXPECT_LT(most, sum);
  // Three convolutions, each a forward and a backward (their weights learn).
  EXPECT_EQ(planned->blob_plan().scratch_calls, 6);
  EXPECT_EQ(planned->blob_plan().scratch_bytes, most);
  EXPECT_CONTAINS(planned->blob_plan().str(), "the scratch of 6 layer call(s) placed by step");
  // No shared buffer beside the arena: every call runs in its place.
  EXPECT_EQ(planned->memory_report().workspace_bytes, 0u);
  planned->forward_backward();
  planned->forward_backward();
  EXPECT_EQ(planned->memory_report().workspace_bytes, 0u);
  // SEPARATE: a buffer per layer, as before; the same layer data.
  const auto separate = make_net(kNet, BlobMemory::kSeparate);
  EXPECT_EQ(separate->memory_report().workspace_bytes, sum);
  EXPECT_EQ(separate->blob_plan().scratch_calls, 0);
  EXPECT_EQ(planned->memory_report().layer_bytes, separate->memory_report().layer_bytes);
  EXPECT_CONTAINS(separate->memory_report().str(), ", workspace ");
}

TEST(NetScratch, ALargerBatchPlansTheScratchAgain) {
  const auto net = make_net(kNet, BlobMemory::kByLifetime);
  const size_t before = net->blob_plan().scratch_bytes;
  const size_t arena_before = net->blob_plan().arena_bytes;
  net->blob("x").resize({4, 3, 32, 32});
  net->reshape();
  const size_t most = largest_scratch(*net);
  EXPECT_GT(most, before);
  EXPECT_EQ(net->blob_plan().scratch_bytes, most);
  EXPECT_GT(net->blob_plan().arena_bytes, arena_before);
  net->forward_backward();
  EXPECT_EQ(net->memory_report().workspace_bytes, 0u);  // no call outgrew its place
}

// Copies its input, and declares (and takes, in forward and backward) a
// scratch of g_taker_bytes that it fills.
size_t g_taker_bytes = 0;

class ScratchTakerLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema() { return {}; }
  size_t scratch_bytes() const override { return g_taker_bytes; }
  void reshape(const BlobVec& bottom, const BlobVec& top) override { top[0]->reshape_like(*bottom[0]); }
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override {
    fill_scratch();
    top[0]->data.copy_from(bottom[0]->data);
  }
  void backward_cpu(const BlobVec& top, const std::vector<bool>&, const BlobVec& bottom) override {
    fill_scratch();
    bottom[0]->diff.copy_from(top[0]->diff);
  }

 private:
  void fill_scratch() {
    if (g_taker_bytes == 0) return;
    ScratchCarver carver(scratch(g_taker_bytes));
    carver.take({static_cast<int64_t>(g_taker_bytes / sizeof(float))}).fill(7.0f);
  }
};

// The taker's calls are the first forward after the input and the last
// backward, when only the small `a` (and its gradient) is alive; the two
// 512 KiB values b and c live in between.
const char* kTakerNet = R"(
force_backward: true
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 16 } } }
layer { name: "take" type: "ScratchTakerForTest" bottom: "x" top: "a" }
layer { name: "ip1" type: "InnerProduct" bottom: "a" top: "b" inner_product_param { num_output: 65536 weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "relu" type: "ReLU" bottom: "b" top: "c" }
layer { name: "ip2" type: "InnerProduct" bottom: "c" top: "d" inner_product_param { num_output: 1 weight_filler { type: "gaussian" std: 0.01 } } }
)";

struct TakerBytes {
  explicit TakerBytes(size_t b) { g_taker_bytes = b; }
  ~TakerBytes() { g_taker_bytes = 0; }
};

TEST(NetScratch, AScratchTakesTheBytesFreeAtItsStep) {
  ScopedLayerRegistration reg(layer_registration<ScratchTakerLayer>("ScratchTakerForTest"));
  size_t without = 0;
  {
    const TakerBytes none(0);
    without = make_net(kTakerNet, BlobMemory::kByLifetime)->blob_plan().arena_bytes;
  }
  // b and c (512 KiB each) are alive together at ReLU's steps; a scratch
  // that fits under them at the taker's steps costs nothing.
  ASSERT_GE(without, size_t{2} * 2 * 65536 * 4);
  {
    const TakerBytes fits(256 << 10);
    const auto net = make_net(kTakerNet, BlobMemory::kByLifetime);
    EXPECT_EQ(net->blob_plan().arena_bytes, without);
    EXPECT_EQ(net->blob_plan().scratch_calls, 2);
    net->forward_backward();
    EXPECT_EQ(net->memory_report().workspace_bytes, 0u);
  }
  // One larger than everything else: the arena grows by less than it (the
  // values alive beside it are small), where a buffer beside the arena
  // would have added all of it.
  {
    const size_t big = size_t{4} << 20;
    const TakerBytes large(big);
    const auto net = make_net(kTakerNet, BlobMemory::kByLifetime);
    EXPECT_GE(net->blob_plan().arena_bytes, big);
    EXPECT_LT(net->blob_plan().arena_bytes, without + big);
    EXPECT_LE(net->blob_plan().arena_bytes, big + 64 * 1024);
    EXPECT_EQ(net->blob_plan().peak_scratch, big);
    EXPECT_CONTAINS(net->blob_plan().str(), "at the busiest step, ");
  }
}

// -------------------------------------------------------------- training ----

SolverConfig solver_config(const std::string& memory, int test_batch = 3) {
  const std::string tb = std::to_string(test_batch);
  const std::string text = R"(
net_param {
  layer { name: "data" type: "DummyData" top: "data" top: "label" include { phase: TRAIN }
          dummy_data_param { shape { dim: 6 dim: 2 dim: 12 dim: 12 } shape { dim: 6 }
                             data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 3 } } }
  layer { name: "data" type: "DummyData" top: "data" top: "label" include { phase: TEST }
          dummy_data_param { shape { dim: )" + tb + R"( dim: 2 dim: 12 dim: 12 } shape { dim: )" + tb + R"( }
                             data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
  layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
          convolution_param { num_output: 16 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
  layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
  layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
          convolution_param { num_output: 16 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
  layer { name: "pool" type: "Pooling" bottom: "conv2" top: "pool" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
  layer { name: "tokens" type: "Reshape" bottom: "pool" top: "tokens" reshape_param { shape { dim: 0 dim: 16 dim: 36 } } }
  layer { name: "attn" type: "MultiHeadAttention" bottom: "tokens" top: "attn" attention_param { num_heads: 4 } }
  layer { name: "ip" type: "InnerProduct" bottom: "attn" top: "ip" inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
}
test_iter: 1 test_interval: 2
type: "SGD" momentum: 0.9 base_lr: 0.01 max_iter: 4 display: 0 snapshot: 0 snapshot_after_train: false random_seed: 5
blob_memory: )" + memory + "\n";
  return parse_solver_config(parse_config_text(text, "solver.prototxt"), "solver.prototxt");
}

struct ForceConvolution {
  explicit ForceConvolution(ConvolutionLayer::Algorithm a) { ConvolutionLayer::force_algorithm_for_testing(a); }
  ~ForceConvolution() { ConvolutionLayer::force_algorithm_for_testing(ConvolutionLayer::Algorithm::kAuto); }
};

// Per-layer buffers (SEPARATE), one shared buffer, and one shared buffer
// filled with NaN before every call give the same weights and losses, on 1
// and 3 threads (3: the convolutions' per-thread weight-gradient sums), on
// the im2col and the Winograd paths.
TEST(NetScratch, TrainingWithOneSharedBufferGivesTheSameBitsAsABufferPerLayer) {
  for (const auto algorithm : {ConvolutionLayer::Algorithm::kIm2col, ConvolutionLayer::Algorithm::kWinograd}) {
    const ForceConvolution force(algorithm);
    for (int t : {1, 3}) {
      const ThreadsFor threads(t);
      SCOPED_TRACE(std::to_string(t) + " thread(s), " +
                   (algorithm == ConvolutionLayer::Algorithm::kIm2col ? "im2col" : "Winograd"));
      test::expect_layouts_train_alike([](const std::string& memory) { return solver_config(memory); });
    }
  }
}

TEST(NetScratch, ATestNetPlacesItsForwardsScratchInTheTrainNetsArena) {
  const ThreadsFor threads(2);
  Solver planned(solver_config("BY_LIFETIME"));
  ASSERT_NE(planned.test_net(), nullptr);
  const Net& test = *planned.test_net();
  int layers_with_scratch = 0;
  for (int i = 0; i < test.num_layers(); ++i) layers_with_scratch += test.layer(i).scratch_bytes() > 0 ? 1 : 0;
  ASSERT_GT(layers_with_scratch, 0);
  EXPECT_TRUE(test.blob_plan().forward_only);
  EXPECT_EQ(test.blob_plan().scratch_calls, layers_with_scratch);  // forwards only
  EXPECT_EQ(memory_report({&planned.net(), planned.test_net()}).workspace_bytes, 0u);
  // Its values and scratch lie in the TRAIN net's arena, which holds nothing
  // between training steps (when the TEST net runs): they cost nothing more.
  const Net& train = planned.net();
  EXPECT_EQ(test.blob_plan().host, "TRAIN net '" + train.name() + "'");
  EXPECT_LE(test.blob_plan().arena_bytes, train.blob_plan().arena_bytes);
  EXPECT_CONTAINS(test.blob_plan().str(), "one arena with the TRAIN net '" + train.name() + "'");
  EXPECT_EQ(memory_report({&train, &test}).activation_bytes,
            train.memory_report().activation_bytes + test.memory_report().activation_bytes -
                train.blob_plan().arena_bytes);
  Solver separate(solver_config("SEPARATE"));
  EXPECT_GT(memory_report({&separate.net(), separate.test_net()}).workspace_bytes,
            separate.net().memory_report().workspace_bytes);
}

// A TEST batch larger than the TRAIN batch: the TRAIN net moves into the
// TEST net's arena, and training (testing every 2 steps) gives the same bits.
TEST(NetScratch, ATrainNetMovesIntoALargerTestNetsArena) {
  const ThreadsFor threads(2);
  Solver planned(solver_config("BY_LIFETIME", 24));
  const Net& train = planned.net();
  const Net& test = *planned.test_net();
  EXPECT_GT(test.blob_plan().arena_bytes, train.blob_plan().arena_bytes);
  EXPECT_EQ(train.blob_plan().host, "TEST net '" + test.name() + "'");
  EXPECT_EQ(test.blob_plan().host, "TRAIN net '" + train.name() + "'");
  EXPECT_EQ(memory_report({&train, &test}).activation_bytes,
            train.memory_report().activation_bytes + test.memory_report().activation_bytes -
                test.blob_plan().arena_bytes);
  test::expect_layouts_train_alike([](const std::string& memory) { return solver_config(memory, 24); });
}

// Writes its input into scratch in forward and reads it back in backward,
// which scratch does not allow (another layer's call comes in between).
class ScratchKeeperLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema() { return {}; }
  size_t scratch_bytes() const override { return sizeof(float) * static_cast<size_t>(n_); }
  void reshape(const BlobVec& bottom, const BlobVec& top) override {
    top[0]->reshape_like(*bottom[0]);
    n_ = bottom[0]->numel();
  }
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override {
    ScratchCarver carver(scratch(scratch_bytes()));
    Tensor keep = carver.take({n_});
    float* kept = keep.data<float>();
    const float* x = bottom[0]->data.data<float>();
    float* y = top[0]->data.data<float>();
    for (int64_t i = 0; i < n_; ++i) {
      kept[i] = x[i];
      y[i] = x[i] * x[i];
    }
  }
  void backward_cpu(const BlobVec& top, const std::vector<bool>&, const BlobVec& bottom) override {
    ScratchCarver carver(scratch(scratch_bytes()));
    const Tensor keep = carver.take({n_});
    const float* kept = keep.data<float>();
    const float* dy = top[0]->diff.data<float>();
    float* dx = bottom[0]->diff.data<float>();
    for (int64_t i = 0; i < n_; ++i) dx[i] = 2.0f * kept[i] * dy[i];
  }

 private:
  int64_t n_ = 0;
};

SolverConfig keeper_solver(const std::string& memory) {
  const std::string text = R"(
net_param {
  layer { name: "data" type: "DummyData" top: "data" top: "label"
          dummy_data_param { shape { dim: 4 dim: 6 } shape { dim: 4 }
                             data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
  layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1raw" inner_product_param { num_output: 8 weight_filler { type: "xavier" } } }
  layer { name: "sq" type: "ScratchKeeperForTest" bottom: "ip1raw" top: "ip1" }
  layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
}
type: "SGD" base_lr: 0.01 max_iter: 2 display: 0 snapshot: 0 snapshot_after_train: false random_seed: 3
blob_memory: )" + memory + "\n";
  return parse_solver_config(parse_config_text(text, "solver.prototxt"), "solver.prototxt");
}

TEST(NetScratch, CheckedModeCatchesScratchKeptFromForwardToBackward) {
  ScopedLayerRegistration reg(layer_registration<ScratchKeeperLayer>("ScratchKeeperForTest"));
  std::vector<float> losses;
  // With a buffer of its own nothing else writes to it, and the mistake hides.
  for (const auto& w : test::train_to_end(keeper_solver("SEPARATE"), &losses)) {
    for (float x : w) ASSERT_TRUE(std::isfinite(x));
  }
  const std::string msg = test::error_of<Error>([&] { test::train_to_end(keeper_solver("BY_LIFETIME_CHECKED"), &losses); });
  EXPECT_CONTAINS(msg, "some gradients are not finite; the first non-finite gradient in backward is that of parameter 'ip1.");
}

}  // namespace
}  // namespace strata
