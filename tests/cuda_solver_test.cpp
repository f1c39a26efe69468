// Solver pieces of the CUDA backend: the FP16 loss scaler (pure logic, runs
// everywhere), the precision key, the overflow check of gradients, and on a
// GPU the fused optimizer kernels against the CPU optimizers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/solver/loss_scaler.h"
#include "framework/solver/optimizer.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "tests/solver_test_util.h"
#include "tests/test_util.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {
namespace {

TEST(LossScalerTest, OverflowSkipsTheStepAndHalvesTheScale) {
  LossScalerOptions o;
  o.initial_scale = 1024;
  o.growth_interval = 3;
  LossScaler s(o);
  EXPECT_EQ(s.update(true), StepDecision::kSkip);
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.update(false), StepDecision::kApply);
  EXPECT_EQ(s.update(false), StepDecision::kApply);
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.update(false), StepDecision::kApply);  // third good step in a row: grows
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.good_steps(), 0);
}

TEST(LossScalerTest, AnOverflowRestartsTheGrowthCount) {
  LossScalerOptions o;
  o.initial_scale = 8;
  o.growth_interval = 2;
  LossScaler s(o);
  s.update(false);
  s.update(true);  // 4, count reset
  s.update(false);
  EXPECT_EQ(s.scale(), 4);
  s.update(false);
  EXPECT_EQ(s.scale(), 8);
}

TEST(LossScalerTest, NeverBelowTheMinimumAndStateRestores) {
  LossScalerOptions o;
  o.initial_scale = 2;
  LossScaler s(o);
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 1);
  s.set_state(4096, 7);
  EXPECT_EQ(s.scale(), 4096);
  EXPECT_EQ(s.good_steps(), 7);
}

TEST(LossScalerTest, BadOptionsAreConfigErrors) {
  LossScalerOptions o;
  o.backoff = 1.5;
  EXPECT_CONTAINS(test::error_of<ConfigError>([&] { LossScaler s(o); }), "backoff");
}

TEST(PrecisionConfigTest, ParsesTheKeysAndKeepsFp32Fingerprints) {
  const SolverConfig fp32 = solver_test::parse_solver("net: \"n.prototxt\" base_lr: 0.1 max_iter: 10\n");
  EXPECT_EQ(fp32.precision, Precision::kFP32);
  const SolverConfig fp16 = solver_test::parse_solver(
      "net: \"n.prototxt\" base_lr: 0.1 max_iter: 10 precision: FP16 initial_loss_scale: 128 "
      "loss_scale_growth_interval: 50\n");
  EXPECT_EQ(fp16.precision, Precision::kFP16);
  EXPECT_EQ(fp16.initial_loss_scale, 128);
  EXPECT_EQ(fp16.loss_scale_growth_interval, 50);
  EXPECT_NE(fp16.fingerprint(), fp32.fingerprint());
  EXPECT_CONTAINS(fp16.summary(), "precision FP16");
  EXPECT_EQ(solver_test::parse_solver("net: \"n.prototxt\" base_lr: 0.1 precision: BF16\n").precision, Precision::kBF16);
  EXPECT_EQ(solver_test::parse_solver("net: \"n.prototxt\" base_lr: 0.1 precision: TF32\n").precision, Precision::kTF32);
  EXPECT_CONTAINS(test::error_of<ConfigError>([] { solver_test::parse_solver("net: \"n.prototxt\" base_lr: 0.1 precision: FP8\n"); }),
                  "precision");
  EXPECT_CONTAINS(test::error_of<ConfigError>(
                      [] { solver_test::parse_solver("net: \"n.prototxt\" base_lr: 0.1 initial_loss_scale: 0\n"); }),
                  "initial_loss_scale");
}

const char* kTinyNet = R"(
  name: "tiny"
  layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
  layer { name: "fc" type: "InnerProduct" bottom: "x" top: "fc" inner_product_param { num_output: 2 } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "y" top: "loss" }
)";

// BF16 and FP16 store activations reduced on the CPU too (computing in f32:
// tests/storage_dtype_test.cpp); TF32, a tensor-core mode, is CUDA's alone.
TEST(PrecisionConfigTest, Tf32OnTheCpuIsAConfigError) {
  SolverConfig c = solver_test::parse_solver(std::string("net_param {") + kTinyNet + "} base_lr: 0.1 precision: TF32\n");
  const std::string msg = test::error_of<ConfigError>([&] { Solver s(c); });
  EXPECT_CONTAINS(msg, "precision TF32 is a tensor-core mode of CUDA devices");
  for (const char* p : {"BF16", "FP16"}) {
    SolverConfig r = solver_test::parse_solver(std::string("net_param {") + kTinyNet + "} base_lr: 0.1 precision: " + p + "\n");
    Solver s(r);
    EXPECT_EQ(s.net().blob("fc").data.dtype(), std::string(p) == "BF16" ? DType::kBF16 : DType::kF16) << p;
    s.step();
  }
}

TEST(GradientCheckTest, ScaleAndCheckFindsInfAndNaN) {
  auto blob = std::make_shared<Blob>(Shape{3});
  NetParam p;
  p.name = "w";
  p.blob = blob;
  std::vector<NetParam> params = {p};
  float* g = blob->diff.data<float>();
  g[0] = 2.0f;
  g[1] = -4.0f;
  g[2] = 8.0f;
  EXPECT_TRUE(scale_gradients_check_finite(params, 0.5f));
  EXPECT_EQ(test::values(blob->diff), (std::vector<float>{1.0f, -2.0f, 4.0f}));
  g[1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scale_gradients_check_finite(params, 1.0f));
  g[1] = std::nanf("");
  EXPECT_FALSE(scale_gradients_check_finite(params, 1.0f));
}

#ifdef STRATA_WITH_CUDA

// Parameters with deterministic values and gradients, on `device`.
std::vector<NetParam> make_params(Device device, uint32_t seed) {
  std::vector<NetParam> out;
  const std::vector<Shape> shapes = {{70000}, {3, 5}, {1}, {0}, {200001}};  // more than one chunk, empty, odd
  uint32_t s = seed;
  auto next = [&] {
    s = s * 1664525u + 1013904223u;
    return static_cast<float>((s >> 8) & 0xffff) / 65536.0f - 0.5f;
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    Blob host(shapes[i]);
    for (int64_t k = 0; k < host.numel(); ++k) {
      host.data.data<float>()[k] = next();
      host.diff.data<float>()[k] = next();
    }
    NetParam p;
    p.name = "p" + std::to_string(i);
    p.blob = std::make_shared<Blob>();
    p.blob->data = host.data.to(device);
    p.blob->diff = host.diff.to(device);
    p.lr_mult = i == 1 ? 2.0f : 1.0f;
    p.decay_mult = i == 2 ? 0.0f : 1.0f;
    out.push_back(p);
  }
  return out;
}

class FusedOptimizerTest : public ::testing::TestWithParam<SolverType> {};

TEST_P(FusedOptimizerTest, MatchesTheCpuOptimizer) {
  STRATA_SKIP_WITHOUT_GPU("the fused optimizer kernels are compile-tested only");
  OptimizerOptions o;
  o.type = GetParam();
  // Caffe's AdaGrad and RMSProp take no momentum (AdaDelta's is its decay).
  o.momentum = o.type == SolverType::kAdaGrad || o.type == SolverType::kRMSProp ? 0.0 : 0.9;
  o.rms_decay = 0.9;
  o.delta = 1e-6;
  o.weight_decay = 1e-3;
  std::vector<NetParam> cpu = make_params(Device::cpu(), 7), gpu = make_params(Device::cuda(0), 7);
  auto cpu_opt = make_optimizer(o), gpu_opt = make_optimizer(o);
  cpu_opt->prepare(cpu);
  gpu_opt->prepare(gpu);
  for (int step = 0; step < 3; ++step) {
    scale_gradients(cpu, 0.5f);
    scale_gradients(gpu, 0.5f);
    cpu_opt->update(cpu, 0.01);
    gpu_opt->update(gpu, 0.01);
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    test::expect_near(test::values(gpu[i].blob->data.to(Device::cpu())), test::values(cpu[i].blob->data), 1e-6f);
  }
  const auto hc = cpu_opt->state_tensors(), hg = gpu_opt->state_tensors();
  ASSERT_EQ(hc.size(), hg.size());
  for (size_t i = 0; i < hc.size(); ++i) {
    test::expect_near(test::values(hg[i].second.to(Device::cpu())), test::values(hc[i].second), 1e-6f);
  }
}

INSTANTIATE_TEST_SUITE_P(AllRules, FusedOptimizerTest,
                         ::testing::Values(SolverType::kSGD, SolverType::kNesterov, SolverType::kAdam,
                                           SolverType::kAdamW, SolverType::kAdaGrad, SolverType::kAdaDelta,
                                           SolverType::kRMSProp),
                         [](const auto& info) { return std::string(solver_type_name(info.param)); });

TEST(FusedGradientsTest, ClipAndOverflowCheckMatchTheCpu) {
  STRATA_SKIP_WITHOUT_GPU("the fused gradient kernels are compile-tested only");
  std::vector<NetParam> cpu = make_params(Device::cpu(), 3), gpu = make_params(Device::cuda(0), 3);
  const double nc = clip_gradients(cpu, 1.0), ng = clip_gradients(gpu, 1.0);
  EXPECT_NEAR(ng, nc, 1e-9 * nc);
  for (size_t i = 0; i < cpu.size(); ++i) {
    test::expect_near(test::values(gpu[i].blob->diff.to(Device::cpu())), test::values(cpu[i].blob->diff), 1e-6f);
  }
  EXPECT_TRUE(scale_gradients_check_finite(gpu, 2.0f));
  Tensor bad({1});
  bad.data<float>()[0] = std::numeric_limits<float>::infinity();
  gpu[2].blob->diff.copy_from(bad);
  EXPECT_FALSE(scale_gradients_check_finite(gpu, 1.0f));
}

// Results read one step later on a GPU (framework/solver/step_ledger.h): the
// loss, the finite flag, the FP16 scale and the update's go-ahead stay on the
// device. The weights must be those of the eager GPU step: bit for bit for
// SGD; Adam's bias corrections come from the device's pow in place of the
// host's, so within a few float ulps there. (The CPU twin of this test,
// tests/solver_step_results_test.cpp, runs in CI.)
TEST(CudaStepResultsTest, OneStepLaterTrainsTheEagerWeightsOnTheGpu) {
  STRATA_SKIP_WITHOUT_GPU("results read one step later on a GPU are compile-tested only");
  SolverOptions gpu;
  gpu.device = Device::cuda(0);
  for (const char* precision : {"FP32", "FP16", "BF16"}) {
    for (const char* rule : {"type: \"SGD\" momentum: 0.9 clip_gradients: 0.05", "type: \"Adam\" iter_size: 2"}) {
      SCOPED_TRACE(std::string(precision) + " " + rule);
      const std::string extra = std::string("max_iter: 30 display: 0 snapshot_after_train: false precision: ") +
                                precision + " initial_loss_scale: 1099511627776 loss_scale_growth_interval: 4 " +
                                rule + " step_results: ";
      auto run = [&](const char* results) {
        auto s = std::make_unique<Solver>(solver_test::parse_solver(solver_test::linear_solver(extra + results)), gpu);
        Solver cpu_twin(solver_test::parse_solver(solver_test::linear_solver("max_iter: 1")));
        solver_test::fill_inputs(cpu_twin.net());
        for (const char* blob : {"data", "label"}) s->net().blob(blob).data.copy_from(cpu_twin.net().blob(blob).data);
        s->solve();
        return s;
      };
      const std::unique_ptr<Solver> each = run("EACH_STEP"), later = run("ONE_STEP_LATER");
      EXPECT_FALSE(each->results_one_step_later());
      EXPECT_TRUE(later->results_one_step_later());
      const bool adam = std::string(rule).find("Adam") != std::string::npos;
      for (size_t i = 0; i < each->net().params().size(); ++i) {
        const std::vector<float> a = test::values(each->net().params()[i].blob->data.to(Device::cpu()));
        const std::vector<float> b = test::values(later->net().params()[i].blob->data.to(Device::cpu()));
        if (adam) {
          test::expect_near(b, a, 1e-6f);
        } else {
          EXPECT_EQ(b, a) << "parameter " << i;
        }
      }
      EXPECT_EQ(later->optimizer().steps(), each->optimizer().steps());
      EXPECT_NEAR(later->smoothed_loss(), each->smoothed_loss(), 1e-5 * std::abs(each->smoothed_loss()));
      if (std::string(precision) == "FP16") {
        EXPECT_EQ(later->loss_scaler()->scale(), each->loss_scaler()->scale());
        EXPECT_EQ(later->loss_scaler()->skipped_steps(), each->loss_scaler()->skipped_steps());
        EXPECT_GT(each->loss_scaler()->skipped_steps(), 5);  // 2^40 overflows f16: not vacuous
      }
    }
  }
  // AUTO reads one step later on a GPU.
  Solver automatic(solver_test::parse_solver(solver_test::linear_solver("max_iter: 1")), gpu);
  EXPECT_TRUE(automatic.results_one_step_later());
  EXPECT_EQ(automatic.step_results_summary(), "step results read one step later");
}

#endif  // STRATA_WITH_CUDA

}  // namespace
}  // namespace strata
