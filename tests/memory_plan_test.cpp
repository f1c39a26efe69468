// Sizes checked before allocating: deferred tensor storage under a
// MemoryPlan, the Net's plan refused up front (beyond the machine or
// --max-memory) naming the layer that needs the most, shapes that cannot
// work refused before their weights are made, and out-of-memory errors that
// name the layer.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/memory_cap.h"
#include "framework/memory_plan.h"
#include "framework/net.h"
#include "framework/rng.h"
#include "framework/tensor.h"
#include "tests/net_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test::error_of;
using test::make_net;

// Restores "no cap" however a test ends.
struct CapGuard {
  explicit CapGuard(size_t bytes) { set_memory_cap(bytes); }
  ~CapGuard() { set_memory_cap(0); }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ------------------------------------------------------ deferred storage ----

TEST(MemoryPlan, StorageIsSizedButNotTakenUntilFirstUse) {
  const size_t before = memory_in_use();
  MemoryPlan plan;
  plan.set_owner(0);
  Tensor t({1000, 1000});
  EXPECT_EQ(memory_in_use(), before) << "a tensor made under a plan took its memory at once";
  EXPECT_EQ(t.capacity_bytes(), size_t{4000000});
  MemoryPlan::Totals totals = plan.totals();
  EXPECT_EQ(totals.host_deferred, size_t{4000000});
  EXPECT_EQ(totals.taken, 0u);
  ASSERT_EQ(totals.by_owner.size(), 1u);
  EXPECT_EQ(totals.by_owner[0], size_t{4000000});

  t.data<float>()[999999] = 1.0f;  // first use takes it, zeroed
  EXPECT_EQ(memory_in_use(), before + 4000000);
  EXPECT_EQ(t.data<float>()[0], 0.0f);
  totals = plan.totals();
  EXPECT_EQ(totals.host_deferred, 0u);
  EXPECT_EQ(totals.taken, size_t{4000000});
}

TEST(MemoryPlan, FreedStorageIsNotCountedAndSharedStorageOnce) {
  MemoryPlan plan;
  plan.set_owner(0);
  Tensor a({100});
  Tensor shared = a;  // same storage
  { Tensor gone({1 << 20}); }
  plan.set_owner(1);
  Tensor b({50});
  plan.add_estimate(1, 8);
  const MemoryPlan::Totals t = plan.totals();
  EXPECT_EQ(t.host_deferred, 600u);
  EXPECT_EQ(t.estimated, 8u);
  EXPECT_EQ(t.total(), 608u);
  ASSERT_EQ(t.by_owner.size(), 2u);
  EXPECT_EQ(t.by_owner[0], 400u);
  EXPECT_EQ(t.by_owner[1], 208u);
  plan.allocate();
  EXPECT_TRUE(a.shares_storage_with(shared));
  EXPECT_EQ(plan.totals().taken, 600u);
}

TEST(MemoryPlan, WithoutAPlanStorageIsTakenAtOnce) {
  const size_t before = memory_in_use();
  Tensor t({256});
  EXPECT_EQ(memory_in_use(), before + 1024);
}

TEST(MemoryPlan, ElementCountsThatOverflowAreShapeErrors) {
  const std::string msg = error_of<ShapeError>([] { Tensor t({int64_t{1} << 40, int64_t{1} << 40}); });
  EXPECT_CONTAINS(msg, "[1099511627776, 1099511627776]");
  EXPECT_CONTAINS(msg, "more elements than a 64-bit count can hold");
  const std::string bytes = error_of<ShapeError>([] { Tensor t({int64_t{1} << 61, 2}); });
  EXPECT_CONTAINS(bytes, "more bytes than memory can address");
}

TEST(MemoryPlan, MachineMemoryIsReadFromTheSystem) {
  const MachineMemory m = machine_memory_available();
  EXPECT_GT(m.available, 0u);
  EXPECT_NE(m.source, "");
}

// ------------------------------------------------ the Net's plan refused ----

// A digits-sized net whose batch is given: an Input, two convolutions, a loss.
std::string conv_net(const std::string& batch) {
  return R"(
name: "plan"
layer { name: "in" type: "Input" top: "x" top: "label"
        input_param { shape { dim: )" + batch + R"( dim: 1 dim: 8 dim: 8 } shape { dim: )" + batch + R"( } } }
layer { name: "conv1" type: "Convolution" bottom: "x" top: "c1" convolution_param { num_output: 32 kernel_size: 3 pad: 1 } }
layer { name: "relu1" type: "ReLU" bottom: "c1" top: "c1" }
layer { name: "fc" type: "InnerProduct" bottom: "c1" top: "fc" inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
)";
}

TEST(MemoryPlan, ImpossibleBatchSizeIsRefusedAtOnceNamingTheLayer) {
  const size_t before = memory_in_use();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of<OutOfMemoryError>([] { make_net(conv_net("2000000000")); });
  EXPECT_LT(seconds_since(t0), 5.0) << "refused, but only after allocating for a while";
  EXPECT_EQ(memory_in_use(), before) << "memory still held after the refusal";
  EXPECT_CONTAINS(msg, "net 'plan' (TRAIN) needs ");
  EXPECT_CONTAINS(msg, "TiB of tensor memory, more than the ");
  EXPECT_CONTAINS(msg, "this machine has available");
  EXPECT_CONTAINS(msg, "reduce batch_size");
  EXPECT_CONTAINS(msg, "The layer that needs the most is layer 'conv1' (Convolution) at net.prototxt:5:");
  EXPECT_CONTAINS(msg, "(top 'c1' [2000000000, 32, 8, 8])");
}

TEST(MemoryPlan, ImpossibleBatchSizeOfADataLayerIsRefusedAtOnce) {
  // The digits net as a user edits it: batch_size in an ArrayData layer.
  const std::string data = std::string(STRATA_SOURCE_DIR) + "/data/digits/";
  const std::string text = R"(
name: "digits"
layer { name: "data" type: "ArrayData" top: "data" top: "label"
  array_data_param { source: ")" + data + R"(train_images.npy" label_source: ")" + data +
                           R"(train_labels.npy" batch_size: 2000000000 } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
)";
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of<OutOfMemoryError>([&] { make_net(text); });
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_CONTAINS(msg, "The layer that needs the most is layer 'data' (ArrayData)");
  EXPECT_CONTAINS(msg, "(top 'data' [2000000000, 1, 8, 8], top 'label' [2000000000])");
}

TEST(MemoryPlan, PlanBeyondMaxMemoryIsRefusedBeforeAllocating) {
  const size_t need = make_net(conv_net("64"))->memory_report().total();
  const size_t before = memory_in_use();
  CapGuard cap(before + need / 2);
  const std::string msg = error_of<OutOfMemoryError>([] { make_net(conv_net("64")); });
  EXPECT_CONTAINS(msg, "net 'plan' (TRAIN) needs ");
  EXPECT_CONTAINS(msg, "over the cap of " + format_bytes(before + need / 2) + "; split the model over more ranks");
  EXPECT_CONTAINS(msg, "raise --max-memory");
  EXPECT_CONTAINS(msg, "The layer that needs the most is layer 'conv1'");
  // What the fillers wrote during setup was given back with the net.
  EXPECT_EQ(memory_in_use(), before);
}

TEST(MemoryPlan, OptimizerStateIsPartOfThePlanAndTheReport) {
  NetOptions options;
  const std::unique_ptr<Net> plain = std::make_unique<Net>(parse_config_text(conv_net("4"), "net.prototxt"), options);
  options.optimizer_slots = 2;
  const std::unique_ptr<Net> adam = std::make_unique<Net>(parse_config_text(conv_net("4"), "net.prototxt"), options);
  const MemoryReport r = adam->memory_report();
  EXPECT_EQ(plain->memory_report().optimizer_bytes, 0u);
  EXPECT_EQ(r.optimizer_bytes, 2 * r.param_bytes);
  EXPECT_EQ(r.total(), plain->memory_report().total() + r.optimizer_bytes);
  EXPECT_CONTAINS(r.str(), "optimizer state ");
  // A cap between the two: the net without an optimizer fits, the one with does not.
  const size_t base = memory_in_use();
  CapGuard cap(base + plain->memory_report().total() + r.optimizer_bytes / 2);
  EXPECT_NO_THROW(std::make_unique<Net>(parse_config_text(conv_net("4"), "net.prototxt"), NetOptions{}));
  EXPECT_THROW(std::make_unique<Net>(parse_config_text(conv_net("4"), "net.prototxt"), options), OutOfMemoryError);
}

TEST(MemoryPlan, LayerScratchIsReported) {
  // Max pooling keeps a mask shaped like its top: not a blob, not a parameter.
  const auto net = make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "pool" type: "Pooling" bottom: "x" top: "p" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
)");
  EXPECT_GE(net->memory_report().layer_bytes, size_t{2 * 3 * 4 * 4 * 4});
}

// ------------------------------------------------ out of memory, by layer ----

TEST(MemoryPlan, OutOfMemoryDuringForwardNamesTheLayer) {
  const auto net = make_net(conv_net("64"));
  // Room for nothing more: the convolution's scratch, sized in its first
  // forward, goes over the cap.
  CapGuard cap(memory_in_use() + 1);
  const std::string msg = error_of<OutOfMemoryError>([&] { net->forward(); });
  EXPECT_CONTAINS(msg, "layer 'conv1' (Convolution) at net.prototxt:5:1, during forward: out of memory under --max-memory");
}

// ------------------------------------------- shapes checked before weights ----

TEST(MemoryPlan, KernelLargerThanTheInputIsRefusedBeforeItsWeightsAreMade) {
  const size_t peak = memory_peak();
  // The weights alone would be 100 x 1 x 20000 x 20000 floats (149 GiB).
  const std::string msg = error_of<ShapeError>([] {
    make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 1 dim: 8 dim: 8 } } }
layer { name: "huge" type: "Convolution" bottom: "x" top: "y" convolution_param { num_output: 100 kernel_size: 20000 pad: 1 } }
)");
  });
  EXPECT_CONTAINS(msg, "layer 'huge' (Convolution) at net.prototxt:3:1");
  EXPECT_CONTAINS(msg, "input [2, 1, 8, 8] with kernel 20000x20000");
  EXPECT_CONTAINS(msg, "must fit in the padded input (10x10)");
  EXPECT_CONTAINS(msg, "use a smaller kernel_size");
  EXPECT_LT(memory_peak(), peak + (size_t{1} << 30));
}

TEST(MemoryPlan, PatchLargerThanTheImageIsRefusedBeforeItsWeightsAreMade) {
  const std::string msg = error_of<ShapeError>([] {
    make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 32 dim: 32 } } }
layer { name: "embed" type: "PatchEmbed" bottom: "x" top: "t" patch_embed_param { num_output: 8 patch_size: 100000 } }
)");
  });
  EXPECT_CONTAINS(msg, "layer 'embed' (PatchEmbed)");
  EXPECT_CONTAINS(msg, "patch_size 100000 is larger than the images [2, 3, 32, 32]");
}

TEST(MemoryPlan, OverflowingShapeNamesTheLayer) {
  const std::string msg = error_of<ShapeError>([] {
    make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 4000000000 dim: 4000000000 dim: 4000000000 } } }
)");
  });
  EXPECT_CONTAINS(msg, "layer 'in' (Input)");
  EXPECT_CONTAINS(msg, "more elements than a 64-bit count can hold");
}

// A layer whose own checks let an output size of zero through.
class EmptyTopLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema() { return {}; }
  void setup(const BlobVec&, const BlobVec&) override {}
  void reshape(const BlobVec& bottom, const BlobVec& top) override { top[0]->resize({bottom[0]->shape()[0], 0}); }
  void forward_cpu(const BlobVec&, const BlobVec&) override {}
  void backward_cpu(const BlobVec&, const std::vector<bool>&, const BlobVec&) override {}
};

TEST(MemoryPlan, EmptyTopFromNonEmptyBottomIsRefusedNamingTheLayer) {
  ScopedLayerRegistration reg(layer_registration<EmptyTopLayer>("EmptyTopForTest"));
  const std::string msg = error_of<ShapeError>([] {
    make_net(R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "shrink" type: "EmptyTopForTest" bottom: "x" top: "y" }
)");
  });
  EXPECT_CONTAINS(msg, "layer 'shrink' (EmptyTopForTest) at net.prototxt:3:1: top 'y' has shape [2, 0]");
  EXPECT_CONTAINS(msg, "from bottom 'x' [2, 3]");
}

// ------------------------------------------------ memory per layer of a file ----

// Every layer has an Rng and most never draw from it: its 2.5 KB engine is
// made on first use, so a 50 MB net file of small layers does not take GBs.
TEST(MemoryPlan, RngTakesItsEngineOnlyWhenUsedAndDrawsTheSameNumbers) {
  EXPECT_LE(sizeof(Rng), 64u);
  Rng eager(42);
  const uint64_t first = eager.next_u64();
  Rng lazy(42);
  const std::string unused_state = lazy.save();  // before any draw: the state it starts from
  Rng restored(7);
  restored.load(unused_state);
  EXPECT_EQ(restored.next_u64(), first);
  Rng copy = lazy;
  EXPECT_EQ(lazy.next_u64(), first);
  EXPECT_EQ(copy.next_u64(), first);
  lazy.seed(42);
  EXPECT_EQ(lazy.next_u64(), first);
}

}  // namespace
}  // namespace strata
