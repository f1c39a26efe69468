// Layers that take blobs stored in bf16 or f16 (Layer::takes_storage): every
// example of each, in each 16-bit dtype it takes, against its f32 path on
// the CPU (check_storage, framework/layer_check.h), and against the CPU on a
// GPU. The list of such layers may grow, never shrink unnoticed: the types
// below are expected among them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "framework/dtype.h"
#include "framework/cpu/gemm_bf16.h"
#include "framework/layer_check.h"
#include "framework/layer_harness.h"
#include "framework/layer_registry.h"
#include "framework/cpu/threads.h"
#include "layers/convolution/convolution.h"
#ifdef STRATA_WITH_CUDA
#include "layers/multi_head_attention_flash.h"
#endif
#include "tests/test_util.h"

namespace strata {
namespace {

struct StorageCase {
  std::string type;
  LayerExample example;
  DType storage;
};

std::vector<StorageCase> storage_cases() {
  std::vector<StorageCase> cases;
  const LayerRegistry& reg = LayerRegistry::instance();
  for (const std::string& type : reg.types()) {
    for (const LayerExample& ex : reg.find(type).schema().examples) {
      for (DType storage : {DType::kBF16, DType::kF16}) {
        if (example_takes_storage(type, ex, storage)) cases.push_back({type, ex, storage});
      }
    }
  }
  return cases;
}

// The layers that take both 16-bit dtypes on the CPU (Scale with one bottom).
const char* const kNative16BitLayers[] = {
    "Accuracy", "AdaptivePooling", "BatchNorm", "Concat", "Convolution", "Dropout", "Eltwise", "Flatten", "GELU",
    "InfogainLoss", "InnerProduct", "LayerNorm", "MultiHeadAttention", "PatchEmbed", "Pooling",
    "PositionEmbedding", "ReLU", "Reshape", "Scale", "Sigmoid", "Softmax", "SoftmaxWithLoss", "Split", "TanH",
    "TokenPool"};
// The same on a GPU.
const char* const kNative16BitLayersOnAGpu[] = {
    "Accuracy", "AdaptivePooling", "BatchNorm", "Concat", "Convolution", "Dropout", "Eltwise", "Flatten", "GELU",
    "InfogainLoss", "InnerProduct", "LayerNorm", "MultiHeadAttention", "PatchEmbed", "Pooling",
    "PositionEmbedding", "ReLU", "Reshape", "Scale", "Sigmoid", "Softmax", "SoftmaxWithLoss", "Split", "TanH",
    "TokenPool"};

TEST(LayerStorage, EveryLayerThatTakes16BitBlobsMatchesItsF32Path) {
  std::set<std::string> checked;
  for (const StorageCase& c : storage_cases()) {
    SCOPED_TRACE(describe_example(c.type, c.example) + " stored in " + dtype_name(c.storage));
    for (const std::string& p : check_storage(c.type, c.example, c.storage)) ADD_FAILURE() << p;
    checked.insert(c.type);
  }
  for (const char* type : kNative16BitLayers) {
    EXPECT_TRUE(checked.count(type)) << type << " no longer takes 16-bit blobs (Layer::takes_storage)";
  }
}

TEST(LayerStorage, EveryLayerThatTakes16BitBlobsMatchesTheCpuOnAGpu) {
  const std::string why = cuda_check_unavailable("ReLU");
  if (!why.empty()) GTEST_SKIP() << why << ": the 16-bit CUDA paths are compiled, not run";
  std::set<std::string> checked;
  for (const StorageCase& c : storage_cases()) {
    if (!cuda_check_unavailable(c.type).empty()) continue;
    if (!example_takes_storage(c.type, c.example, c.storage, Device::cuda(0))) continue;  // the Net converts
    SCOPED_TRACE(describe_example(c.type, c.example) + " stored in " + dtype_name(c.storage));
    for (const std::string& p :
         check_cpu_vs_cuda(c.type, c.example, storage_check_tolerance(c.type, c.storage), kLayerCheckSeed, c.storage)) {
      ADD_FAILURE() << p;
    }
    checked.insert(c.type);
  }
  for (const char* type : kNative16BitLayersOnAGpu) {
    EXPECT_TRUE(checked.count(type)) << type << " no longer takes 16-bit blobs on a GPU";
  }
}

// Every CPU path of the convolution (im2col, Winograd, patch packing where
// the CPU has AVX-512) widens its chunks alike; a batch of several chunks,
// and several threads, as well. Each example and a larger one, per path.
TEST(LayerStorage, EveryConvolutionPathTakes16BitBlobs) {
  std::vector<LayerExample> examples = LayerRegistry::instance().find("Convolution").schema().examples;
  examples.push_back(layer_example("convolution_param { num_output: 16 kernel_size: 3 pad: 1 bias_term: true }",
                                   {{5, 16, 6, 7}}));
  const int saved_threads = num_threads();
  for (ConvolutionLayer::Algorithm a : {ConvolutionLayer::Algorithm::kIm2col, ConvolutionLayer::Algorithm::kWinograd,
                                        ConvolutionLayer::Algorithm::kAuto}) {
    ConvolutionLayer::force_algorithm_for_testing(a);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (const LayerExample& ex : examples) {
        SCOPED_TRACE(describe_example("Convolution", ex) + ", path " + std::to_string(static_cast<int>(a)) + ", " +
                     std::to_string(threads) + " thread(s)");
        for (const std::string& p : check_storage("Convolution", ex, DType::kBF16)) ADD_FAILURE() << p;
      }
    }
  }
  ConvolutionLayer::force_algorithm_for_testing(ConvolutionLayer::Algorithm::kAuto);
  set_num_threads(saved_threads);
}

// Attention's CPU path widens the input, the context and the gradients in
// blocks of rows (block_rows(): 4 MiB of f32 for the widest); a net of
// embedding dim 1024 over 400 tokens takes two blocks, at 1 and 2 threads.
// Inputs and weights of a transformer's scale (N(0, 1) tokens, ViT's
// initial std 0.02): the harness spreads its inputs apart by 2 x step for
// finite differences, which over 400 K values would make them thousands and
// saturate the softmax, where rounding q and k moves the largest score and
// no tolerance means anything.
TEST(LayerStorage, AttentionTakes16BitBlobsInSeveralBlocksOfRows) {
  LayerExample ex = layer_example(
      "attention_param { num_heads: 16 weight_filler { type: 'gaussian' std: 0.02 } "
      "bias_filler { type: 'gaussian' std: 0.1 } }",
      {{2, 200, 1024}});
  ex.step = 1e-7f;
  const int saved_threads = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (DType storage : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(dtype_name(storage)) + ", " + std::to_string(threads) + " thread(s)");
      for (const std::string& p : check_storage("MultiHeadAttention", ex, storage)) ADD_FAILURE() << p;
    }
  }
  set_num_threads(saved_threads);
}

// On a GPU, attention on 16-bit blobs runs the fused kernels
// (layers/multi_head_attention_flash.h) by default and the batched GEMMs
// with `fused: false`; both against the CPU, on shapes that cut their tiles
// raggedly: T = 70 (a second block of 6 queries forward, keys in steps of
// 64 and 32), heads of 64 (ViT's), of 80 and of 8 (the head dim padded to
// 16), T = 33 and 5. Inputs and weights as in the test above.
std::vector<LayerExample> fused_attention_examples() {
  struct Case {
    int heads;
    Shape bottom;
  };
  std::vector<LayerExample> out;
  for (const Case& c : {Case{2, {2, 70, 128}}, Case{1, {1, 33, 80}}, Case{3, {2, 5, 24}}}) {
    for (const char* fused : {"true", "false"}) {
      LayerExample ex = layer_example("attention_param { num_heads: " + std::to_string(c.heads) + " fused: " + fused +
                                          " weight_filler { type: 'gaussian' std: 0.02 } "
                                          "bias_filler { type: 'gaussian' std: 0.1 } }",
                                      {c.bottom});
      ex.step = 1e-7f;
      out.push_back(ex);
    }
  }
  return out;
}

TEST(LayerStorage, FusedAttentionOnAGpuMatchesTheCpuAsTheUnfusedPathDoes) {
  // The CPU (which takes `fused` and has one path) against its f32 path on these shapes.
  for (const LayerExample& ex : fused_attention_examples()) {
    for (DType storage : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(describe_example("MultiHeadAttention", ex) + " stored in " + dtype_name(storage) + " on the CPU");
      for (const std::string& p : check_storage("MultiHeadAttention", ex, storage)) ADD_FAILURE() << p;
    }
  }
  const std::string why = cuda_check_unavailable("MultiHeadAttention");
  if (!why.empty()) GTEST_SKIP() << why << ": the fused attention kernels are compiled, not run";
#ifdef STRATA_WITH_CUDA
  const std::string fused_why_not = flash_attention::unavailable(64, 0);
  if (fused_why_not.find("compute capability") != std::string::npos) GTEST_SKIP() << fused_why_not;
  ASSERT_EQ(fused_why_not, "") << "the fused kernels do not run on this GPU";
#endif
  for (const LayerExample& ex : fused_attention_examples()) {
    for (DType storage : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(describe_example("MultiHeadAttention", ex) + " stored in " + dtype_name(storage));
      for (const std::string& p :
           check_cpu_vs_cuda("MultiHeadAttention", ex, storage_check_tolerance("MultiHeadAttention", storage),
                             kLayerCheckSeed, storage)) {
        ADD_FAILURE() << p;
      }
    }
  }
}

// PatchEmbed's CPU path widens its patch rows in blocks too (4 MiB of f32
// for the wider of a block's patches and outputs): 512 patches projected to
// 4096 values take two.
TEST(LayerStorage, PatchEmbedTakes16BitBlobsInSeveralBlocksOfRows) {
  LayerExample ex = layer_example("patch_embed_param { patch_size: 4 num_output: 4096 }", {{2, 3, 64, 64}});
  ex.step = 1e-6f;  // inputs of unit scale (the harness spreads them apart by 2 x step)
  for (DType storage : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(storage));
    for (const std::string& p : check_storage("PatchEmbed", ex, storage)) ADD_FAILURE() << p;
  }
}

// InnerProduct's bf16 path on a CPU with AMX multiplies bf16
// operands (the weight rounded as the GEMM packs it, as autocast does), in
// blocks of rows; elsewhere it widens the blocks to f32. Either stays within
// the check's tolerance at a transformer layer's scale: 2048 rows, 3 blocks (8 MiB of f32 each).
TEST(LayerStorage, InnerProductTakes16BitBlobsInSeveralBlocksOfRows) {
  LayerExample ex = layer_example(
      "inner_product_param { num_output: 768 weight_filler { type: 'gaussian' std: 0.02 } "
      "bias_filler { type: 'gaussian' std: 0.1 } }",
      {{2048, 768}});
  ex.step = 1e-7f;  // inputs of unit scale (the harness spreads them apart by 2 x step)
  for (DType storage : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(dtype_name(storage)) + (gemm_bf16_available() ? ", bf16 GEMM" : ", f32 GEMM"));
    for (const std::string& p : check_storage("InnerProduct", ex, storage)) ADD_FAILURE() << p;
  }
}

// Dropout's generic examples are its identity cases; at TRAIN its 16-bit
// path keeps and scales the elements its mask keeps, dropping the rest, in
// forward and backward alike.
TEST(LayerStorage, DropoutAtTrainScalesWhatItKeepsIn16Bits) {
  for (DType storage : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(storage));
    LayerHarness h = make_harness("Dropout", "dropout_param { dropout_ratio: 0.5 }", {{4, 64}}, Phase::kTrain, 3);
    Rng rng(5);
    fill_gaussian(h.bottom[0]->data, rng);
    store_blobs_as(h, storage);
    h.setup();
    h.forward();
    const std::vector<float> x = widened(h.bottom[0]->data), y = widened(h.top[0]->data);
    std::vector<float> dy(y.size());
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = 0.25f * static_cast<float>(i % 7) + 0.5f;
    store_rounded(h.top[0]->diff, dy);
    const std::vector<float> dy_stored = widened(h.top[0]->diff);
    h.backward();
    const std::vector<float> dx = widened(h.bottom[0]->diff);
    int kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (y[i] == 0.0f) {
        EXPECT_EQ(dx[i], 0.0f) << i;
        continue;
      }
      ++kept;
      EXPECT_EQ(y[i], x[i] * 2.0f) << i;  // doubling is exact in 16 bits too
      EXPECT_EQ(dx[i], dy_stored[i] * 2.0f) << i;
    }
    EXPECT_GT(kept, 64);  // about half of 256
    EXPECT_LT(kept, 192);
  }
}

// ------------------------------------------------- the check can fail ----

// y = 2x in f32; its 16-bit path forgets the factor.
class Wrong16BitLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema() {
    LayerSchema s;
    s.summary = "test only: y = 2x, but x in 16 bits";
    s.examples = {layer_example("", {{2, 3}})};
    return s;
  }
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }
  BackwardReads backward_reads() const override { return {false, false}; }
  void reshape(const BlobVec& bottom, const BlobVec& top) override { top[0]->reshape_like(*bottom[0]); }
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override {
    if (bottom[0]->data.dtype() != DType::kF32) {
      std::memcpy(top[0]->data.raw_data(), bottom[0]->data.raw_data(), bottom[0]->data.nbytes());
      return;
    }
    for (int64_t i = 0; i < bottom[0]->numel(); ++i) {
      top[0]->data.data<float>()[i] = 2 * bottom[0]->data.data<float>()[i];
    }
  }
  void backward_cpu(const BlobVec& top, const std::vector<bool>&, const BlobVec& bottom) override {
    if (top[0]->diff.dtype() != DType::kF32) {
      std::memcpy(bottom[0]->diff.raw_data(), top[0]->diff.raw_data(), top[0]->diff.nbytes());
      return;
    }
    for (int64_t i = 0; i < bottom[0]->numel(); ++i) {
      bottom[0]->diff.data<float>()[i] = 2 * top[0]->diff.data<float>()[i];
    }
  }
};

// Claims bf16 but makes its top f32.
class RetypingLayer : public Wrong16BitLayer {
 public:
  using Wrong16BitLayer::Wrong16BitLayer;
  void reshape(const BlobVec& bottom, const BlobVec& top) override {
    top[0]->data = Tensor(bottom[0]->shape());
    top[0]->diff = Tensor(bottom[0]->shape());
  }
};

TEST(LayerStorage, TheCheckCatchesAWrong16BitPathAndARetypedTop) {
  {
    ScopedLayerRegistration reg(layer_registration<Wrong16BitLayer>("TestOnlyWrong16Bit"));
    const LayerExample ex = Wrong16BitLayer::schema().examples[0];
    EXPECT_TRUE(example_takes_storage("TestOnlyWrong16Bit", ex, DType::kBF16));
    const auto problems = check_storage("TestOnlyWrong16Bit", ex, DType::kBF16);
    ASSERT_FALSE(problems.empty());
    EXPECT_CONTAINS(problems[0], "top 0 element 0: f32 path");
    bool named_gradient = false;
    for (const std::string& p : problems) named_gradient |= p.find("bottom 0 gradient") != std::string::npos;
    EXPECT_TRUE(named_gradient);
  }
  {
    ScopedLayerRegistration reg(layer_registration<RetypingLayer>("TestOnlyRetyping"));
    const auto problems = check_storage("TestOnlyRetyping", RetypingLayer::schema().examples[0], DType::kF16);
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_CONTAINS(problems[0], "top 0 became f32");
  }
  // A correct layer passes it.
  EXPECT_TRUE(check_storage("ReLU", LayerRegistry::instance().find("ReLU").schema().examples[0], DType::kBF16).empty());
}

}  // namespace
}  // namespace strata
