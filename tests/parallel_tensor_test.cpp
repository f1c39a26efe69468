// Tensor parallelism (framework/tensor_parallel.h, InnerProduct split:
// COLUMN | ROW, Convolution split: OUTPUT_CHANNELS, checkpoints that gather
// and slice split parameters). The ranks of a world are threads of this
// process talking over real TCP loopback connections. The central promise:
// a net split over T ranks trains like the unsplit net in one process (same
// loss at every iteration, same final weights, within float tolerance), and
// its checkpoints hold the full tensors, so they load on any layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/communicator.h"
#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/net.h"
#include "framework/io/npy.h"
#include "framework/io/safetensors.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "framework/tensor_parallel.h"
#include "framework/cpu/threads.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/model_parallel/process_grid.h"
#include "parallel/rendezvous/store.h"
#include "parallel/backends/tcp_communicator.h"
#include "tests/parallel_test_util.h"
#include "tests/test_util.h"

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;
using parallel_test::expect_no_errors;
using parallel_test::make_world;
using parallel_test::run_ranks;

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("strata_tp_test") {}
};

// ---- block helpers ----

TEST(TensorParallelBlocks, SliceAndGatherRoundTrip) {
  Tensor full({4, 6});
  for (int64_t i = 0; i < full.numel(); ++i) full.data<float>()[i] = static_cast<float>(i);
  for (int axis : {0, 1}) {
    for (int parts : {2}) {
      Tensor back(full.shape());
      for (int index = 0; index < parts; ++index) {
        ParamShard s;
        s.axis = axis;
        s.parts = parts;
        s.index = index;
        const Tensor block = slice_shard(full, s);
        EXPECT_EQ(full_shape(block.shape(), s), full.shape());
        EXPECT_EQ(block.dim(axis), full.dim(axis) / parts);
        // Element (i, j) of block 1 along axis 1 is full (i, 3 + j).
        if (axis == 1 && index == 1) {
          EXPECT_EQ(block.data<float>()[0], 3.0f);
        }
        if (axis == 0 && index == 1) {
          EXPECT_EQ(block.data<float>()[0], 12.0f);
        }
        copy_block_in(block.data<float>(), full.shape(), axis, parts, index, back.data<float>());
      }
      for (int64_t i = 0; i < full.numel(); ++i) EXPECT_EQ(back.data<float>()[i], full.data<float>()[i]);
    }
  }
  ParamShard three;
  three.axis = 1;
  three.parts = 4;
  EXPECT_THROW(shard_shape({4, 6}, three, "w"), ShapeError);
}

// The tensor forms (what the CUDA split layers use) cut and place the same
// blocks as the pointer forms, on the host and on a GPU.
void expect_tensor_blocks_match(Device device) {
  const Shape shape{3, 4, 2, 5};  // an NCHW top, split along C
  Tensor full(shape);
  for (int64_t i = 0; i < full.numel(); ++i) full.data<float>()[i] = static_cast<float>(i);
  const Tensor on_device = full.to(device);
  Tensor back(shape, DType::kF32, device);
  for (int index = 0; index < 2; ++index) {
    Tensor want({3, 2, 2, 5});
    copy_block_out(full.data<float>(), shape, 1, 2, index, want.data<float>());
    Tensor block({3, 2, 2, 5}, DType::kF32, device);
    copy_block_out(on_device, 1, 2, index, block);
    const Tensor got = block.to(Device::cpu());
    for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
    copy_block_in(block, 1, 2, index, back);
  }
  const Tensor whole = back.to(Device::cpu());
  for (int64_t i = 0; i < full.numel(); ++i) ASSERT_EQ(whole.data<float>()[i], full.data<float>()[i]) << i;
}

TEST(TensorParallelBlocks, TensorFormsMatchThePointerFormsOnTheHost) { expect_tensor_blocks_match(Device::cpu()); }

#ifdef STRATA_WITH_CUDA
TEST(TensorParallelBlocks, TensorFormsMatchThePointerFormsOnAGpu) {
  STRATA_SKIP_WITHOUT_GPU("the 2-D device copies of the CUDA split layers are not checked");
  expect_tensor_blocks_match(Device::cuda(0));
}
#endif

// ---- a small MLP on a synthetic data set ----

constexpr int kSamples = 96;
constexpr int kInputs = 8;
constexpr int kClasses = 4;

void write_data(const TempDir& dir) {
  const parallel_test::Classification data = parallel_test::make_classification(kSamples, kInputs, kClasses, 11);
  const std::vector<float>& x = data.x;
  const std::vector<int32_t>& y = data.y;
  write_npy(dir.file("x.npy"), DType::kF32, {kSamples, kInputs}, x.data());
  write_npy(dir.file("y.npy"), DType::kI32, {kSamples}, y.data());
  // The same samples as images [N, 2, 2, 2] for the convolution net, and as
  // tokens [N, 2, 4] for the ViT block.
  write_npy(dir.file("img.npy"), DType::kF32, {kSamples, 2, 2, 2}, x.data());
  write_npy(dir.file("tok.npy"), DType::kF32, {kSamples, 2, 4}, x.data());
  std::filesystem::create_directories(dir.file("snap"));
}

enum class NetKind { kMlp, kMlpTransposed, kConv, kVitBlock };

std::string data_layer(const std::string& source, int batch) {
  return "layer { name: 'data' type: 'ArrayData' top: 'data' top: 'label'\n"
         "  array_data_param { source: '" +
         source + "' label_source: 'y.npy' batch_size: " + std::to_string(batch) + " shuffle: false } }\n";
}

// The split keys are in the net either way: without a tensor-parallel
// communicator the layers are ordinary, which gives the reference run.
std::string net_text(NetKind kind, int batch) {
  const std::string fill = " weight_filler { type: 'gaussian' std: 0.3 } bias_filler { type: 'uniform' min: -0.1 max: 0.1 }";
  const std::string transpose = kind == NetKind::kMlpTransposed ? " transpose: true" : "";
  std::string net = "name: 'tp'\n";
  if (kind == NetKind::kVitBlock) {
    // One pre-norm transformer block as in models/vit (D 4, 2 heads, MLP 8),
    // attention split by heads, fc1 by columns, fc2 by rows; then a head.
    return net + data_layer("tok.npy", batch) +
           "layer { name: 'ln1' type: 'LayerNorm' bottom: 'data' top: 'ln1' layer_norm_param { eps: 1e-6 } }\n"
           "layer { name: 'attn' type: 'MultiHeadAttention' bottom: 'ln1' top: 'attn'\n"
           "  attention_param { num_heads: 2 split: HEADS" + fill + " } }\n"
           "layer { name: 'add1' type: 'Eltwise' bottom: 'data' bottom: 'attn' top: 'add1' }\n"
           "layer { name: 'ln2' type: 'LayerNorm' bottom: 'add1' top: 'ln2' layer_norm_param { eps: 1e-6 } }\n"
           "layer { name: 'fc1' type: 'InnerProduct' bottom: 'ln2' top: 'fc1'\n"
           "  inner_product_param { num_output: 8 axis: 2 split: COLUMN" + fill + " } }\n"
           "layer { name: 'gelu' type: 'GELU' bottom: 'fc1' top: 'fc1' }\n"
           "layer { name: 'fc2' type: 'InnerProduct' bottom: 'fc1' top: 'fc2'\n"
           "  inner_product_param { num_output: 4 axis: 2 split: ROW" + fill + " } }\n"
           "layer { name: 'add2' type: 'Eltwise' bottom: 'add1' bottom: 'fc2' top: 'add2' }\n"
           "layer { name: 'head' type: 'InnerProduct' bottom: 'add2' top: 'head'\n"
           "  inner_product_param { num_output: " + std::to_string(kClasses) + fill + " } }\n"
           "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'head' bottom: 'label' top: 'loss' }\n";
  }
  if (kind == NetKind::kConv) {
    net += data_layer("img.npy", batch) +
           "layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1'\n"
           "  convolution_param { num_output: 6 kernel_size: 2 pad: 1 split: OUTPUT_CHANNELS" + fill + " } }\n"
           "layer { name: 'relu0' type: 'ReLU' bottom: 'conv1' top: 'conv1' }\n"
           "layer { name: 'fc1' type: 'InnerProduct' bottom: 'conv1' top: 'fc1'\n"
           "  inner_product_param { num_output: 16 split: COLUMN" + fill + " } }\n";
  } else {
    net += data_layer("x.npy", batch) +
           "layer { name: 'fc1' type: 'InnerProduct' bottom: 'data' top: 'fc1'\n"
           "  inner_product_param { num_output: 16 split: COLUMN" + transpose + fill + " } }\n";
  }
  net +=
      "layer { name: 'relu1' type: 'ReLU' bottom: 'fc1' top: 'fc1' }\n"
      "layer { name: 'fc2' type: 'InnerProduct' bottom: 'fc1' top: 'fc2'\n"
      "  inner_product_param { num_output: 12 split: ROW" + transpose + fill + " } }\n"
      "layer { name: 'relu2' type: 'ReLU' bottom: 'fc2' top: 'fc2' }\n"
      "layer { name: 'fc3' type: 'InnerProduct' bottom: 'fc2' top: 'fc3'\n"
      "  inner_product_param { num_output: " + std::to_string(kClasses) + " split: COLUMN" + fill + " } }\n"
      "layer { name: 'fc4' type: 'InnerProduct' bottom: 'fc3' top: 'fc4'\n"
      "  inner_product_param { num_output: " + std::to_string(kClasses) + " split: ROW" + fill + " } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'fc4' bottom: 'label' top: 'loss' }\n";
  return net;
}

struct RunSpec {
  NetKind kind = NetKind::kMlp;
  int batch = 24;  // per data-parallel rank
  int max_iter = 12;
  int snapshot = 0;
};

SolverConfig make_config(const TempDir& dir, const RunSpec& s) {
  const std::string solver = "net_param { " + net_text(s.kind, s.batch) +
                             " }\n"
                             "type: 'SGD' base_lr: 0.1 momentum: 0.9 weight_decay: 0.001\n"
                             "max_iter: " + std::to_string(s.max_iter) +
                             "\ndisplay: 0 snapshot: " + std::to_string(s.snapshot) +
                             " snapshot_after_train: false snapshot_prefix: '" + dir.file("snap/run") +
                             "' random_seed: 5\n";
  const std::string path = dir.file("solver.prototxt");
  return parse_solver_config(parse_config_text(solver, path), path);
}

// Final weights by parameter name, full tensors.
using Weights = std::map<std::string, std::vector<float>>;

struct RunResult {
  std::vector<float> losses;
  Weights weights;
};

// Collective over the net's tensor-parallel groups.
Weights full_weights(const Net& net) {
  const std::map<int, Tensor> gathered = gather_split_params(net);
  Weights out;
  for (size_t i = 0; i < net.params().size(); ++i) {
    auto g = gathered.find(static_cast<int>(i));
    const Tensor& t = g == gathered.end() ? net.params()[i].blob->data : g->second;
    out[net.params()[i].name].assign(t.data<float>(), t.data<float>() + t.numel());
  }
  return out;
}

RunResult train_single(const TempDir& dir, const RunSpec& spec, const std::string& resume = "") {
  Solver solver(make_config(dir, spec));
  if (!resume.empty()) solver.restore(resume);
  RunResult r;
  if (spec.snapshot > 0) {
    solver.solve();  // snapshots are written by solve()
  } else {
    while (solver.iter() < spec.max_iter) r.losses.push_back(solver.step());
  }
  r.weights = full_weights(solver.net());
  return r;
}

// tp ranks (threads), all in one data-parallel rank: same data, same seed.
RunResult train_tp(const TempDir& dir, int tp, const RunSpec& spec, const std::string& resume = "") {
  auto comms = make_world(tp, "tp");
  std::vector<RunResult> results(static_cast<size_t>(tp));
  const SolverConfig config = make_config(dir, spec);
  expect_no_errors(run_ranks(tp, [&](int rank) {
    SolverOptions o;
    o.comm = comms[static_cast<size_t>(rank)].get();
    o.snapshots = rank == 0 ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
    Solver solver(config, o);
    if (!resume.empty()) solver.restore(resume);
    RunResult& r = results[static_cast<size_t>(rank)];
    if (spec.snapshot > 0) {
      solver.solve();  // snapshots are written by solve()
    } else {
      while (solver.iter() < spec.max_iter) r.losses.push_back(solver.step());
    }
    r.weights = full_weights(solver.net());
  }));
  for (int rank = 1; rank < tp; ++rank) {
    EXPECT_EQ(results[static_cast<size_t>(rank)].losses, results[0].losses) << "rank " << rank;
    EXPECT_EQ(results[static_cast<size_t>(rank)].weights, results[0].weights) << "rank " << rank;
  }
  return results[0];
}

void expect_close(const RunResult& got, const RunResult& want, double rel, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], rel * std::max(1.0f, std::fabs(want.losses[i])))
        << what << ": loss at iteration " << i;
  }
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  for (const auto& [name, w] : want.weights) {
    const auto it = got.weights.find(name);
    ASSERT_NE(it, got.weights.end()) << what << ": " << name;
    ASSERT_EQ(it->second.size(), w.size()) << what << ": " << name;
    double max_abs = 0.0, max_diff = 0.0;
    for (size_t i = 0; i < w.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(w[i])));
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(it->second[i]) - w[i]));
    }
    EXPECT_LE(max_diff, rel * std::max(1.0, max_abs)) << what << ": parameter " << name;
  }
}

class TensorParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_num_threads(1);  // several solvers share the cores
    write_data(dir_);
  }
  void TearDown() override { set_num_threads(0); }
  TempDir dir_;
};

TEST_F(TensorParallelTest, ColumnRowMlpTrainsLikeOneProcess) {
  RunSpec spec;
  const RunResult single = train_single(dir_, spec);
  EXPECT_LT(single.losses.back(), single.losses.front());  // it learns something
  expect_close(train_tp(dir_, 2, spec), single, 1e-4, "tp 2");
}

TEST_F(TensorParallelTest, TransposedWeightsAndFourRanks) {
  RunSpec spec;
  spec.kind = NetKind::kMlpTransposed;
  spec.max_iter = 6;
  const RunResult single = train_single(dir_, spec);
  expect_close(train_tp(dir_, 2, spec), single, 1e-4, "tp 2, transpose");
  spec.kind = NetKind::kMlp;
  expect_close(train_tp(dir_, 4, spec), train_single(dir_, spec), 1e-4, "tp 4");
}

TEST_F(TensorParallelTest, ConvolutionSplitByOutputChannels) {
  RunSpec spec;
  spec.kind = NetKind::kConv;
  spec.max_iter = 8;
  expect_close(train_tp(dir_, 2, spec), train_single(dir_, spec), 1e-4, "conv tp 2");
}

TEST_F(TensorParallelTest, VitBlockSplitByHeadsTrainsLikeOneProcess) {
  RunSpec spec;
  spec.kind = NetKind::kVitBlock;
  spec.max_iter = 8;
  const RunResult single = train_single(dir_, spec);
  EXPECT_LT(single.losses.back(), single.losses.front());
  expect_close(train_tp(dir_, 2, spec), single, 1e-4, "ViT block tp 2");
}

TEST_F(TensorParallelTest, AttentionHoldsItsHeadsRows) {
  RunSpec spec;
  spec.kind = NetKind::kVitBlock;
  auto comms = make_world(2, "tp");
  const SolverConfig config = make_config(dir_, spec);
  Solver reference(config);
  const Weights initial = full_weights(reference.net());
  expect_no_errors(run_ranks(2, [&](int rank) {
    SolverOptions o;
    o.comm = comms[static_cast<size_t>(rank)].get();
    Solver solver(config, o);
    const Net& net = solver.net();
    auto shape_of = [&](const std::string& name) { return net.params()[net.param_index(name)].blob->shape(); };
    EXPECT_EQ(shape_of("attn.in_proj_weight"), (Shape{6, 4}));  // q, k, v rows of one head
    EXPECT_EQ(shape_of("attn.in_proj_bias"), (Shape{6}));
    EXPECT_EQ(shape_of("attn.out_proj_weight"), (Shape{4, 2}));
    EXPECT_EQ(shape_of("attn.out_proj_bias"), (Shape{4}));
    // Rank r's in_proj rows are q, k and v rows [2r, 2r + 2) of the full weight.
    const Tensor& w = net.params()[net.param_index("attn.in_proj_weight")].blob->data;
    const std::vector<float>& full = initial.at("attn.in_proj_weight");
    for (int seg = 0; seg < 3; ++seg) {
      for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(w.data<float>()[seg * 8 + i], full[static_cast<size_t>(seg * 16 + rank * 8 + i)]);
      }
    }
    EXPECT_EQ(full_weights(net), initial) << "rank " << rank;
  }));
}

TEST_F(TensorParallelTest, SplitLayersHoldTheirBlocks) {
  RunSpec spec;
  auto comms = make_world(2, "tp");
  const SolverConfig config = make_config(dir_, spec);
  Solver reference(config);
  const Weights initial = full_weights(reference.net());
  expect_no_errors(run_ranks(2, [&](int rank) {
    SolverOptions o;
    o.comm = comms[static_cast<size_t>(rank)].get();
    Solver solver(config, o);
    const Net& net = solver.net();
    auto shape_of = [&](const std::string& name) { return net.params()[net.param_index(name)].blob->shape(); };
    EXPECT_EQ(shape_of("fc1.weight"), (Shape{8, kInputs}));  // COLUMN: rows
    EXPECT_EQ(shape_of("fc1.bias"), (Shape{8}));
    EXPECT_EQ(shape_of("fc2.weight"), (Shape{12, 8}));       // ROW: columns
    EXPECT_EQ(shape_of("fc2.bias"), (Shape{12}));            // ROW: whole
    // The split net starts from the unsplit net's weights.
    EXPECT_EQ(full_weights(net), initial) << "rank " << rank;
    EXPECT_TRUE(has_split_params(net));
  }));
  EXPECT_FALSE(has_split_params(reference.net()));
}

// ---- checkpoints ----

TEST_F(TensorParallelTest, WeightsFilesHoldFullTensorsAndLoadOnAnyLayout) {
  RunSpec spec;
  spec.max_iter = 3;
  const SolverConfig config = make_config(dir_, spec);
  // Train the unsplit net a little and save it: the reference file.
  Solver single(config);
  for (int i = 0; i < 3; ++i) single.step();
  save_weights(single.net(), dir_.file("single.safetensors"));
  const Weights want = full_weights(single.net());

  auto comms = make_world(2, "tp");
  expect_no_errors(run_ranks(2, [&](int rank) {
    SolverOptions o;
    o.comm = comms[static_cast<size_t>(rank)].get();
    Solver solver(config, o);
    const LoadReport report = load_weights(solver.net(), dir_.file("single.safetensors"));
    EXPECT_TRUE(report.missing.empty() && report.unexpected.empty()) << report.str();
    // Each rank now holds its blocks of the loaded weights.
    EXPECT_EQ(full_weights(solver.net()), want) << "rank " << rank;
    // Saving gathers (every rank of the group takes part; rank 0 writes).
    if (rank == 0) {
      save_weights(solver.net(), dir_.file("tp.safetensors"));
    } else {
      gather_split_params(solver.net());
    }
  }));
  // The tp file is the unsplit file, tensor for tensor.
  SafetensorsReader a(dir_.file("single.safetensors")), b(dir_.file("tp.safetensors"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const TensorView& v : a.tensors()) {
    const TensorView* w = b.find(v.name);
    ASSERT_NE(w, nullptr) << v.name;
    EXPECT_EQ(w->shape, v.shape) << v.name;
    ASSERT_EQ(w->nbytes, v.nbytes) << v.name;
    EXPECT_EQ(std::memcmp(w->data, v.data, v.nbytes), 0) << v.name;
  }
}

TEST_F(TensorParallelTest, SnapshotsResumeOnAnotherLayout) {
  // 12 iterations in one process are the reference. A tp = 2 run snapshots
  // at 6; one process resumes it; and a one-process snapshot resumes on
  // tp = 2. Both must end like the reference (momentum history included).
  RunSpec spec;
  const RunResult reference = train_single(dir_, spec);

  RunSpec first = spec;
  first.max_iter = 6;
  first.snapshot = 6;
  train_tp(dir_, 2, first);
  const std::string state = snapshot_paths(dir_.file("snap/run"), 6).state;
  ASSERT_TRUE(file_exists(state));
  {
    SafetensorsReader weights(snapshot_paths(dir_.file("snap/run"), 6).weights);
    EXPECT_EQ(weights.find("fc1.weight")->shape, (Shape{16, kInputs}));
    SafetensorsReader hist(state);
    EXPECT_EQ(hist.find("fc1.weight.momentum")->shape, (Shape{16, kInputs}));
    EXPECT_EQ(hist.find("fc2.weight.momentum")->shape, (Shape{12, 16}));
  }
  RunResult resumed = train_single(dir_, spec, state);
  RunResult tail = reference;
  tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 6);
  expect_close(resumed, tail, 1e-4, "tp 2 snapshot resumed in one process");

  // The other way round: a one-process snapshot resumed on tp = 2.
  TempDir other;
  write_data(other);
  train_single(other, first);
  const std::string state1 = snapshot_paths(other.file("snap/run"), 6).state;
  ASSERT_TRUE(file_exists(state1));
  expect_close(train_tp(other, 2, spec, state1), tail, 1e-4, "one-process snapshot resumed on tp 2");
}

// ---- errors ----

TEST_F(TensorParallelTest, IndivisibleSizesAreShapeErrors) {
  auto comms = make_world(2, "tp");
  const std::string ip =
      "name: 'bad'\n"
      "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 2 dim: 4 } } }\n"
      "layer { name: 'fc' type: 'InnerProduct' bottom: 'x' top: 'y'\n"
      "  inner_product_param { num_output: 5 split: COLUMN } }\n";
  const std::string conv =
      "name: 'bad'\n"
      "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 2 dim: 1 dim: 3 dim: 3 } } }\n"
      "layer { name: 'conv' type: 'Convolution' bottom: 'x' top: 'y'\n"
      "  convolution_param { num_output: 3 kernel_size: 1 split: OUTPUT_CHANNELS } }\n";
  const std::string grouped =
      "name: 'bad'\n"
      "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 2 dim: 2 dim: 3 dim: 3 } } }\n"
      "layer { name: 'conv' type: 'Convolution' bottom: 'x' top: 'y'\n"
      "  convolution_param { num_output: 4 kernel_size: 1 group: 2 split: OUTPUT_CHANNELS } }\n";
  expect_no_errors(run_ranks(2, [&](int rank) {
    NetOptions o;
    o.comm = comms[static_cast<size_t>(rank)].get();
    try {
      Net net(parse_config_text(ip, "bad.prototxt"), o);
      ADD_FAILURE() << "num_output 5 over 2 ranks was accepted";
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("divisible by 2"), std::string::npos) << e.what();
    }
    EXPECT_THROW(Net(parse_config_text(conv, "bad.prototxt"), o), ShapeError);
    EXPECT_THROW(Net(parse_config_text(grouped, "bad.prototxt"), o), ConfigError);
    // A world of one: the same nets are ordinary.
    NetOptions one;
    LocalCommunicator local;
    one.comm = &local;
    Net net(parse_config_text(ip, "bad.prototxt"), one);
    EXPECT_EQ(net.params()[0].blob->shape(), (Shape{5, 4}));
  }));
}

// ---- dp x tp ----

// Ranks (threads) on a dp x 1 x tp grid, each data-parallel rank with
// batch / dp; returns rank 0's view after checking all ranks agree.
RunResult train_grid(const TempDir& dir, int dp, int tp, const RunSpec& spec) {
  RunSpec part = spec;
  part.batch = spec.batch / dp;
  const SolverConfig config = make_config(dir, part);
  const int world_size = dp * tp;
  auto world = make_world(world_size, "grid");
  auto store = make_memory_store(20s);
  std::vector<RunResult> results(static_cast<size_t>(world_size));
  expect_no_errors(run_ranks(world_size, [&](int rank) {
    RankEnv env;
    env.rank = rank;
    env.world_size = world_size;
    env.hostname = "host-" + std::to_string(rank);
    env.timeout = 20s;
    ProcessGridOptions go;
    go.store = store;
    go.advertise_host = "127.0.0.1";
    ProcessGrid grid(*world[static_cast<size_t>(rank)], GridShape{dp, 1, tp}, env, go);
    SolverOptions o;
    o.rank = grid.dp_rank();
    o.world_size = grid.shape().dp;
    o.comm = &grid.tp();
    o.snapshots = rank == 0 ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
    Solver solver(config, o);
    DataParallel data_parallel(solver, grid.dp(), DataParallelConfig{});
    RunResult& r = results[static_cast<size_t>(rank)];
    while (solver.iter() < part.max_iter) r.losses.push_back(solver.step());
    r.weights = full_weights(solver.net());
  }));
  for (int rank = 1; rank < world_size; ++rank) {
    EXPECT_EQ(results[static_cast<size_t>(rank)].weights, results[0].weights) << "rank " << rank;
    EXPECT_EQ(results[static_cast<size_t>(rank)].losses, results[0].losses) << "rank " << rank;
  }
  return results[0];
}

TEST_F(TensorParallelTest, DataTimesTensorParallelTwoByTwo) {
  // Four ranks on a dp 2 x tp 2 grid, each data-parallel rank with half the
  // batch, train like one process with the whole batch.
  RunSpec spec;
  spec.max_iter = 8;
  const RunResult single = train_single(dir_, spec);
  expect_close(train_grid(dir_, 2, 1, spec), single, 1e-4, "dp 2 x tp 1");
  expect_close(train_grid(dir_, 1, 2, spec), single, 1e-4, "dp 1 x tp 2");
  expect_close(train_grid(dir_, 2, 2, spec), single, 1e-4, "dp 2 x tp 2");
}

}  // namespace
}  // namespace strata::parallel
