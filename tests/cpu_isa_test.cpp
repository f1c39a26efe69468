// Every CPU path this machine runs (framework/cpu/cpu_isa.h: avx512, avx2,
// portable) trains a small convnet and a ViT block to the same numbers: the
// forward outputs and every parameter gradient of one step agree with the
// portable path (OpenBLAS and plain loops) within float tolerance, at 1 and
// 2 threads. CI runs it on whatever CPU it has; STRATA_CPU_ISA forces a path
// by hand the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "framework/cpu/cpu_isa.h"
#include "framework/cpu/threads.h"
#include "tests/net_test_util.h"

namespace strata {
namespace {

// conv (3x3, Winograd-eligible) -> relu -> pool -> conv (1x1) -> ip -> loss;
// then an attention block on a sequence.
const char* kConvNet = R"(
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 16 dim: 12 dim: 12 } } }
layer { name: "label" type: "Input" top: "label" input_param { shape { dim: 4 } } }
layer { name: "c1" type: "Convolution" bottom: "data" top: "c1"
        convolution_param { num_output: 24 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "r1" type: "ReLU" bottom: "c1" top: "c1" }
layer { name: "p1" type: "Pooling" bottom: "c1" top: "p1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "c2" type: "Convolution" bottom: "p1" top: "c2"
        convolution_param { num_output: 20 kernel_size: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "fc" type: "InnerProduct" bottom: "c2" top: "fc"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
)";

const char* kAttention = R"(
layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 3 dim: 10 dim: 32 } } }
layer { name: "attn" type: "MultiHeadAttention" bottom: "x" top: "y"
        attention_param { num_heads: 4 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "x" top: "loss" }
)";

struct Step {
  float loss = 0.0f;
  std::vector<std::vector<float>> grads;  // every parameter's gradient, in order
};

Step one_step(const char* text, uint64_t seed) {
  auto net = test::make_net(text, Phase::kTrain, 3);
  Rng rng(seed);
  for (const char* name : {"data", "x"}) {
    if (!net->has_blob(name)) continue;
    Tensor& t = net->blob(name).data;
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(-1.0f, 1.0f);
  }
  if (net->has_blob("label")) {
    float* l = net->blob("label").data.data<float>();
    for (int i = 0; i < 4; ++i) l[i] = static_cast<float>(i % 5);
  }
  Step s;
  s.loss = net->forward();
  net->backward();
  for (const NetParam& p : net->params()) {
    const Tensor& g = p.blob->diff;
    s.grads.emplace_back(g.data<float>(), g.data<float>() + g.numel());
  }
  return s;
}

class CpuPaths : public ::testing::TestWithParam<int> {
 protected:
  void TearDown() override {
    reset_cpu_isa_for_testing();
    set_num_threads(saved_);
  }
  int saved_ = num_threads();
};

TEST_P(CpuPaths, EveryPathTrainsLikeThePortableOne) {
  set_num_threads(GetParam());
  for (const char* net : {kConvNet, kAttention}) {
    force_cpu_isa_for_testing(CpuIsa::kPortable);
    const Step want = one_step(net, 11);
    ASSERT_TRUE(std::isfinite(want.loss));
    int compared = 0;
    for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (!cpu_isa_supported(isa)) continue;
      SCOPED_TRACE(cpu_isa_name(isa));
      force_cpu_isa_for_testing(isa);
      const Step got = one_step(net, 11);
      EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::max(1.0f, std::fabs(want.loss)));
      ASSERT_EQ(got.grads.size(), want.grads.size());
      for (size_t p = 0; p < want.grads.size(); ++p) {
        double scale = 1e-6;
        for (float v : want.grads[p]) scale = std::max(scale, static_cast<double>(std::fabs(v)));
        for (size_t i = 0; i < want.grads[p].size(); ++i) {
          ASSERT_NEAR(got.grads[p][i], want.grads[p][i], 1e-4 * scale) << "parameter " << p << " element " << i;
        }
      }
      ++compared;
    }
    if (compared == 0) GTEST_SKIP() << "this CPU runs only the portable path: nothing to compare it with";
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuPaths, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "threads";
                         });

}  // namespace
}  // namespace strata
