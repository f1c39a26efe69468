// Nets and solvers on a CUDA device: the checks at net setup, training the
// bundled digits on the GPU to the CPU's accuracy, snapshots that move
// between the GPU and the CPU, and the blobs' memory by lifetime on the GPU. Skipped with the reason without a GPU; a
// build without CUDA checks that asking for one is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "framework/net.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "tests/test_util.h"
#ifdef STRATA_WITH_CUDA
#include "framework/cuda/device_api.h"
#endif

namespace strata {
namespace {

const char* kTinyNet = R"(
  name: "tiny"
  layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
  layer { name: "fc" type: "InnerProduct" bottom: "x" top: "fc" inner_product_param { num_output: 2 } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "y" top: "loss" }
)";

#ifndef STRATA_WITH_CUDA

TEST(CudaNetTest, CpuOnlyBuildRejectsACudaNetClearly) {
  NetOptions o;
  o.device = Device::cuda(0);
  const std::string msg = test::error_of<ConfigError>([&] { Net net(parse_config_text(kTinyNet, "t.prototxt"), o); });
  EXPECT_CONTAINS(msg, "no CUDA backend");
  EXPECT_CONTAINS(msg, "--device cpu");
}

#else


TEST(CudaNetTest, LayerWithoutCudaIsNamedAtSetup) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA net is compile-tested only");
  // Any registered type that has no CUDA implementation (if there is one).
  std::string host_only;
  for (const std::string& type : LayerRegistry::instance().types()) {
    LayerSpec spec;
    spec.name = "probe";
    spec.type = type;
    try {
      if (!LayerRegistry::instance().find(type).create(spec, LayerContext{})->has_cuda()) {
        host_only = type;
        break;
      }
    } catch (const Error&) {
      // needs configuration to construct: not a candidate
    }
  }
  if (host_only.empty()) GTEST_SKIP() << "every registered layer type that builds without config has CUDA code";
  const std::string net = std::string(R"(name: "n"
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "suspect" type: ")") + host_only + R"(" bottom: "x" top: "y" })";
  NetOptions o;
  o.device = Device::cuda(0);
  const std::string msg = test::error_of<ConfigError>([&] { Net n(parse_config_text(net, "n.prototxt"), o); });
  EXPECT_CONTAINS(msg, "'suspect' (" + host_only + ")");
  EXPECT_CONTAINS(msg, "no CUDA implementation");
}

TEST(CudaNetTest, BlobsAndParametersLiveOnTheDevice) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA net is compile-tested only");
  NetOptions o;
  o.device = Device::cuda(0);
  Net net(parse_config_text(kTinyNet, "t.prototxt"), o);
  NetOptions cpu_o;
  Net ref(parse_config_text(kTinyNet, "t.prototxt"), cpu_o);
  for (size_t i = 0; i < net.params().size(); ++i) {
    EXPECT_EQ(net.params()[i].blob->data.device(), Device::cuda(0));
    // Same seed, fillers on the host: the same initial values.
    EXPECT_EQ(test::values(net.params()[i].blob->data.to(Device::cpu())), test::values(ref.params()[i].blob->data));
  }
  Tensor x({4, 3});
  for (int i = 0; i < 12; ++i) x.data<float>()[i] = 0.1f * static_cast<float>(i) - 0.5f;
  Tensor y({4});
  for (int i = 0; i < 4; ++i) y.data<float>()[i] = static_cast<float>(i % 2);
  net.blob("x").data.copy_from(x);
  net.blob("y").data.copy_from(y);
  ref.blob("x").data.copy_from(x);
  ref.blob("y").data.copy_from(y);
  EXPECT_NEAR(net.forward_backward(), ref.forward_backward(), 1e-5);
  test::expect_near(test::values(net.params()[0].blob->diff.to(Device::cpu())), test::values(ref.params()[0].blob->diff),
                    1e-5f);
}

// The bundled digits solver, shortened, writing snapshots under `dir`.
SolverConfig digits_config(const std::string& dir, int64_t max_iter) {
  SolverConfig c = load_solver_config(std::string(STRATA_SOURCE_DIR) + "/models/digits/solver.prototxt");
  c.max_iter = max_iter;
  c.lr.max_iter = max_iter;
  c.display = 0;
  c.test_interval = max_iter;
  c.test_initialization = false;
  c.snapshot = 0;
  c.snapshot_after_train = SnapshotAfterTrain::kNo;
  c.snapshot_prefix = dir + "/digits";
  c.log = dir + "/log.jsonl";
  return c;
}

double accuracy_of(Solver& s) {
  for (const auto& [name, value] : s.test()) {
    if (name == "accuracy") return value;
  }
  ADD_FAILURE() << "the digits TEST net has no accuracy output";
  return 0.0;
}

TEST(CudaNetTest, DigitsTrainToTheCpuAccuracyOnTheGpu) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA net is compile-tested only");
  test::TempDir dir("strata_cuda_digits");
  SolverOptions gpu_o;
  gpu_o.device = Device::cuda(0);
  Solver gpu(digits_config(dir.path(), 300), gpu_o);
  Solver cpu(digits_config(dir.path(), 300));
  gpu.solve();
  cpu.solve();
  const double a_gpu = accuracy_of(gpu), a_cpu = accuracy_of(cpu);
  EXPECT_GT(a_cpu, 0.9);
  EXPECT_NEAR(a_gpu, a_cpu, 0.02) << "GPU " << a_gpu << " vs CPU " << a_cpu;
  // The caching allocator: nothing allocated per step once training runs.
  const cuda::AllocatorStats before = cuda::memory_stats(0);
  gpu.step();
  EXPECT_EQ(cuda::memory_stats(0).device_mallocs, before.device_mallocs);
}

TEST(CudaNetTest, SnapshotsMoveBetweenGpuAndCpu) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA net is compile-tested only");
  test::TempDir dir("strata_cuda_snap");
  SolverOptions gpu_o;
  gpu_o.device = Device::cuda(0);
  Solver gpu(digits_config(dir.path(), 40), gpu_o);
  for (int i = 0; i < 20; ++i) gpu.step();
  const SnapshotPaths from_gpu = gpu.snapshot();
  const double acc_gpu = accuracy_of(gpu);

  // GPU snapshot -> CPU: identical weights and history, same accuracy, training goes on.
  Solver cpu(digits_config(dir.path(), 40));
  cpu.restore(from_gpu.state);
  EXPECT_EQ(cpu.iter(), 20);
  for (size_t i = 0; i < cpu.net().params().size(); ++i) {
    EXPECT_EQ(test::values(cpu.net().params()[i].blob->data),
              test::values(gpu.net().params()[i].blob->data.to(Device::cpu())));
  }
  const auto hc = cpu.optimizer().state_tensors(), hg = gpu.optimizer().state_tensors();
  for (size_t i = 0; i < hc.size(); ++i) EXPECT_EQ(test::values(hc[i].second), test::values(hg[i].second.to(Device::cpu())));
  EXPECT_NEAR(accuracy_of(cpu), acc_gpu, 0.01);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(std::isfinite(cpu.step()));

  // ... and back: CPU snapshot -> GPU.
  const SnapshotPaths from_cpu = cpu.snapshot();
  Solver gpu2(digits_config(dir.path(), 40), gpu_o);
  gpu2.restore(from_cpu.state);
  EXPECT_EQ(gpu2.iter(), 30);
  for (size_t i = 0; i < cpu.net().params().size(); ++i) {
    EXPECT_EQ(test::values(gpu2.net().params()[i].blob->data.to(Device::cpu())),
              test::values(cpu.net().params()[i].blob->data));
  }
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(std::isfinite(gpu2.step()));
}

// The blobs' memory by lifetime on the GPU: the device arena, its views and
// the checked mode's NaN fill, with every layer that declares what its
// backward reads (convolution, ReLU in place, pooling, flatten, a branch
// through Split, Concat, Eltwise SUM and MAX, Sigmoid, TanH, Dropout,
// Softmax, two losses) train as with a buffer per blob; cuDNN's
// deterministic algorithms keep the runs comparable.
SolverConfig branchy_solver(const std::string& memory) {
  const std::string text = R"(
net_param {
  layer { name: "data" type: "DummyData" top: "data" top: "label" top: "target"
          dummy_data_param { shape { dim: 8 dim: 2 dim: 10 dim: 10 } shape { dim: 8 } shape { dim: 8 dim: 5 }
                             data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 2 }
                             data_filler { type: "uniform" min: 0 max: 0.4 } } }
  layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
          convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
  layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
  layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
  layer { name: "flat" type: "Flatten" bottom: "pool1" top: "flat" }
  layer { name: "ipa" type: "InnerProduct" bottom: "flat" top: "a" inner_product_param { num_output: 16 weight_filler { type: "xavier" } } }
  layer { name: "sig" type: "Sigmoid" bottom: "a" top: "sa" }
  layer { name: "ipb" type: "InnerProduct" bottom: "flat" top: "b" inner_product_param { num_output: 16 weight_filler { type: "xavier" } } }
  layer { name: "tanh" type: "TanH" bottom: "b" top: "tb" }
  layer { name: "max" type: "Eltwise" bottom: "sa" bottom: "tb" top: "m" eltwise_param { operation: MAX } }
  layer { name: "cat" type: "Concat" bottom: "sa" bottom: "tb" top: "cat" }
  layer { name: "ipd" type: "InnerProduct" bottom: "cat" top: "d" inner_product_param { num_output: 16 weight_filler { type: "xavier" } } }
  layer { name: "sum" type: "Eltwise" bottom: "m" bottom: "d" top: "s" }
  layer { name: "drop" type: "Dropout" bottom: "s" top: "s" dropout_param { dropout_ratio: 0.3 } }
  layer { name: "ip2" type: "InnerProduct" bottom: "s" top: "ip2" inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
  layer { name: "prob" type: "Softmax" bottom: "ip2" top: "prob" }
  layer { name: "fit" type: "EuclideanLoss" bottom: "prob" bottom: "target" top: "fit" }
}
type: "Adam" base_lr: 0.01 max_iter: 4 display: 0 snapshot: 0 snapshot_after_train: false random_seed: 9
blob_memory: )" + memory + "\n";
  return parse_solver_config(parse_config_text(text, "solver.prototxt"), "solver.prototxt");
}

struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  BlobPlanReport plan;
};

Trained train_on(const SolverConfig& config, Device device) {
  SolverOptions o;
  o.device = device;
  Solver solver(config, o);
  Trained t;
  t.plan = solver.net().blob_plan();
  while (solver.iter() < config.max_iter) t.losses.push_back(solver.step());
  for (const NetParam& p : solver.net().params()) t.weights.push_back(test::values(p.blob->data.to(Device::cpu())));
  return t;
}

TEST(CudaNetTest, BlobsByLifetimeTrainAsSeparateOnTheGpu) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA net is compile-tested only");
  ASSERT_EQ(setenv("STRATA_CUDNN_DETERMINISTIC", "1", 1), 0);
  const Trained separate = train_on(branchy_solver("SEPARATE"), Device::cuda(0));
  const Trained planned = train_on(branchy_solver("BY_LIFETIME"), Device::cuda(0));
  const Trained checked = train_on(branchy_solver("BY_LIFETIME_CHECKED"), Device::cuda(0));
  unsetenv("STRATA_CUDNN_DETERMINISTIC");
  EXPECT_EQ(separate.plan.planned, 0);
  EXPECT_GT(planned.plan.planned, 0);
  EXPECT_LT(planned.plan.arena_bytes, planned.plan.separate_bytes) << planned.plan.str();
  ASSERT_EQ(planned.weights.size(), separate.weights.size());
  for (size_t i = 0; i < separate.weights.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    test::expect_near(planned.weights[i], separate.weights[i], 1e-5f);
    test::expect_near(checked.weights[i], separate.weights[i], 1e-5f);  // NaN, were a read undeclared
  }
  test::expect_near(planned.losses, separate.losses, 1e-5f);
  test::expect_near(checked.losses, separate.losses, 1e-5f);
}

// Activations stored in bf16 on the GPU (framework/net_storage.cpp, the
// casts of framework/cuda/cast.cu): the blobs are bf16 on the device, the
// three layouts train alike, and close to the same run on the CPU (whose
// GEMMs are f32 where the GPU's round their inputs to bf16).
TEST(CudaNetTest, StoredInBf16TrainsAlikeInEveryLayoutAndCloseToTheCpu) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA net is compile-tested only");
  auto bf16 = [](const std::string& memory) {
    SolverConfig c = branchy_solver(memory);
    c.precision = Precision::kBF16;
    return c;
  };
  ASSERT_EQ(setenv("STRATA_CUDNN_DETERMINISTIC", "1", 1), 0);
  const Trained separate = train_on(bf16("SEPARATE"), Device::cuda(0));
  const Trained planned = train_on(bf16("BY_LIFETIME"), Device::cuda(0));
  const Trained checked = train_on(bf16("BY_LIFETIME_CHECKED"), Device::cuda(0));
  const Trained f32 = train_on(branchy_solver("BY_LIFETIME"), Device::cuda(0));
  unsetenv("STRATA_CUDNN_DETERMINISTIC");
  const Trained cpu = train_on(bf16("BY_LIFETIME"), Device::cpu());
  {
    SolverOptions o;
    o.device = Device::cuda(0);
    Solver solver(bf16("BY_LIFETIME"), o);
    EXPECT_EQ(solver.net().blob("conv1").data.dtype(), DType::kBF16);
    EXPECT_EQ(solver.net().blob("conv1").data.device(), Device::cuda(0));
    EXPECT_GT(solver.net().storage_report().cast_calls, 0) << solver.net().storage_report().str();
  }
  EXPECT_LT(planned.plan.peak_values + planned.plan.peak_gradients, f32.plan.peak_values + f32.plan.peak_gradients)
      << planned.plan.str() << "\n" << f32.plan.str();
  ASSERT_EQ(planned.weights.size(), separate.weights.size());
  for (size_t i = 0; i < separate.weights.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    test::expect_near(planned.weights[i], separate.weights[i], 1e-5f);
    test::expect_near(checked.weights[i], separate.weights[i], 1e-5f);  // NaN, were a copy read unwritten
    test::expect_near(planned.weights[i], cpu.weights[i], 2e-2f);
  }
  test::expect_near(planned.losses, separate.losses, 1e-5f);
  test::expect_near(checked.losses, separate.losses, 1e-5f);
  test::expect_near(planned.losses, cpu.losses, 2e-2f);
}

// ReLU, Sigmoid and TanH take 16-bit blobs as they are on the GPU too
// (layers/neuron_layer.cuh): the same net in bf16 and f16 storage on the GPU
// and the CPU, its stored values and gradients within the dtype's rounding.
TEST(CudaNetTest, NeuronLayersTake16BitBlobsOnTheGpuAsOnTheCpu) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA net is compile-tested only");
  for (const char* type : {"ReLU", "Sigmoid", "TanH"}) {
    for (DType storage : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(type) + " " + dtype_name(storage));
      const std::string text = std::string(R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 4 dim: 32 } shape { dim: 4 dim: 8 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h" inner_product_param { num_output: 64 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "act" type: ")") + type + R"(" bottom: "h" top: "h" }
layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "o" inner_product_param { num_output: 8 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "o" bottom: "y" top: "loss" }
)";
      std::vector<std::vector<float>> values[2], grads[2];
      for (int side = 0; side < 2; ++side) {
        NetOptions o;
        o.storage_dtype = storage;
        o.blob_memory = BlobMemory::kSeparate;  // every value outlives the step
        o.device = side == 0 ? Device::cpu() : Device::cuda(0);
        Net net(parse_config_text(text, "net.prototxt"), o);
        EXPECT_EQ(net.blob("h").data.dtype(), storage);
        for (const char* in : {"x", "y"}) {
          Tensor host(net.blob(in).shape());
          for (int64_t k = 0; k < host.numel(); ++k) host.data<float>()[k] = std::sin(0.37f * static_cast<float>(k));
          net.blob(in).data.copy_from(host.to(net.device()));
        }
        net.forward();
        net.backward();
        for (const char* b : {"h", "o"}) {
          Tensor wide(net.blob(b).shape());
          cast_into(wide, net.blob(b).data.to(Device::cpu()));
          values[side].push_back(test::values(wide));
        }
        for (const NetParam& p : net.params()) grads[side].push_back(test::values(p.blob->diff.to(Device::cpu())));
      }
      const float tol = storage == DType::kBF16 ? 1e-2f : 2e-3f;
      for (size_t k = 0; k < values[0].size(); ++k) test::expect_near(values[1][k], values[0][k], tol);
      for (size_t k = 0; k < grads[0].size(); ++k) test::expect_near(grads[1][k], grads[0][k], tol);
    }
  }
}

// A convolution and an attention block: the GPU's scratch (cuDNN's
// workspace, attention's temporaries) and what attention keeps (q, k, v,
// the probabilities, the context) are placed by the plan on the device.
SolverConfig attention_solver(const std::string& memory, int batch) {
  const std::string text = R"(
net_param {
  layer { name: "data" type: "DummyData" top: "data" top: "label"
          dummy_data_param { shape { dim: )" + std::to_string(batch) + R"( dim: 4 dim: 16 dim: 16 } shape { dim: )" +
                           std::to_string(batch) + R"( }
                             data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 2 } } }
  layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
          convolution_param { num_output: 32 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
  layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
  layer { name: "tokens" type: "Reshape" bottom: "conv" top: "tokens" reshape_param { shape { dim: 0 dim: 32 dim: 256 } } }
  layer { name: "ln" type: "LayerNorm" bottom: "tokens" top: "ln" }
  layer { name: "attn" type: "MultiHeadAttention" bottom: "ln" top: "attn" attention_param { num_heads: 4 } }
  layer { name: "ip" type: "InnerProduct" bottom: "attn" top: "ip" inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
}
type: "SGD" momentum: 0.9 base_lr: 0.01 max_iter: 3 display: 0 snapshot: 0 snapshot_after_train: false random_seed: 4
blob_memory: )" + memory + "\n";
  return parse_solver_config(parse_config_text(text, "solver.prototxt"), "solver.prototxt");
}

TEST(CudaNetTest, PlannedScratchAndAttentionsKeptDataTrainAsSeparateOnTheGpu) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA net is compile-tested only");
  ASSERT_EQ(setenv("STRATA_CUDNN_DETERMINISTIC", "1", 1), 0);
  const Trained separate = train_on(attention_solver("SEPARATE", 8), Device::cuda(0));
  const Trained planned = train_on(attention_solver("BY_LIFETIME", 8), Device::cuda(0));
  const Trained checked = train_on(attention_solver("BY_LIFETIME_CHECKED", 8), Device::cuda(0));
  unsetenv("STRATA_CUDNN_DETERMINISTIC");
  // Attention's forward and backward at least (the convolution's too when its algorithms take a workspace).
  EXPECT_GE(planned.plan.scratch_calls, 2) << planned.plan.str();
  EXPECT_GT(planned.plan.peak_kept + planned.plan.peak_scratch, 0u) << planned.plan.str();
  ASSERT_EQ(planned.weights.size(), separate.weights.size());
  for (size_t i = 0; i < separate.weights.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    test::expect_near(planned.weights[i], separate.weights[i], 1e-5f);
    test::expect_near(checked.weights[i], separate.weights[i], 1e-5f);  // NaN, were scratch kept across calls
  }
  test::expect_near(planned.losses, separate.losses, 1e-5f);
  test::expect_near(checked.losses, separate.losses, 1e-5f);
}

// What the start line plans is what training takes: the caching allocator's
// peak over steps (after the algorithms were chosen at setup) is within 5%
// (and 4 MiB of small buffers: losses, reductions) of the plan.
TEST(CudaNetTest, ThePlanMatchesTheGpuPeak) {
  STRATA_SKIP_WITHOUT_GPU("the CUDA net is compile-tested only");
  SolverOptions o;
  o.device = Device::cuda(0);
  Solver solver(attention_solver("BY_LIFETIME", 64), o);
  const size_t plan = memory_report({&solver.net(), solver.test_net()}).total();
  cuda::reset_peak_memory_stats(0);
  for (int i = 0; i < 3; ++i) solver.step();
  const size_t peak = cuda::memory_stats(0).peak_allocated_bytes;
  EXPECT_LE(static_cast<double>(peak), 1.05 * static_cast<double>(plan) + 4.0 * (1 << 20))
      << "plan " << plan << " B, peak " << peak << " B: " << solver.net().blob_plan().str();
  EXPECT_GE(static_cast<double>(peak), 0.9 * static_cast<double>(plan)) << "plan " << plan << " B, peak " << peak;
}

#endif  // STRATA_WITH_CUDA

}  // namespace
}  // namespace strata
