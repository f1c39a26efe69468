// Shared by the sharded data-parallel tests (parallel_sharded_test.cpp,
// parallel_sharded_memory_test.cpp): a two-layer MLP on a synthetic
// classification set (199 weights, divisible by neither 2 nor 3 nor 4), its
// solver, a data-parallel configuration per stage, and a fixture that
// writes the data and trains on one thread per rank.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "framework/config/config.h"
#include "framework/cpu/threads.h"
#include "framework/io/npy.h"
#include "framework/solver/solver_config.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "tests/parallel_test_util.h"
#include "tests/test_util.h"

namespace strata::parallel::sharded_test {

constexpr int kSamples = 96;
constexpr int kInputs = 8;
constexpr int kClasses = 4;
// fc1 8x15 + 15, fc2 15x4 + 4: 199 values, divisible by neither 2 nor 3.
constexpr int kHidden = 15;

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("strata_zero_test") {}
};

struct Spec {
  std::string type = "SGD";
  double clip = 0.0;
  int batch = 12;  // per rank
  int iter_size = 1;
  int max_iter = 12;
  int snapshot = 0;
  std::string prefix = "snap/run";
};

inline SolverConfig make_config(const TempDir& dir, const Spec& s) {
  const std::string net =
      "name: 'mlp'\n"
      "layer { name: 'data' type: 'ArrayData' top: 'data' top: 'label'\n"
      "  array_data_param { source: 'x.npy' label_source: 'y.npy' batch_size: " + std::to_string(s.batch) +
      " shuffle: true } }\n"
      "layer { name: 'fc1' type: 'InnerProduct' bottom: 'data' top: 'fc1'\n"
      "  inner_product_param { num_output: " + std::to_string(kHidden) +
      " weight_filler { type: 'xavier' } bias_filler { type: 'constant' value: 0.1 } } }\n"
      "layer { name: 'relu1' type: 'ReLU' bottom: 'fc1' top: 'fc1' }\n"
      "layer { name: 'fc2' type: 'InnerProduct' bottom: 'fc1' top: 'fc2'\n"
      "  inner_product_param { num_output: " + std::to_string(kClasses) + " weight_filler { type: 'xavier' } } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'fc2' bottom: 'label' top: 'loss' }\n";
  const std::string momentum = s.type == "Adam" ? "momentum: 0.9 momentum2: 0.999" : "momentum: 0.9";
  const std::string lr = s.type == "Adam" ? "0.01" : "0.2";
  std::string solver = "net_param { " + net + " }\ntype: '" + s.type + "' base_lr: " + lr + " " + momentum +
                       " weight_decay: 0.001\nlr_policy: 'step' gamma: 0.5 stepsize: 5\nmax_iter: " +
                       std::to_string(s.max_iter) + " iter_size: " + std::to_string(s.iter_size) +
                       "\ndisplay: 0 snapshot: " + std::to_string(s.snapshot) +
                       " snapshot_after_train: false snapshot_prefix: '" + s.prefix + "' random_seed: 5\n";
  if (s.clip > 0) solver += "clip_gradients: " + std::to_string(s.clip) + "\n";
  const std::string path = dir.file("solver.prototxt");
  return parse_solver_config(parse_config_text(solver, path), path);
}

inline DataParallelConfig dp_config(ShardStage shard, double bucket_mb, Overlap overlap = Overlap::kOn,
                             GradCompression compression = GradCompression::kNone) {
  DataParallelConfig c;
  c.shard = shard;
  c.bucket_mb = bucket_mb;
  c.overlap = overlap;
  c.compression = compression;
  return c;
}

constexpr double kTinyBuckets = 1e-4;  // ~100 bytes: one parameter per bucket
constexpr double kOneBucket = 25.0;

class ShardedTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    set_num_threads(1);
    const parallel_test::Classification data = parallel_test::make_classification(kSamples, kInputs, kClasses, 7);
    write_npy(dir_.file("x.npy"), DType::kF32, {kSamples, kInputs}, data.x.data());
    write_npy(dir_.file("y.npy"), DType::kI32, {kSamples}, data.y.data());
  }
  void TearDown() override { set_num_threads(0); }
  TempDir dir_;
};

}  // namespace strata::parallel::sharded_test
