// CPU against CUDA for every registered layer: each LayerExample through
// check_cpu_vs_cuda (framework/layer_check.h: the same config, seed,
// parameters and inputs on both devices; tops, parameters after forward,
// bottom and parameter gradients compared) within a tolerance that fits the
// GPU math mode (FP32, TF32, BF16).
// A zero batch must run on the GPU too. Also: in-place layers give
// the same results in place, TRAIN Dropout keeps the right fraction, and
// ArrayData serves the same batches on both devices.
// Skipped, with the reason, in a build without CUDA or on a machine without a GPU.
// That every registered layer has a CUDA path at all needs no GPU: see
// tests/layer_cuda_coverage_test.cpp.

#include <gtest/gtest.h>

#ifndef STRATA_WITH_CUDA

TEST(LayerCuda, NeedsACudaBuild) {
  GTEST_SKIP() << "this build has no CUDA backend (nvcc was not found at configure time); "
                  "the CPU-against-CUDA layer comparison needs a CUDA build and a GPU";
}

#else

#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "framework/layer_check.h"
#include "framework/layer_registry.h"
#include "framework/io/npy.h"
#include "tests/layer_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using test_util::LayerHarness;

constexpr uint64_t kSeed = 20240601;

// Why a test below skips on a machine without a GPU.
constexpr const char* kNoGpuNote = "the CUDA layer comparison cannot run; the CPU suite covers the layers";

Device gpu() { return Device::cuda(0); }

// Host <-> device through plain synchronous copies after a device-wide
// synchronisation, so the test depends only on device_data<>() being a device pointer.
std::vector<float> download(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (!v.empty()) {
    EXPECT_EQ(cudaMemcpy(v.data(), t.device_data<float>(), v.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return v;
}

void upload(Tensor& t, const std::vector<float>& v) {
  ASSERT_EQ(static_cast<size_t>(t.numel()), v.size());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (!v.empty()) {
    ASSERT_EQ(cudaMemcpy(t.device_data<float>(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

Tensor device_tensor(const Shape& s) { return Tensor(s, DType::kF32, gpu()); }

std::unique_ptr<Blob> device_blob(const Shape& s) {
  auto b = std::make_unique<Blob>();
  b->data = device_tensor(s);
  b->diff = device_tensor(s);
  return b;
}

struct Tolerance {
  cuda::MathMode mode;
  float rel;  // |cpu - gpu| <= rel * max(1, |cpu|, |gpu|)
};

void PrintTo(const Tolerance& t, std::ostream* os) { *os << cuda::math_mode_name(t.mode); }

// TF32 keeps 10 mantissa bits and BF16 7, so GEMM/convolution results carry
// relative errors of ~1e-3 and ~1e-2; FP32 differs from the CPU only by
// summation order and the GPU's exp/tanh.
const Tolerance kModes[] = {{cuda::MathMode::kFP32, kCudaCheckFp32Tolerance}, {cuda::MathMode::kTF32, 2e-2f},
                            {cuda::MathMode::kBF16, 6e-2f}};

void expect_close(const std::string& what, const std::vector<float>& cpu, const std::vector<float>& gpu_values,
                  float rel) {
  ASSERT_EQ(cpu.size(), gpu_values.size()) << what << ": sizes differ";
  int reported = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double a = cpu[i], b = gpu_values[i];
    const double scale = std::max({std::fabs(a), std::fabs(b), 1.0});
    if (!(std::fabs(a - b) <= rel * scale)) {
      if (reported++ < 5) {
        ADD_FAILURE() << what << " element " << i << ": CPU " << a << " vs CUDA " << b << " (tolerance " << rel
                      << " x " << scale << ")";
      }
    }
  }
  if (reported > 5) ADD_FAILURE() << what << ": " << reported << " mismatches in all";
}

bool has_nan(const std::vector<float>& v) {
  return std::any_of(v.begin(), v.end(), [](float x) { return std::isnan(x); });
}

struct Case {
  std::string type;
  int example = 0;
  Tolerance tol;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.type << " example " << c.example << " " << cuda::math_mode_name(c.tol.mode);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const LayerRegistry& reg = LayerRegistry::instance();
  for (const Tolerance& t : kModes) {
    for (const std::string& type : reg.types()) {
      const size_t n = reg.find(type).schema().examples.size();
      for (size_t i = 0; i < n; ++i) cases.push_back({type, static_cast<int>(i), t});
    }
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.type + "_" + std::to_string(info.param.example) + "_" +
                     cuda::math_mode_name(info.param.tol.mode);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// Restores the process-wide math mode after a test.
class MathModeScope {
 public:
  explicit MathModeScope(cuda::MathMode m) : saved_(cuda::math_mode()) { cuda::set_math_mode(m); }
  ~MathModeScope() { cuda::set_math_mode(saved_); }

 private:
  cuda::MathMode saved_;
};

class LayerCudaTest : public ::testing::TestWithParam<Case> {
 protected:
  LayerExample example() const {
    return LayerRegistry::instance().find(GetParam().type).schema().examples.at(
        static_cast<size_t>(GetParam().example));
  }
};

TEST_P(LayerCudaTest, MatchesCpu) {
  STRATA_SKIP_WITHOUT_GPU(kNoGpuNote);
  const Case& c = GetParam();
  const MathModeScope mode(c.tol.mode);
  const LayerExample ex = example();
  SCOPED_TRACE(c.type + " {" + ex.config + "}");
  // The comparison `strata check-layers` runs (framework/layer_check.h), here in every math mode.
  for (const std::string& problem : check_cpu_vs_cuda(c.type, ex, c.tol.rel, kSeed)) ADD_FAILURE() << problem;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A zero batch runs forward and backward on the GPU, from setup and after a
// full batch, without NaN in the tops that do not follow the batch (losses).
TEST_P(LayerCudaTest, ZeroBatch) {
  STRATA_SKIP_WITHOUT_GPU(kNoGpuNote);
  const Case& c = GetParam();
  if (c.tol.mode != cuda::MathMode::kFP32) GTEST_SKIP() << "zero batch: checked once, in FP32";
  const LayerExample ex = example();
  SCOPED_TRACE(c.type + " {" + ex.config + "}");
  LayerHarness h = test_util::make_harness(c.type, ex, kSeed);
  h.setup();
  CudaTwin g = make_cuda_twin(c.type, ex.config, ex.phase, kSeed, h, gpu());
  g.setup_from(h);
  g.forward();
  for (Blob* b : g.bottom) {
    Shape s = b->shape();
    if (!s.empty()) s[0] = 0;
    b->resize(s);
  }
  g.forward();
  Rng rng(kSeed + 2);
  for (size_t k = 0; k < g.top.size(); ++k) {
    const float lw = g.layer->default_loss_weight(static_cast<int>(k));
    std::vector<float> w(static_cast<size_t>(g.top[k]->numel()));
    for (float& v : w) v = lw != 0.0f ? lw : rng.gaussian(0.0f, 1.0f);
    g.top[k]->diff.resize(g.top[k]->shape());
    upload(g.top[k]->diff, w);
    const Tensor& t = g.top[k]->data;
    if (!(t.ndim() >= 1 && t.dim(0) == 0)) {
      EXPECT_FALSE(has_nan(download(t))) << "top " << k << " has NaN for a zero batch";
    }
  }
  g.backward(gradient_targets(h, ex));
  for (const LayerParam& p : g.layer->params()) {
    EXPECT_FALSE(has_nan(download(p.blob->diff))) << "param '" << p.name << "' gradient has NaN after a zero batch";
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(AllLayers, LayerCudaTest, ::testing::ValuesIn(all_cases()), case_name);

// Layers that may run in place give the same results in place on the GPU as
// out of place on the CPU.
TEST(LayerCudaInPlace, MatchesCpuOutOfPlace) {
  STRATA_SKIP_WITHOUT_GPU(kNoGpuNote);
  const LayerRegistry& reg = LayerRegistry::instance();
  int checked = 0;
  for (const std::string& type : reg.types()) {
    const LayerSchema schema = reg.find(type).schema();
    for (const LayerExample& ex : schema.examples) {
      LayerHarness h = test_util::make_harness(type, ex, kSeed);
      if (!h.layer->supports_in_place() || h.bottom.size() != 1 || h.top.size() != 1) break;
      SCOPED_TRACE(type + " {" + ex.config + "} in place");
      h.setup();
      CudaTwin g = make_cuda_twin(type, ex.config, ex.phase, kSeed, h, gpu(), TwinInPlace::kYes);
      g.setup_from(h);
      h.forward();
      g.forward();
      expect_close("top", test_util::to_vector(h.top[0]->data), download(g.top[0]->data), 2e-4f);
      ++checked;
      if (!h.layer->can_backward_to(0)) continue;  // Threshold: forward only
      Rng rng(kSeed + 4);
      std::vector<float> dy(static_cast<size_t>(h.top[0]->numel()));
      for (float& v : dy) v = rng.gaussian(0.0f, 1.0f);
      h.top[0]->diff.resize(h.top[0]->shape());
      test_util::copy_into(h.top[0]->diff, dy);
      upload(g.top[0]->diff, dy);
      std::vector<LayerParam>& cp = h.layer->params();
      std::vector<LayerParam>& gp = g.layer->params();
      for (size_t p = 0; p < cp.size(); ++p) {
        cp[p].blob->diff.zero();
        upload(gp[p].blob->diff, std::vector<float>(static_cast<size_t>(cp[p].blob->numel()), 0.0f));
      }
      h.backward({true});
      g.backward({true});
      expect_close("bottom gradient", test_util::to_vector(h.bottom[0]->diff), download(g.bottom[0]->diff), 2e-4f);
      for (size_t p = 0; p < cp.size(); ++p) {
        expect_close("param '" + cp[p].name + "' gradient", test_util::to_vector(cp[p].blob->diff),
                     download(gp[p].blob->diff), 2e-4f);
      }
    }
  }
  EXPECT_GT(checked, 0) << "no in-place layer found";
}

// TRAIN Dropout: the GPU mask differs from the CPU's, so check its
// statistics: the kept fraction, the scaling, and a backward that uses the
// same mask; a restored RNG state replays the same mask.
TEST(LayerCudaDropout, TrainMaskStatistics) {
  STRATA_SKIP_WITHOUT_GPU(kNoGpuNote);
  const float ratio = 0.3f;
  LayerExample ex = layer_example("dropout_param { dropout_ratio: 0.3 }", {{64, 1000}});
  LayerHarness h = test_util::make_harness("Dropout", ex.config, ex.bottom_shapes, Phase::kTrain, kSeed);
  h.bottom[0]->data.fill(1.0f);
  CudaTwin g = make_cuda_twin("Dropout", ex.config, Phase::kTrain, kSeed, h, gpu());
  g.setup_from(h);
  const std::string state = g.layer->save_state();
  g.forward();
  const std::vector<float> y = download(g.top[0]->data);
  const float kept_value = 1.0f / (1.0f - ratio);
  int64_t dropped = 0;
  for (float v : y) {
    if (v == 0.0f) {
      ++dropped;
    } else {
      ASSERT_NEAR(v, kept_value, 1e-6f);
    }
  }
  const double fraction = static_cast<double>(dropped) / static_cast<double>(y.size());
  EXPECT_NEAR(fraction, ratio, 0.01) << "dropped fraction over " << y.size() << " elements";

  upload(g.top[0]->diff, std::vector<float>(y.size(), 1.0f));
  g.backward({true});
  EXPECT_EQ(download(g.bottom[0]->diff), y) << "backward must use the forward's mask";

  g.layer->load_state(state);
  g.forward();
  EXPECT_EQ(download(g.top[0]->data), y) << "the same RNG state must give the same mask";
  g.forward();
  EXPECT_NE(download(g.top[0]->data), y) << "the next forward must draw a new mask";
}

// ArrayData serves the same batches (data and labels) on both devices.
TEST(LayerCudaData, ArrayDataMatchesCpu) {
  STRATA_SKIP_WITHOUT_GPU(kNoGpuNote);
  test::TempDir dir("strata_cuda_data");
  std::vector<float> x(10 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  std::vector<int32_t> labels(10);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 4);
  write_npy(dir.file("x.npy"), DType::kF32, {10, 3}, x.data());
  write_npy(dir.file("y.npy"), DType::kI32, {10}, labels.data());
  const std::string config = "array_data_param { source: 'x.npy' label_source: 'y.npy' batch_size: 4 seed: 3 }";

  LayerContext ctx;
  ctx.phase = Phase::kTrain;
  ctx.seed = kSeed;
  ctx.base_dir = dir.path();
  const LayerRegistration& reg = LayerRegistry::instance().find("ArrayData");
  std::unique_ptr<Layer> cpu = reg.create(test_util::make_spec("ArrayData", config, 0, 2), ctx);
  ctx.device = gpu();
  std::unique_ptr<Layer> dev = reg.create(test_util::make_spec("ArrayData", config, 0, 2), ctx);
  Blob cd, cl;
  BlobVec ctop = {&cd, &cl};
  std::unique_ptr<Blob> gd = device_blob({0}), gl = device_blob({0});
  BlobVec gtop = {gd.get(), gl.get()};
  cpu->setup({}, ctop);
  dev->setup({}, gtop);
  for (int step = 0; step < 4; ++step) {  // past the end of the data: wraps and reshuffles
    SCOPED_TRACE("batch " + std::to_string(step));
    cpu->reshape({}, ctop);
    cpu->forward_cpu({}, ctop);
    dev->reshape({}, gtop);
    dev->forward_cuda({}, gtop);
    EXPECT_EQ(test_util::to_vector(cd.data), download(gd->data));
    EXPECT_EQ(test_util::to_vector(cl.data), download(gl->data));
  }
}

// ImageData serves the same batches (decoded images and labels) on both
// devices: random crops and flips depend only on the seed and sample.
TEST(LayerCudaData, ImageDataMatchesCpu) {
  STRATA_SKIP_WITHOUT_GPU(kNoGpuNote);
  test::TempDir dir("strata_cuda_images");
  const std::string images = std::string(STRATA_SOURCE_DIR) + "/tests/golden/images/";
  test::write_text(dir.file("list.txt"), images + "rgb.png 0\n" + images + "small.bmp 1\n" + images +
                                             "gray.png 2\n" + images + "alpha.png 1\n" + images + "tiny.jpg 0\n");
  const std::string config =
      "image_data_param { source: 'list.txt' batch_size: 2 seed: 5 threads: 1 } "
      "transform_param { resize: 12 crop_size: 8 crop: RANDOM mirror: true mean: 0.5 std: 0.25 }";
  LayerContext ctx;
  ctx.phase = Phase::kTrain;
  ctx.seed = kSeed;
  ctx.base_dir = dir.path();
  const LayerRegistration& reg = LayerRegistry::instance().find("ImageData");
  std::unique_ptr<Layer> cpu = reg.create(test_util::make_spec("ImageData", config, 0, 2), ctx);
  ctx.device = gpu();
  std::unique_ptr<Layer> dev = reg.create(test_util::make_spec("ImageData", config, 0, 2), ctx);
  ASSERT_TRUE(dev->has_cuda());
  Blob cd, cl;
  BlobVec ctop = {&cd, &cl};
  std::unique_ptr<Blob> gd = device_blob({0}), gl = device_blob({0});
  BlobVec gtop = {gd.get(), gl.get()};
  cpu->setup({}, ctop);
  dev->setup({}, gtop);
  for (int step = 0; step < 4; ++step) {  // past the end of the list: wraps into the next epoch
    SCOPED_TRACE("batch " + std::to_string(step));
    cpu->reshape({}, ctop);
    cpu->forward_cpu({}, ctop);
    dev->reshape({}, gtop);
    dev->forward_cuda({}, gtop);
    ASSERT_EQ(cd.shape(), gd->shape());
    EXPECT_EQ(test_util::to_vector(cd.data), download(gd->data));
    EXPECT_EQ(test_util::to_vector(cl.data), download(gl->data));
  }
}

// The math mode the GEMMs and convolutions use is a process-wide switch.
TEST(LayerCudaMath, MathModeRoundTrips) {
  const cuda::MathMode saved = cuda::math_mode();
  for (cuda::MathMode m : {cuda::MathMode::kTF32, cuda::MathMode::kBF16, cuda::MathMode::kFP32}) {
    cuda::set_math_mode(m);
    EXPECT_EQ(cuda::math_mode(), m);
  }
  EXPECT_EQ(cuda::cudnn_math_type(), CUDNN_FMA_MATH);
  EXPECT_STREQ(cuda::math_mode_name(cuda::MathMode::kTF32), "TF32");
  cuda::set_math_mode(saved);
}

}  // namespace
}  // namespace strata

#endif  // STRATA_WITH_CUDA
