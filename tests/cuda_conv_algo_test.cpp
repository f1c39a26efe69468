// cuDNN convolution algorithms on a GPU (framework/cuda/conv_algos.h): the
// timed choice (STRATA_CUDNN_ALGO=find) computes what the heuristic one
// computes, and its cache file is written and read back by a later layer of
// the same shape without timing again. The host-side logic is tested without
// a GPU in tests/conv_algo_cache_test.cpp. Skipped, with the reason, in a
// build without CUDA or on a machine without a GPU.
#include <gtest/gtest.h>

#ifndef STRATA_WITH_CUDA

TEST(CudaConvAlgo, NeedsACudaBuild) {
  GTEST_SKIP() << "this build has no CUDA backend (nvcc was not found at configure time); the cuDNN algorithm "
                  "choice needs a CUDA build and a GPU (its host side is tested in ConvAlgoCacheTest)";
}

#else

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "framework/cuda/conv_algo_cache.h"
#include "framework/cuda/conv_algos.h"
#include "framework/cuda/math.h"
#include "framework/io/file_util.h"
#include "framework/net.h"
#include "tests/test_util.h"

namespace strata {
namespace {

constexpr const char* kNoGpu = "the cuDNN algorithm choice is compile-tested only; its host side runs in "
                               "ConvAlgoCacheTest";

// force_backward: the convolution's input gradient (backward-data) is computed too.
const char* kConvNet = R"(
  name: "conv_algo"
  force_backward: true
  layer { name: "in" type: "Input" top: "x" top: "t"
          input_param { shape { dim: 8 dim: 16 dim: 30 dim: 30 } shape { dim: 8 dim: 24 dim: 30 dim: 30 } } }
  layer { name: "conv" type: "Convolution" bottom: "x" top: "y"
          convolution_param { num_output: 24 kernel_size: 3 pad: 1
                              weight_filler { type: "gaussian" std: 0.1 }
                              bias_filler { type: "constant" value: 0.1 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
)";

// Sets an environment variable for a scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

class ScopedMathMode {
 public:
  explicit ScopedMathMode(cuda::MathMode m) : old_(cuda::math_mode()) { cuda::set_math_mode(m); }
  ~ScopedMathMode() { cuda::set_math_mode(old_); }
  ScopedMathMode(const ScopedMathMode&) = delete;
  ScopedMathMode& operator=(const ScopedMathMode&) = delete;

 private:
  cuda::MathMode old_;
};

std::vector<float> host(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  const float* p = h.data<float>();
  return std::vector<float>(p, p + h.numel());
}

void set_input(Blob& b, uint32_t seed) {
  Tensor h(b.shape(), DType::kF32, Device::cpu());
  float* p = h.data<float>();
  uint32_t s = seed;
  for (int64_t i = 0; i < h.numel(); ++i) {
    s = s * 1664525u + 1013904223u;  // values in [-1, 1)
    p[i] = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  b.data.copy_from(h);
}

struct ConvRun {
  std::vector<float> top, input_grad, weight_grad, bias_grad;
  std::string description;
};

// One forward-backward of kConvNet on cuda:0 with the algorithms as the
// environment says.
ConvRun run_conv_net() {
  NetOptions o;
  o.device = Device::cuda(0);
  Net net(parse_config_text(kConvNet, "conv_algo.prototxt"), o);
  set_input(net.blob("x"), 1);
  set_input(net.blob("t"), 2);
  net.forward_backward();
  ConvRun r;
  r.top = host(net.blob("y").data);
  r.input_grad = host(net.blob("x").diff);
  const Layer& conv = net.layer(net.layer_index("conv"));
  r.weight_grad = host(conv.params().at(0).blob->diff);
  r.bias_grad = host(conv.params().at(1).blob->diff);
  r.description = conv.describe_runtime();
  return r;
}

void expect_close(const std::string& what, const std::vector<float>& a, const std::vector<float>& b, float rel) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float scale = std::max({1.0f, std::fabs(a[i]), std::fabs(b[i])});
    if (!(std::fabs(a[i] - b[i]) <= rel * scale) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: heuristic " << a[i] << ", measured " << b[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements outside the tolerance";
}

bool any_nonzero(const std::vector<float>& v) {
  return std::any_of(v.begin(), v.end(), [](float x) { return x != 0.0f; });
}

TEST(CudaConvAlgo, MeasuredChoiceComputesWhatTheHeuristicChoiceComputes) {
  STRATA_SKIP_WITHOUT_GPU(kNoGpu);
  test::TempDir dir("strata_cuda_conv_algo");
  const ScopedEnv cache("STRATA_CUDNN_CACHE", dir.file("algos.txt"));
  const ScopedMathMode fp32(cuda::MathMode::kFP32);
  cuda::conv_algo_cache().forget_for_testing();
  ConvRun heuristic, measured;
  {
    const ScopedEnv mode("STRATA_CUDNN_ALGO", "heuristic");
    heuristic = run_conv_net();
  }
  {
    const ScopedEnv mode("STRATA_CUDNN_ALGO", "find");
    measured = run_conv_net();
  }
  EXPECT_CONTAINS(heuristic.description, "(heuristic)");
  EXPECT_CONTAINS(measured.description, "(measured)");
  for (const char* part : {"fwd ", "bwd-data ", "bwd-filter "}) EXPECT_CONTAINS(measured.description, part);
  ASSERT_TRUE(any_nonzero(heuristic.input_grad)) << "the input gradient was not computed";
  // FFT and Winograd round differently from GEMM-based algorithms.
  constexpr float kRel = 1e-3f;
  expect_close("top", heuristic.top, measured.top, kRel);
  expect_close("input gradient", heuristic.input_grad, measured.input_grad, kRel);
  expect_close("weight gradient", heuristic.weight_grad, measured.weight_grad, kRel);
  expect_close("bias gradient", heuristic.bias_grad, measured.bias_grad, kRel);
}

TEST(CudaConvAlgo, TheCacheFileIsWrittenAndALaterLayerReusesIt) {
  STRATA_SKIP_WITHOUT_GPU(kNoGpu);
  test::TempDir dir("strata_cuda_conv_algo");
  const std::string path = dir.file("sub/algos.txt");  // the folder is created
  const ScopedEnv cache("STRATA_CUDNN_CACHE", path);
  const ScopedEnv mode("STRATA_CUDNN_ALGO", "find");
  const ScopedMathMode fp32(cuda::MathMode::kFP32);
  cuda::ConvAlgoCache& c = cuda::conv_algo_cache();
  c.forget_for_testing();

  const cuda::ConvAlgoCacheStats s0 = c.stats();
  const ConvRun first = run_conv_net();
  EXPECT_EQ(c.stats().measurements, s0.measurements + 1);
  EXPECT_CONTAINS(first.description, "(measured)");
  ASSERT_TRUE(file_exists(path));
  const cuda::ConvAlgoTable table = cuda::parse_conv_algo_file(read_file_bytes(path));
  ASSERT_EQ(table.size(), 1u);
  EXPECT_EQ(table.begin()->first.first, cuda::current_device_key());
  EXPECT_CONTAINS(table.begin()->first.second, "n8 c16 h30 w30 k24 r3x3 p1x1");

  c.forget_for_testing();  // as a new process: only the file remains
  const ConvRun second = run_conv_net();
  EXPECT_EQ(c.stats().measurements, s0.measurements + 1) << "the second layer measured again";
  EXPECT_EQ(c.stats().file_hits, s0.file_hits + 1);
  EXPECT_CONTAINS(second.description, "(from the cache file)");

  const ConvRun third = run_conv_net();  // same process: from memory
  EXPECT_EQ(c.stats().measurements, s0.measurements + 1);
  EXPECT_CONTAINS(third.description, "(remembered)");
  expect_close("top", first.top, third.top, 1e-6f);
}

}  // namespace
}  // namespace strata

#endif  // STRATA_WITH_CUDA
