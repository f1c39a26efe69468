// The fusion pass (NetOptions::fuse_epilogues, framework/net_fusion.cpp): an
// in-place ReLU after an InnerProduct or a Convolution is applied by that
// layer as it writes, with the bits of the two layers run one after the
// other, in every storage dtype and memory layout and with recomputation;
// and where fusing would change what some reader sees, nothing is fused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/config/config.h"
#include "framework/dtype.h"
#include "framework/net.h"
#include "framework/rng.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// conv1 + relu1 and ip1 + relu2 (both in place) are fused; relu3 reads a
// blob that pool1 made (no epilogue there) and is not.
const char* kNet = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 3 dim: 2 dim: 9 dim: 9 } shape { dim: 3 dim: 5 } } }
layer { name: "conv1" type: "Convolution" bottom: "x" top: "c1" convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "relu1" type: "ReLU" bottom: "c1" top: "c1" RELU1_PARAM }
layer { name: "pool1" type: "Pooling" bottom: "c1" top: "p1" pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "relu3" type: "ReLU" bottom: "p1" top: "p1" }
layer { name: "ip1" type: "InnerProduct" bottom: "p1" top: "h1" inner_product_param { num_output: 12 weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "relu2" type: "ReLU" bottom: "h1" top: "h1" }
layer { name: "ip2" type: "InnerProduct" bottom: "h1" top: "h2" inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "h2" bottom: "y" top: "loss" }
RECOMPUTE
)";

std::string net_text(const std::string& relu1_param = "", const std::string& recompute = "") {
  std::string text = kNet;
  text.replace(text.find("RELU1_PARAM"), std::string("RELU1_PARAM").size(), relu1_param);
  text.replace(text.find("RECOMPUTE"), std::string("RECOMPUTE").size(), recompute);
  return text;
}

std::unique_ptr<Net> make_net(const std::string& text, bool fuse, DType storage = DType::kF32,
                              BlobMemory memory = BlobMemory::kByLifetimeChecked) {
  NetOptions o;
  o.fuse_epilogues = fuse;
  o.storage_dtype = storage;
  o.blob_memory = memory;
  return std::make_unique<Net>(parse_config_text(text, "net.prototxt"), o);
}

std::vector<std::string> fused_names(const Net& net) {
  std::vector<std::string> out;
  for (const auto& [producer, activation] : net.fused_epilogues()) {
    out.push_back(net.layer(producer).name() + "+" + net.layer(activation).name());
  }
  return out;
}

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = test::values(t);
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

// Forward and backward of two steps (the weights moved between them by
// plain SGD), returning the loss bits and every parameter gradient's bits.
std::pair<std::vector<uint32_t>, std::vector<std::vector<uint32_t>>> run(Net& net) {
  std::vector<uint32_t> losses;
  std::vector<std::vector<uint32_t>> grads;
  Rng rng(3);
  for (int step = 0; step < 2; ++step) {
    for (const char* in : {"x", "y"}) {
      float* d = net.blob(in).data.data<float>();
      for (int64_t i = 0; i < net.blob(in).numel(); ++i) d[i] = static_cast<float>(rng.uniform(-1, 1));
    }
    for (const NetParam& p : net.params()) p.blob->diff.fill(0.0f);
    const float loss = net.forward();
    uint32_t b;
    std::memcpy(&b, &loss, 4);
    losses.push_back(b);
    net.backward();
    for (const NetParam& p : net.params()) {
      grads.push_back(bits(p.blob->diff));
      float* w = p.blob->data.data<float>();
      const float* g = p.blob->diff.data<float>();
      for (int64_t i = 0; i < p.blob->numel(); ++i) w[i] -= 0.1f * g[i];
    }
  }
  return {losses, grads};
}

TEST(Fusion, AnInPlaceReLUAfterAGemmOrConvolutionGivesTheUnfusedBits) {
  const std::string recompute = R"(recompute { from: "conv1" to: "relu3" })";
  for (const std::string& extra : {std::string(), recompute}) {
    for (DType storage : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (BlobMemory memory : {BlobMemory::kSeparate, BlobMemory::kByLifetimeChecked}) {
        if (!extra.empty() && memory == BlobMemory::kSeparate) continue;  // recompute needs a plan
        SCOPED_TRACE(std::string(dtype_name(storage)) + (memory == BlobMemory::kSeparate ? " separate" : " planned") +
                     (extra.empty() ? "" : " recomputed"));
        const std::string text = net_text("", extra);
        auto fused = make_net(text, true, storage, memory);
        auto plain = make_net(text, false, storage, memory);
        EXPECT_EQ(fused_names(*fused), (std::vector<std::string>{"conv1+relu1", "ip1+relu2"}));
        EXPECT_TRUE(plain->fused_epilogues().empty());
        EXPECT_CONTAINS(fused->fusion_report(), "fused 2 activation(s) into the layer before them: relu1 into conv1");
        const auto a = run(*fused);
        const auto b = run(*plain);
        EXPECT_EQ(a.first, b.first);
        ASSERT_EQ(a.second.size(), b.second.size());
        for (size_t k = 0; k < a.second.size(); ++k) EXPECT_EQ(a.second[k], b.second[k]) << "gradient " << k;
      }
    }
  }
}

// A leaky ReLU is fused where the output stays f32; in 16 bits rounding the
// product of the slope and a rounded value is not rounding the product.
TEST(Fusion, ALeakyReLUOnlyWhereItsInputIsStoredF32) {
  const std::string text = net_text("relu_param { negative_slope: 0.1 }");
  auto f32 = make_net(text, true);
  EXPECT_EQ(fused_names(*f32), (std::vector<std::string>{"conv1+relu1", "ip1+relu2"}));
  const auto a = run(*f32);
  const auto b = run(*make_net(text, false));
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
  EXPECT_EQ(fused_names(*make_net(text, true, DType::kBF16)), (std::vector<std::string>{"ip1+relu2"}));
}

TEST(Fusion, NothingWhereAReaderWouldSeeADifferentValue) {
  // Out of place: the pre-activation blob is the ReLU's bottom, which its
  // readers (and a negative slope's backward) see.
  std::string text = net_text();
  const std::string in_place = R"(layer { name: "relu2" type: "ReLU" bottom: "h1" top: "h1" })";
  const std::string out_of_place = R"(layer { name: "relu2" type: "ReLU" bottom: "h1" top: "r1" })";
  text.replace(text.find(in_place), in_place.size(), out_of_place);
  text.replace(text.find(R"(bottom: "h1" top: "h2")"), std::string(R"(bottom: "h1" top: "h2")").size(),
               R"(bottom: "r1" top: "h2")");
  EXPECT_EQ(fused_names(*make_net(text, true)), (std::vector<std::string>{"conv1+relu1"}));
  // A blob code outside the layers reads: it would see the activation applied early.
  auto kept = make_net(net_text(), true);
  kept->keep_blobs({"c1"});
  EXPECT_EQ(fused_names(*kept), (std::vector<std::string>{"ip1+relu2"}));
}

// Two pre-norm residual blocks as a ViT writes them. The Net inserts a
// Split after x and after s1 (each read twice); under a plan their tops are
// the bottom's memory, and add1's sum is computed by ln2, which reads it
// through that Split. add2's sum has no LayerNorm after it.
const char* kResidualNet = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 3 dim: 4 dim: 8 } shape { dim: 3 dim: 4 dim: 8 } } }
layer { name: "ln1" type: "LayerNorm" bottom: "x" top: "n1"
        layer_norm_param { weight_filler { type: "gaussian" mean: 1 std: 0.3 } bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "n1" top: "h1"
        inner_product_param { num_output: 8 axis: 2 weight_filler { type: "gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "add1" type: "Eltwise" bottom: "x" bottom: "h1" top: "s1" }
layer { name: "ln2" type: "LayerNorm" bottom: "s1" top: "n2"
        layer_norm_param { weight_filler { type: "gaussian" mean: 1 std: 0.3 } bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "ip2" type: "InnerProduct" bottom: "n2" top: "h2"
        inner_product_param { num_output: 8 axis: 2 weight_filler { type: "gaussian" std: 0.4 } } }
layer { name: "add2" type: "Eltwise" bottom: "s1" bottom: "h2" top: "s2" }
layer { name: "loss" type: "EuclideanLoss" bottom: "s2" bottom: "y" top: "loss" }
)";

std::vector<std::string> fused_residual_names(const Net& net) {
  std::vector<std::string> out;
  for (const auto& [sum, reader] : net.fused_residuals()) {
    out.push_back(net.layer(sum).name() + "+" + net.layer(reader).name());
  }
  return out;
}

TEST(Fusion, AResidualSumComputedByTheLayerNormReadingItGivesTheUnfusedBits) {
  for (DType storage : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (BlobMemory memory : {BlobMemory::kByLifetime, BlobMemory::kByLifetimeChecked}) {
      SCOPED_TRACE(std::string(dtype_name(storage)) + (memory == BlobMemory::kByLifetime ? " planned" : " checked"));
      auto fused = make_net(kResidualNet, true, storage, memory);
      EXPECT_EQ(fused_residual_names(*fused), (std::vector<std::string>{"add1+ln2"}));
      EXPECT_CONTAINS(fused->fusion_report(), "1 residual sum(s) into the layer reading them: add1 into ln2");
      // The reference: every blob its own memory, every layer its own pass.
      auto plain = make_net(kResidualNet, false, storage, BlobMemory::kSeparate);
      EXPECT_TRUE(plain->fused_residuals().empty());
      EXPECT_TRUE(plain->shared_tops().empty());
      const auto a = run(*fused);
      const auto b = run(*plain);
      EXPECT_EQ(a.first, b.first);
      ASSERT_EQ(a.second.size(), b.second.size());
      for (size_t k = 0; k < a.second.size(); ++k) EXPECT_EQ(a.second[k], b.second[k]) << "gradient " << k;
    }
  }
  // Without the Split's shared memory the LayerNorm does not read the sum's own blob: nothing to fuse.
  EXPECT_TRUE(make_net(kResidualNet, true, DType::kF32, BlobMemory::kSeparate)->fused_residuals().empty());
}

TEST(Fusion, NoResidualSumWithCoefficientsOrInsideARecomputeRange) {
  std::string weighted = kResidualNet;
  const std::string add1 = R"(layer { name: "add1" type: "Eltwise" bottom: "x" bottom: "h1" top: "s1" })";
  weighted.replace(weighted.find(add1), add1.size(),
                   R"(layer { name: "add1" type: "Eltwise" bottom: "x" bottom: "h1" top: "s1" eltwise_param { coeff: 1 coeff: 0.5 } })");
  EXPECT_TRUE(make_net(weighted, true)->fused_residuals().empty());
  const std::string recomputed = std::string(kResidualNet) + R"(recompute { from: "ln1" to: "ln2" })";
  auto net = make_net(recomputed, true);
  EXPECT_TRUE(net->fused_residuals().empty());
  EXPECT_TRUE(net->shared_tops().empty()) << "x's and s1's Splits both border the range";
  const auto a = run(*net);
  const auto b = run(*make_net(recomputed, false, DType::kF32, BlobMemory::kSeparate));
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
}

// A Split's tops are its bottom's memory under a plan, and its forward
// copies nothing; not where a reader writes a top in place.
TEST(SharedTops, ASplitsTopsAreItsBottomsMemoryUnlessOneIsWrittenInPlace) {
  auto net = make_net(kResidualNet, false, DType::kF32, BlobMemory::kByLifetime);
  int shared = 0;
  for (int i = 0; i < net->num_layers(); ++i) {
    if (net->layer(i).type() != "Split") continue;
    for (const Blob* t : net->tops(i)) {
      ASSERT_TRUE(net->shared_tops().count(t)) << net->layer(i).name();
      EXPECT_EQ(net->shared_tops().at(t), net->bottoms(i)[0]);
      ++shared;
    }
  }
  EXPECT_EQ(shared, 4);  // x's two and s1's two
  net->forward();
  for (int i = 0; i < net->num_layers(); ++i) {
    if (net->layer(i).type() != "Split") continue;
    for (const Blob* t : net->tops(i)) EXPECT_EQ(t->data.raw_data(), net->bottoms(i)[0]->data.raw_data());
  }
  const std::string written = R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 6 } shape { dim: 2 dim: 6 } } }
layer { name: "fork" type: "Split" bottom: "x" top: "a" top: "b" }
layer { name: "relu" type: "ReLU" bottom: "a" top: "a" }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "s" }
layer { name: "loss" type: "EuclideanLoss" bottom: "s" bottom: "y" top: "loss" }
)";
  auto in_place = make_net(written, false, DType::kF32, BlobMemory::kByLifetime);
  EXPECT_TRUE(in_place->shared_tops().empty());
  test::set_values(in_place->blob("x").data, {-1, 2, -3, 4, -5, 6, 1, -2, 3, -4, 5, -6});
  in_place->forward();
  // b kept x's negatives: relu on a did not reach it.
  EXPECT_EQ(test::values(in_place->blob("s").data),
            (std::vector<float>{-1, 4, -3, 8, -5, 12, 2, -2, 6, -4, 10, -6}));
}

#ifdef STRATA_WITH_CUDA
NetOptions gpu_options(bool fuse, DType storage, BlobMemory memory) {
  NetOptions o;
  o.fuse_epilogues = fuse;
  o.storage_dtype = storage;
  o.blob_memory = memory;
  o.device = Device::cuda(0);
  return o;
}

// One forward and backward on a GPU from inputs x and y: the loss's and every
// parameter gradient's bits.
std::vector<std::vector<uint32_t>> one_step_bits_on_gpu(Net& net) {
  Rng rng(3);
  for (const char* in : {"x", "y"}) {
    Tensor host(net.blob(in).shape());
    for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = static_cast<float>(rng.uniform(-1, 1));
    net.blob(in).data.copy_from(host);
  }
  for (const NetParam& p : net.params()) p.blob->diff.fill(0.0f);
  const float loss = net.forward();
  net.backward();
  std::vector<std::vector<uint32_t>> out;
  uint32_t b;
  std::memcpy(&b, &loss, 4);
  out.push_back({b});
  for (const NetParam& p : net.params()) out.push_back(bits(p.blob->diff.to(Device::cpu())));
  return out;
}

// On a GPU the ReLU runs in the bias kernel of the Convolution (f32 and 16
// bits) and of the InnerProduct (f32): the bits of the unfused net on the
// same GPU, forward and backward.
TEST(Fusion, OnAGpuTheBitsOfTheUnfusedNet) {
  STRATA_SKIP_WITHOUT_GPU("the fused bias kernels are compiled, not run");
  for (DType storage : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(storage));
    std::vector<std::vector<uint32_t>> results[2];
    for (bool fuse : {true, false}) {
      Net net(parse_config_text(net_text(), "net.prototxt"),
              gpu_options(fuse, storage, BlobMemory::kByLifetimeChecked));
      if (fuse) {
        const std::vector<std::string> want = storage == DType::kF32
                                                  ? std::vector<std::string>{"conv1+relu1", "ip1+relu2"}
                                                  : std::vector<std::string>{"conv1+relu1"};
        EXPECT_EQ(fused_names(net), want);
      }
      results[fuse ? 0 : 1] = one_step_bits_on_gpu(net);
    }
    EXPECT_EQ(results[0], results[1]);
  }
}

// On a GPU the LayerNorm kernel sums the residual as it reads it: the bits
// of the unfused net (every blob its own memory) on the same GPU.
TEST(Fusion, OnAGpuAResidualSumGivesTheBitsOfTheUnfusedNet) {
  STRATA_SKIP_WITHOUT_GPU("the fused LayerNorm kernel is compiled, not run");
  for (DType storage : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(storage));
    std::vector<std::vector<uint32_t>> results[2];
    for (bool fuse : {true, false}) {
      Net net(parse_config_text(kResidualNet, "net.prototxt"),
              gpu_options(fuse, storage, fuse ? BlobMemory::kByLifetime : BlobMemory::kSeparate));
      EXPECT_EQ(fused_residual_names(net), fuse ? std::vector<std::string>{"add1+ln2"} : std::vector<std::string>{});
      results[fuse ? 0 : 1] = one_step_bits_on_gpu(net);
    }
    EXPECT_EQ(results[0], results[1]);
  }
}
#endif

}  // namespace
}  // namespace strata
