// Data-parallel training (parallel/data_parallel/data_parallel.h): bucket assignment, the
// gradient compression round trip, and, with the ranks of a world as threads
// of this process talking over real TCP loopback connections, the central
// promise: N ranks with batch B/N train exactly like one process with batch B
// (same loss at every iteration, same final weights), with overlap on and
// off, small and large buckets, ring and tree allreduce, and iter_size > 1.
// Also: the parameter check across ranks, snapshots that resume with the same
// or another number of ranks, and a dead rank turning into an error.
#include <gtest/gtest.h>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/io/file_util.h"
#include "framework/net.h"
#include "framework/io/npy.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "framework/cpu/threads.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/rendezvous/store.h"
#include "parallel/backends/tcp_communicator.h"
#include "parallel/transport/tcp_transport.h"
#include "tests/parallel_test_util.h"
#include "tests/test_util.h"

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;
using parallel_test::expect_no_errors;
using parallel_test::make_world;
using parallel_test::run_ranks;

// A temp folder named strata_dp_test_*.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("strata_dp_test") {}
};

// ---- the ranks of a world as threads ----

// ---- a small MLP on a synthetic data set ----

constexpr int kSamples = 96;
constexpr int kInputs = 8;
constexpr int kClasses = 4;
constexpr int kBatch = 24;  // the global batch

void write_data(const TempDir& dir) {
  const parallel_test::Classification data = parallel_test::make_classification(kSamples, kInputs, kClasses, 7);
  const std::vector<float>& x = data.x;
  const std::vector<int32_t>& y = data.y;
  write_npy(dir.file("x.npy"), DType::kF32, {kSamples, kInputs}, x.data());
  write_npy(dir.file("y.npy"), DType::kI32, {kSamples}, y.data());
}

struct RunSpec {
  int batch = kBatch;     // per rank
  int iter_size = 1;
  int max_iter = 20;
  int snapshot = 0;
  int hidden = 16;
  bool shuffle = false;
  bool dropout = false;
  std::string prefix = "snap/run";
  std::string blob_memory = "BY_LIFETIME";  // SEPARATE: no flat gradient buffer, buckets copied
  std::string step_results = "AUTO";        // ONE_STEP_LATER: the ranks agree on the device's record
};

SolverConfig make_config(const TempDir& dir, const RunSpec& s) {
  std::string net =
      "name: 'mlp'\n"
      "layer { name: 'data' type: 'ArrayData' top: 'data' top: 'label'\n"
      "  array_data_param { source: 'x.npy' label_source: 'y.npy' batch_size: " +
      std::to_string(s.batch) + " shuffle: " + (s.shuffle ? "true" : "false") +
      " } }\n"
      "layer { name: 'fc1' type: 'InnerProduct' bottom: 'data' top: 'fc1'\n"
      "  inner_product_param { num_output: " +
      std::to_string(s.hidden) +
      " weight_filler { type: 'xavier' } bias_filler { type: 'constant' value: 0.1 } } }\n"
      "layer { name: 'relu1' type: 'ReLU' bottom: 'fc1' top: 'fc1' }\n" +
      std::string(s.dropout ? "layer { name: 'drop1' type: 'Dropout' bottom: 'fc1' top: 'fc1' }\n" : "") +
      "layer { name: 'fc2' type: 'InnerProduct' bottom: 'fc1' top: 'fc2'\n"
      "  inner_product_param { num_output: " +
      std::to_string(kClasses) +
      " weight_filler { type: 'xavier' } } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'fc2' bottom: 'label' top: 'loss' }\n";
  const std::string solver = "net_param { " + net +
                             " }\n"
                             "type: 'SGD' base_lr: 0.2 momentum: 0.9 weight_decay: 0.001\n"
                             "lr_policy: 'step' gamma: 0.5 stepsize: 8\n"
                             "max_iter: " +
                             std::to_string(s.max_iter) + " iter_size: " + std::to_string(s.iter_size) +
                             "\n"
                             "display: 0 snapshot: " +
                             std::to_string(s.snapshot) + " snapshot_after_train: false snapshot_prefix: '" +
                             s.prefix + "' random_seed: 5 blob_memory: " + s.blob_memory +
                             " step_results: " + s.step_results + "\n";
  const std::string path = dir.file("solver.prototxt");
  return parse_solver_config(parse_config_text(solver, path), path);
}

struct RunResult {
  std::vector<float> losses;                  // per iteration (rank 0's view)
  std::vector<std::vector<float>> weights;    // per parameter, at the end
};

std::vector<std::vector<float>> weights_of(Net& net) {
  std::vector<std::vector<float>> out;
  for (const NetParam& p : net.params()) {
    const float* d = p.blob->data.data<float>();
    out.emplace_back(d, d + p.blob->numel());
  }
  return out;
}

// Rank `rank` of `world` over `comm`.
SolverOptions rank_options(int rank, int world, Communicator* comm, SnapshotWriting snapshots) {
  SolverOptions o;
  o.rank = rank;
  o.world_size = world;
  o.comm = comm;
  o.snapshots = snapshots;
  return o;
}

// Rank 0 alone writes snapshots, as a launched run does.
SnapshotWriting rank_zero_writes(int rank) {
  return rank == 0 ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
}

RunResult train_single(const TempDir& dir, RunSpec spec) {
  Solver solver(make_config(dir, spec));
  RunResult r;
  while (solver.iter() < spec.max_iter) r.losses.push_back(solver.step());
  r.weights = weights_of(solver.net());
  return r;
}

RunResult train_parallel(const TempDir& dir, int world, RunSpec spec, const DataParallelConfig& dp_config,
                         AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto, size_t* wire_bytes = nullptr) {
  auto comms = make_world(world, "dp", algorithm);
  std::vector<RunResult> results(static_cast<size_t>(world));
  const SolverConfig config = make_config(dir, spec);
  expect_no_errors(run_ranks(world, [&](int rank) {
    const SolverOptions o = rank_options(rank, world, comms[static_cast<size_t>(rank)].get(), rank_zero_writes(rank));
    Solver solver(config, o);
    DataParallel dp(solver, *comms[static_cast<size_t>(rank)], dp_config);
    if (wire_bytes && rank == 0) *wire_bytes = dp.wire_buffer_bytes();
    RunResult& r = results[static_cast<size_t>(rank)];
    while (solver.iter() < spec.max_iter) r.losses.push_back(solver.step());
    r.weights = weights_of(solver.net());
  }));
  // Every rank ends with the same weights and saw the same (averaged) losses.
  for (int rank = 1; rank < world; ++rank) {
    EXPECT_EQ(results[static_cast<size_t>(rank)].weights, results[0].weights) << "rank " << rank;
    EXPECT_EQ(results[static_cast<size_t>(rank)].losses, results[0].losses) << "rank " << rank;
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
  for (size_t p = 0; p < want.weights.size(); ++p) {
    ASSERT_EQ(got.weights[p].size(), want.weights[p].size());
    double max_abs = 0.0, max_diff = 0.0;
    for (size_t i = 0; i < want.weights[p].size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(want.weights[p][i])));
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(got.weights[p][i]) - want.weights[p][i]));
    }
    EXPECT_LE(max_diff, rel * std::max(1.0, max_abs)) << what << ": parameter " << p;
  }
}

DataParallelConfig dp_config(double bucket_mb, Overlap overlap,
                             GradCompression compression = GradCompression::kNone) {
  DataParallelConfig c;
  c.bucket_mb = bucket_mb;
  c.overlap = overlap;
  c.compression = compression;
  return c;
}

constexpr double kTinyBuckets = 1e-4;  // ~100 bytes: one parameter per bucket
constexpr double kOneBucket = 25.0;

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Several solvers run at once in this process; single-threaded GEMM keeps
    // them from competing for (and oversubscribing) the cores.
    set_num_threads(1);
    write_data(dir_);
  }
  void TearDown() override { set_num_threads(0); }
  TempDir dir_;
};

// ---- buckets ----

TEST_F(DataParallelTest, BucketsFollowReadinessOrderAndSize) {
  RunSpec spec;
  Solver solver(make_config(dir_, spec));
  const Net& net = solver.net();
  // Parameters: fc1.weight [16, 8], fc1.bias [16], fc2.weight [4, 16], fc2.bias [4].
  ASSERT_EQ(net.params().size(), 4u);
  auto name = [&](int id) { return net.params()[static_cast<size_t>(id)].name; };

  const std::vector<GradBucket> one = assign_buckets(net, 25u << 20);
  ASSERT_EQ(one.size(), 1u);
  std::vector<std::string> order;
  for (int id : one[0].params) order.push_back(name(id));
  // Backward reaches fc2 first.
  EXPECT_EQ(order, (std::vector<std::string>{"fc2.weight", "fc2.bias", "fc1.weight", "fc1.bias"}));
  EXPECT_EQ(one[0].offsets, (std::vector<int64_t>{0, 64, 68, 196}));
  EXPECT_EQ(one[0].numel, 212);

  const std::vector<GradBucket> tiny = assign_buckets(net, 4);
  ASSERT_EQ(tiny.size(), 4u);
  for (const GradBucket& b : tiny) EXPECT_EQ(b.params.size(), 1u);
  EXPECT_EQ(name(tiny[0].params[0]), "fc2.weight");
  EXPECT_EQ(name(tiny[3].params[0]), "fc1.bias");

  // fc2 (weight + bias = 68 floats) fills a bucket of 68 floats exactly; fc1 follows.
  const std::vector<GradBucket> two = assign_buckets(net, 68 * sizeof(float));
  ASSERT_EQ(two.size(), 3u);
  EXPECT_EQ(two[0].numel, 68);
  EXPECT_EQ(two[1].numel, 128);  // fc1.weight, larger than a bucket, alone
  EXPECT_EQ(two[2].numel, 16);
}

TEST_F(DataParallelTest, FrozenParametersAreLeftOut) {
  const std::string text =
      "name: 'frozen'\n"
      "layer { name: 'in' type: 'Input' top: 'x' top: 'label'\n"
      "  input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }\n"
      "layer { name: 'fc1' type: 'InnerProduct' bottom: 'x' top: 'h'\n"
      "  param { lr_mult: 0 } param { lr_mult: 0 } inner_product_param { num_output: 4 } }\n"
      "layer { name: 'fc2' type: 'InnerProduct' bottom: 'h' top: 'y'\n"
      "  param { lr_mult: 1 } param { lr_mult: 0 } inner_product_param { num_output: 2 } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'y' bottom: 'label' top: 'loss' }\n";
  const auto net = std::make_unique<Net>(parse_config_text(text, "frozen.prototxt"), NetOptions{});
  const std::vector<GradBucket> b = assign_buckets(*net, 25u << 20);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(b[0].params.size(), 1u);
  EXPECT_EQ(net->params()[static_cast<size_t>(b[0].params[0])].name, "fc2.weight");
}

// ---- compression ----

TEST(DataParallelCompression, RoundTrip) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> src(1000);
  for (float& v : src) v = normal(gen);
  src[0] = 0.0f;
  src[1] = 1e-3f;
  src[2] = -65504.0f / 4;  // stays finite in fp16 after scaling by 1/4

  for (GradCompression c : {GradCompression::kNone, GradCompression::kFP16, GradCompression::kBF16}) {
    const DType wire = wire_dtype(c);
    std::vector<unsigned char> buf(src.size() * dtype_size(wire));
    std::vector<float> back(src.size());
    const float scale = 0.25f;
    encode_gradients(src.data(), static_cast<int64_t>(src.size()), scale, c, buf.data());
    decode_gradients(buf.data(), static_cast<int64_t>(src.size()), c, back.data());
    // Relative precision of the wire format (half an ulp), plus fp16's
    // absolute floor for its subnormals.
    const double rel = c == GradCompression::kNone ? 0.0 : c == GradCompression::kFP16 ? 1.0 / 2048 : 1.0 / 256;
    const double abs_floor = c == GradCompression::kFP16 ? 6e-8 : 0.0;
    for (size_t i = 0; i < src.size(); ++i) {
      const double want = static_cast<double>(src[i]) * scale;
      EXPECT_LE(std::fabs(back[i] - want), rel * std::fabs(want) + abs_floor)
          << grad_compression_name(c) << " element " << i << ": " << src[i];
    }
  }
  EXPECT_EQ(wire_dtype(GradCompression::kNone), DType::kF32);
  EXPECT_EQ(wire_dtype(GradCompression::kFP16), DType::kF16);
  EXPECT_EQ(wire_dtype(GradCompression::kBF16), DType::kBF16);
}

// ---- config ----

TEST(DataParallelConfigTest, ParsesAndValidates) {
  const ConfigNode root = parse_config_text(
      "parallel { data { backend: 'tcp' algorithm: 'tree' bucket_mb: 0.5 overlap: false compression: BF16 } }",
      "s.prototxt");
  const DataParallelConfig c = parse_data_parallel_config(root.block("parallel"));
  EXPECT_EQ(c.backend, BackendChoice::kTcp);
  EXPECT_EQ(c.algorithm, AllreduceAlgorithm::kTree);
  EXPECT_DOUBLE_EQ(c.bucket_mb, 0.5);
  EXPECT_EQ(c.overlap, Overlap::kOff);
  EXPECT_EQ(c.compression, GradCompression::kBF16);
  EXPECT_EQ(c.bucket_bytes(), 512u * 1024u);

  const DataParallelConfig d = parse_data_parallel_config(ConfigNode());
  EXPECT_EQ(d.backend, BackendChoice::kAuto);
  EXPECT_EQ(d.overlap, Overlap::kOn);
  EXPECT_EQ(d.compression, GradCompression::kNone);

  auto error_of = [](const std::string& text) {
    try {
      parse_data_parallel_config(parse_config_text(text, "s.prototxt").block("parallel"));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("parallel { data { bucket_mbs: 3 } }").find("bucket_mb"), std::string::npos);
  EXPECT_NE(error_of("parallel { data { bucket_mb: 0 } }").find("s.prototxt:1"), std::string::npos);
  EXPECT_NE(error_of("parallel { data { backend: 'nccl2' } }").find("backend"), std::string::npos);
  EXPECT_NE(error_of("parallel { data { compression: FP8 } }").find("FP16"), std::string::npos);
  EXPECT_NE(error_of("parallel { model { } }").find("model"), std::string::npos);
  EXPECT_THROW(parse_bucket_mb("-1", "--bucket-mb"), ConfigError);
  EXPECT_THROW(parse_bucket_mb("abc", "--bucket-mb"), ConfigError);
  EXPECT_DOUBLE_EQ(parse_bucket_mb("2.5", "--bucket-mb"), 2.5);
  EXPECT_EQ(parse_grad_compression("fp16", "--compression"), GradCompression::kFP16);
  EXPECT_THROW(parse_dp_algorithm("star", "--dp-algorithm"), ConfigError);
  EXPECT_THROW(parse_dp_backend("udp", "--dp-backend"), ConfigError);
  EXPECT_THROW(parse_dp_backend("local", "--dp-backend"), ConfigError);  // one rank only: not a choice here
  EXPECT_EQ(parse_dp_algorithm("tree", "--dp-algorithm"), AllreduceAlgorithm::kTree);

  // The solver file accepts the block (and keeps it for the tools).
  const SolverConfig sc = parse_solver_config(
      parse_config_text("net: 'n.prototxt' base_lr: 0.1 parallel { data { bucket_mb: 4 } }", "/tmp/s.prototxt"),
      "/tmp/s.prototxt");
  EXPECT_DOUBLE_EQ(parse_data_parallel_config(sc.parallel).bucket_mb, 4.0);
}

// ---- N ranks with batch B/N == 1 process with batch B ----

TEST_F(DataParallelTest, MatchesSingleProcessTraining) {
  const RunResult want = train_single(dir_, RunSpec{});
  ASSERT_EQ(want.losses.size(), 20u);
  ASSERT_LT(want.losses.back(), want.losses.front());  // it learns

  struct Case {
    int world;
    double bucket_mb;
    Overlap overlap;
    AllreduceAlgorithm algorithm;
  };
  const std::vector<Case> cases = {
      {2, kTinyBuckets, Overlap::kOn, AllreduceAlgorithm::kRing},
      {2, kOneBucket, Overlap::kOn, AllreduceAlgorithm::kTree},
      {2, kTinyBuckets, Overlap::kOff, AllreduceAlgorithm::kAuto},
      {4, kTinyBuckets, Overlap::kOn, AllreduceAlgorithm::kTree},
      {4, kOneBucket, Overlap::kOn, AllreduceAlgorithm::kRing},
      {4, kOneBucket, Overlap::kOff, AllreduceAlgorithm::kRing},
  };
  for (const Case& c : cases) {
    RunSpec spec;
    spec.batch = kBatch / c.world;
    const std::string what = std::to_string(c.world) + " ranks, bucket_mb " + std::to_string(c.bucket_mb) +
                             ", overlap " + (c.overlap == Overlap::kOn ? "on" : "off") + ", " +
                             allreduce_algorithm_name(c.algorithm);
    SCOPED_TRACE(what);
    const RunResult got = train_parallel(dir_, c.world, spec, dp_config(c.bucket_mb, c.overlap), c.algorithm);
    expect_close(got, want, 1e-5, what);
  }
}

// Results read one step later (framework/solver/step_ledger.h): the ranks
// average the loss and agree on the stop where the step's record lies, and
// train the very weights of the eager step.
TEST_F(DataParallelTest, ResultsReadOneStepLaterTrainTheEagerWeights) {
  for (const Overlap overlap : {Overlap::kOn, Overlap::kOff}) {
    RunSpec spec;
    spec.batch = kBatch / 2;
    spec.iter_size = 2;
    spec.max_iter = 8;
    const RunResult each = train_parallel(dir_, 2, spec, dp_config(kTinyBuckets, overlap));
    spec.step_results = "ONE_STEP_LATER";
    const RunResult later = train_parallel(dir_, 2, spec, dp_config(kTinyBuckets, overlap));
    EXPECT_EQ(later.weights, each.weights);
    expect_close(later, each, 1e-6, "one step later");
  }
}

TEST_F(DataParallelTest, ResultsReadOneStepLaterStopEveryRankTogether) {
  RunSpec spec;
  spec.batch = kBatch / 2;
  spec.max_iter = 50;
  spec.step_results = "ONE_STEP_LATER";
  auto comms = make_world(2, "dp", AllreduceAlgorithm::kAuto);
  const SolverConfig config = make_config(dir_, spec);
  std::vector<int64_t> stopped_at(2, -1);
  std::atomic<bool> asked{false};
  expect_no_errors(run_ranks(2, [&](int rank) {
    const SolverOptions o = rank_options(rank, 2, comms[static_cast<size_t>(rank)].get(), SnapshotWriting::kDisabled);
    Solver solver(config, o);
    DataParallel dp(solver, *comms[static_cast<size_t>(rank)], dp_config(kOneBucket, Overlap::kOn));
    EXPECT_TRUE(solver.results_one_step_later());
    // Rank 1 alone is asked to stop, at iteration 5.
    std::atomic<bool> mine{false};
    solver.set_stop_flag(rank == 1 ? &asked : &mine);
    while (!dp.stop_requested() && solver.iter() < spec.max_iter) {
      if (rank == 1 && solver.iter() == 5) asked = true;
      solver.step();
    }
    stopped_at[static_cast<size_t>(rank)] = solver.iter();
  }));
  EXPECT_EQ(stopped_at[0], stopped_at[1]);
  EXPECT_EQ(stopped_at[0], 6);  // the step that carried the request
}

// The default blob memory keeps the updated parameters' gradients in one
// flat buffer in bucket order: every bucket is averaged in place, with no
// wire buffer, and gives the same bits as copying into wire buffers and back
// (SEPARATE: a gradient per parameter).
TEST_F(DataParallelTest, BucketsAreAveragedInPlaceInTheNetsGradients) {
  for (const Overlap overlap : {Overlap::kOn, Overlap::kOff}) {
    for (const double bucket_mb : {kTinyBuckets, kOneBucket}) {
      const std::string what = std::string("overlap ") + (overlap == Overlap::kOn ? "on" : "off") + ", bucket_mb " +
                               std::to_string(bucket_mb);
      SCOPED_TRACE(what);
      RunSpec spec;
      spec.batch = kBatch / 2;
      spec.max_iter = 6;
      spec.dropout = true;
      size_t in_place_bytes = 1, copied_bytes = 0;
      const RunResult in_place = train_parallel(dir_, 2, spec, dp_config(bucket_mb, overlap),
                                                AllreduceAlgorithm::kRing, &in_place_bytes);
      spec.blob_memory = "SEPARATE";
      const RunResult copied = train_parallel(dir_, 2, spec, dp_config(bucket_mb, overlap),
                                              AllreduceAlgorithm::kRing, &copied_bytes);
      EXPECT_EQ(in_place_bytes, 0u);
      EXPECT_GT(copied_bytes, 0u);
      EXPECT_EQ(in_place.weights, copied.weights);
      EXPECT_EQ(in_place.losses, copied.losses);
    }
  }
}

TEST_F(DataParallelTest, IterSizeAccumulatesBeforeAveraging) {
  // 2 ranks x 2 passes x batch B/4 == 1 process x batch B: gradients become
  // final only in the last pass, and buckets must not start before it.
  const RunResult want = train_single(dir_, RunSpec{});
  RunSpec spec;
  spec.batch = kBatch / 4;
  spec.iter_size = 2;
  const RunResult got = train_parallel(dir_, 2, spec, dp_config(kTinyBuckets, Overlap::kOn));
  expect_close(got, want, 1e-5, "2 ranks, iter_size 2");
}

TEST_F(DataParallelTest, CompressedGradientsStayClose) {
  const RunResult want = train_single(dir_, RunSpec{});
  RunSpec spec;
  spec.batch = kBatch / 2;
  for (GradCompression c : {GradCompression::kFP16, GradCompression::kBF16}) {
    const RunResult got = train_parallel(dir_, 2, spec, dp_config(kTinyBuckets, Overlap::kOn, c));
    // Rounded gradients: close, not equal.
    expect_close(got, want, c == GradCompression::kFP16 ? 5e-3 : 3e-2, grad_compression_name(c));
  }
}

TEST_F(DataParallelTest, StartBroadcastsRankZerosWeights) {
  // Dropout makes the ranks' random streams differ (their seeds do); their
  // initial weights must still be rank 0's, and stay equal while training.
  RunSpec spec;
  spec.batch = kBatch / 2;
  spec.dropout = true;
  spec.max_iter = 3;
  train_parallel(dir_, 2, spec, dp_config(kOneBucket, Overlap::kOn));  // checks equality across ranks
}

// ---- the parameter check ----

TEST_F(DataParallelTest, DifferentNetsAreAnErrorNamingTheParameter) {
  auto comms = make_world(2, "dp", AllreduceAlgorithm::kAuto);
  const std::vector<std::string> errors = run_ranks(2, [&](int rank) {
    RunSpec spec;
    spec.batch = kBatch / 2;
    spec.hidden = rank == 0 ? 16 : 17;
    const SolverOptions o = rank_options(rank, 2, comms[static_cast<size_t>(rank)].get(), SnapshotWriting::kEnabled);
    Solver solver(make_config(dir_, spec), o);
    DataParallel dp(solver, *comms[static_cast<size_t>(rank)], DataParallelConfig{});
  });
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& e = errors[static_cast<size_t>(rank)];
    EXPECT_NE(e.find("'fc1.weight' [16, 8]"), std::string::npos) << e;
    EXPECT_NE(e.find("'fc1.weight' [17, 8]"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  }
}

// ---- snapshots and resume ----

struct ParallelRun {
  RunResult result;
  std::vector<ResumeInfo> resume;  // per rank, when resumed
  std::vector<NamedValues> tests;
};

ParallelRun run_world(const TempDir& dir, int world, const RunSpec& spec, const std::string& resume_from) {
  auto comms = make_world(world, "dp", AllreduceAlgorithm::kAuto, 10s);
  ParallelRun out;
  out.resume.resize(static_cast<size_t>(world));
  std::vector<RunResult> results(static_cast<size_t>(world));
  const SolverConfig config = make_config(dir, spec);
  std::filesystem::create_directories(dirname_of(config.snapshot_prefix));
  expect_no_errors(run_ranks(world, [&](int rank) {
    const SolverOptions o = rank_options(rank, world, comms[static_cast<size_t>(rank)].get(), rank_zero_writes(rank));
    Solver solver(config, o);
    if (!resume_from.empty()) out.resume[static_cast<size_t>(rank)] = solver.restore(resume_from);
    DataParallel dp(solver, *comms[static_cast<size_t>(rank)], DataParallelConfig{});
    solver.solve();
    results[static_cast<size_t>(rank)].weights = weights_of(solver.net());
  }));
  out.result = results[0];
  return out;
}

TEST_F(DataParallelTest, SnapshotsResumeWithTheSameOrAnotherNumberOfRanks) {
  RunSpec spec;
  spec.batch = 8;
  spec.shuffle = true;  // per-rank shuffle orders must come back exactly
  spec.max_iter = 10;
  spec.snapshot = 5;

  spec.prefix = "straight/run";
  const ParallelRun straight = run_world(dir_, 2, spec, "");
  spec.prefix = "split/run";
  spec.max_iter = 5;
  run_world(dir_, 2, spec, "");
  const std::string state = dir_.file("split/run_iter_5.solverstate.safetensors");
  const SolverState st = load_solver_state(state);
  EXPECT_EQ(st.layer_states.at(kWorldSizeStateKey), "2");
  ASSERT_TRUE(st.layer_states.count("@rank1/data"));
  EXPECT_NE(st.layer_states.at("@rank1/data"), st.layer_states.at("data"));  // rank 1's own cursor and order

  // Same world: continues exactly.
  spec.max_iter = 10;
  const ParallelRun same = run_world(dir_, 2, spec, state);
  for (const ResumeInfo& info : same.resume) {
    EXPECT_EQ(info.iter, 5);
    EXPECT_EQ(info.snapshot_world_size, 2);
    EXPECT_FALSE(info.data_order_restarted);
  }
  EXPECT_EQ(same.result.weights, straight.result.weights);

  // One rank, and three: the data order restarts, training goes on.
  spec.prefix = "one/run";
  {
    const SolverConfig config = make_config(dir_, spec);
    std::filesystem::create_directories(dirname_of(config.snapshot_prefix));
    Solver solver(config);
    const ResumeInfo info = solver.restore(state);
    EXPECT_EQ(info.snapshot_world_size, 2);
    EXPECT_TRUE(info.data_order_restarted);
    EXPECT_EQ(solver.solve().iter, 10);
  }
  spec.prefix = "three/run";
  const ParallelRun three = run_world(dir_, 3, spec, state);
  for (const ResumeInfo& info : three.resume) {
    EXPECT_EQ(info.iter, 5);
    EXPECT_TRUE(info.data_order_restarted);
  }
  const SolverState end3 = load_solver_state(dir_.file("three/run_iter_10.solverstate.safetensors"));
  EXPECT_EQ(end3.layer_states.at(kWorldSizeStateKey), "3");
  EXPECT_TRUE(end3.layer_states.count("@rank2/data"));
}

// ---- faults ----

TEST_F(DataParallelTest, ADeadRankIsAnErrorOnTheOthers) {
  auto comms = make_world(2, "dp", AllreduceAlgorithm::kAuto, 5s);
  const SolverConfig config = make_config(dir_, [] {
    RunSpec s;
    s.batch = kBatch / 2;
    s.max_iter = 1000;
    return s;
  }());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> errors = run_ranks(2, [&](int rank) {
    const SolverOptions o = rank_options(rank, 2, comms[static_cast<size_t>(rank)].get(), SnapshotWriting::kDisabled);
    Solver solver(config, o);
    {
      DataParallel dp(solver, *comms[static_cast<size_t>(rank)], DataParallelConfig{});
      for (int i = 0; i < 3; ++i) solver.step();
      if (rank == 1) {
        comms[1].reset();  // rank 1 "dies": its connections close
        return;
      }
      solver.solve();
    }
  });
  EXPECT_EQ(errors[1], "");
  EXPECT_NE(errors[0], "") << "rank 0 did not notice that rank 1 is gone";
  EXPECT_NE(errors[0].find("rank"), std::string::npos) << errors[0];
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

}  // namespace
}  // namespace strata::parallel
