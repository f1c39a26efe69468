// Pipeline parallelism (parallel/pipeline*.h) and the process grid
// (parallel/model_parallel/process_grid.h), with the ranks of a world as threads of this
// process over real TCP loopback connections: the stage plan, a stalled
// stage named within the timeout, and the central promise (schedules and
// the batched transfers' deadlock models: parallel_pipeline_schedule_test.cpp): a net split into P stages with M micro-batches
// trains like one process with iter_size M (same loss at every iteration,
// same final weights from the one snapshot file the stages write), for
// pp = 2 and 3, GPIPE and ONE_F_ONE_B, and dp x pp = 2 x 2.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "framework/io/checkpoint.h"
#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/io/npy.h"
#include "framework/io/safetensors.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "framework/cpu/threads.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/model_parallel/pipeline.h"
#include "parallel/model_parallel/pipeline_plan.h"
#include "parallel/model_parallel/pipeline_schedule.h"
#include "parallel/model_parallel/pipeline_transfers.h"
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
  TempDir() : test::TempDir("strata_pp_test") {}
};

// ---- the process grid ----

TEST(ProcessGrid, RanksAreOrderedTpFastestThenPpThenDp) {
  const GridShape s = make_grid_shape(8, 2, 2);
  EXPECT_EQ(s.dp, 2);
  const GridCoord c = grid_coord(s, 6);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.tp, 0);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(grid_rank(s, grid_coord(s, r)), r);
  try {
    make_grid_shape(6, 4, 1);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("must divide the world size"), std::string::npos) << e.what();
  }
}

TEST(ProcessGrid, AxisCommunicatorsJoinTheRightRanks) {
  auto world = make_world(4, "pp-world");
  auto store = make_memory_store(20s);
  expect_no_errors(run_ranks(4, [&](int rank) {
    RankEnv env;
    env.rank = rank;
    env.world_size = 4;
    env.hostname = "host-" + std::to_string(rank);
    env.timeout = 20s;
    ProcessGridOptions o;
    o.store = store;
    o.advertise_host = "127.0.0.1";
    ProcessGrid grid(*world[static_cast<size_t>(rank)], make_grid_shape(4, 2, 1), env, o);
    EXPECT_EQ(grid.dp().world_size(), 2);
    EXPECT_EQ(grid.pp().world_size(), 2);
    EXPECT_EQ(grid.tp().world_size(), 1);
    EXPECT_EQ(grid.pp().rank(), rank % 2);
    EXPECT_EQ(grid.dp().rank(), rank / 2);
    // Sum of world ranks over each group tells its members apart.
    Tensor t({1});
    t.data<float>()[0] = static_cast<float>(rank);
    grid.dp().allreduce(t, ReduceOp::kSum);
    EXPECT_EQ(t.data<float>()[0], rank % 2 == 0 ? 2.0f : 4.0f);
    t.data<float>()[0] = static_cast<float>(rank);
    grid.pp().allreduce(t, ReduceOp::kSum);
    EXPECT_EQ(t.data<float>()[0], rank < 2 ? 1.0f : 5.0f);
    if (rank == 0) {
      EXPECT_NE(grid.describe().find("rank 3: dp 1  pp 1  tp 0"), std::string::npos) << grid.describe();
    }
  }));
}

// ---- equivalence with one process ----

constexpr int kSamples = 96;
constexpr int kInputs = 8;
constexpr int kClasses = 4;

void write_data(const TempDir& dir) {
  const parallel_test::Classification data = parallel_test::make_classification(kSamples, kInputs, kClasses, 11);
  const std::vector<float>& x = data.x;
  const std::vector<int32_t>& y = data.y;
  write_npy(dir.file("x.npy"), DType::kF32, {kSamples, kInputs}, x.data());
  write_npy(dir.file("y.npy"), DType::kI32, {kSamples}, y.data());
}

// data fc1 relu1 | fc2 relu2 | sum(fc2, fc1) fc3 loss: fc1 goes to two
// stages (its gradients from both are summed), label from stage 0 straight
// to the last stage.
std::string net_text(int batch, bool shuffle, bool recompute = false) {
  return "name: 'skipnet'\n"
         "layer { name: 'data' type: 'ArrayData' top: 'data' top: 'label'\n"
         "  array_data_param { source: 'x.npy' label_source: 'y.npy' batch_size: " +
         std::to_string(batch) + " shuffle: " + (shuffle ? "true" : "false") +
         " } }\n"
         "layer { name: 'fc1' type: 'InnerProduct' bottom: 'data' top: 'fc1'\n"
         "  inner_product_param { num_output: 12 bias_filler { type: 'constant' value: 0.1 } } }\n"
         "layer { name: 'relu1' type: 'ReLU' bottom: 'fc1' top: 'fc1' }\n"
         "layer { name: 'fc2' type: 'InnerProduct' bottom: 'fc1' top: 'fc2'\n"
         "  inner_product_param { num_output: 12 } }\n"
         "layer { name: 'relu2' type: 'ReLU' bottom: 'fc2' top: 'fc2' }\n"
         "layer { name: 'sum' type: 'Eltwise' bottom: 'fc2' bottom: 'fc1' top: 'sum' }\n"
         "layer { name: 'fc3' type: 'InnerProduct' bottom: 'sum' top: 'fc3'\n"
         "  inner_product_param { num_output: 4 } }\n"
         "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'fc3' bottom: 'label' top: 'loss' }\n" +
         // Inside one stage at every cut below.
         (recompute ? "recompute { from: 'fc2' to: 'relu2' }\n" : "");
}

SolverConfig make_config(const TempDir& dir, int batch, int iter_size, int max_iter, bool shuffle,
                         const std::string& prefix, bool recompute = false) {
  const std::string solver = "net_param { " + net_text(batch, shuffle, recompute) +
                             " }\n"
                             "type: 'SGD' base_lr: 0.1 momentum: 0.9 weight_decay: 0.001 lr_policy: 'fixed'\n"
                             "max_iter: " + std::to_string(max_iter) + " iter_size: " + std::to_string(iter_size) +
                             "\ndisplay: 1 snapshot: 0 snapshot_after_train: true snapshot_prefix: '" + prefix +
                             "' random_seed: 5\n";
  const std::string path = dir.file("solver.prototxt");
  return parse_solver_config(parse_config_text(solver, path), path);
}

struct Losses : TrainingObserver {
  std::vector<float> v;
  void on_iteration(const IterationInfo& i) override { v.push_back(static_cast<float>(i.loss)); }
};

std::vector<float> train_reference(const SolverConfig& config) {
  Solver solver(config);
  std::vector<float> losses;
  while (solver.iter() < config.max_iter) losses.push_back(solver.step());
  solver.snapshot();
  return losses;
}

// Stages per TRAIN-phase layer: data fc1 relu1 fc2 relu2 sum fc3 loss.
// kDataAlone: stage 0 holds only the data layer (stage 1 receives the data
// and the labels, and initialises fc1 as the unsplit net does).
enum class Cut { kMiddle, kDataAlone };
std::vector<int> cut(int pp, Cut how = Cut::kMiddle) {
  if (how == Cut::kDataAlone) return pp == 2 ? std::vector<int>{0, 1, 1, 1, 1, 1, 1, 1}
                                             : std::vector<int>{0, 1, 1, 1, 1, 2, 2, 2};
  if (pp == 2) return {0, 0, 0, 0, 0, 1, 1, 1};
  return {0, 0, 0, 1, 1, 2, 2, 2};
}

// Trains dp x pp ranks; returns the losses every rank saw.
std::vector<std::vector<float>> train_pipeline(const SolverConfig& config, int dp, int pp, int micro,
                                               PipelineSchedule schedule,
                                               StageTransfers transfers = StageTransfers::kAuto,
                                               Cut how = Cut::kMiddle, ShardStage shard = ShardStage::kNone,
                                               std::atomic<int>* recompute_ranges = nullptr) {
  const int world = dp * pp;
  auto comms = make_world(world, "pp-world");
  auto store = make_memory_store(20s);
  std::vector<std::vector<float>> losses(static_cast<size_t>(world));
  expect_no_errors(run_ranks(world, [&](int rank) {
    RankEnv env;
    env.rank = rank;
    env.world_size = world;
    env.hostname = "host-" + std::to_string(rank);
    env.timeout = 20s;
    ProcessGridOptions go;
    go.store = store;
    go.advertise_host = "127.0.0.1";
    ProcessGrid grid(*comms[static_cast<size_t>(rank)], make_grid_shape(world, pp, 1), env, go);
    auto grads = grid.new_communicator(GridAxis::kPp, "grad");
    PipelineOptions po;
    po.config.stages = pp;
    po.config.micro_batches = micro;
    po.config.schedule = schedule;
    po.transfers = transfers;
    po.stage_of_layer = cut(pp, how);
    po.dp_rank = grid.dp_rank();
    po.dp_size = dp;
    po.snapshots = grid.dp_rank() == 0 ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
    if (dp > 1) po.dp = &grid.dp();
    PipelineParallel pipe(config, grid.pp(), *grads, po);
    std::unique_ptr<DataParallel> dpar;
    DataParallelConfig dc;
    dc.shard = shard;
    dc.bucket_mb = shard == ShardStage::kNone ? dc.bucket_mb : 1e-4;  // sharded: a bucket per parameter
    if (dp > 1) dpar = std::make_unique<DataParallel>(pipe.solver(), grid.dp(), dc);
    if (dpar) dpar->add_stage_nets(pipe.stage_nets());  // PARAMETERS: the micro-batches' copies gather too
    if (dpar && shard != ShardStage::kNone) {
      EXPECT_NE(dpar->sharded(), nullptr);
      // One micro-batch: a stage's gradients in slots used in turn; more: a slot per bucket (they add up).
      EXPECT_EQ(dpar->sharded()->buffers().slots.reuse, shard != ShardStage::kOptimizer && micro == 1);
    }
    if (recompute_ranges) *recompute_ranges += static_cast<int>(pipe.solver().net().recompute_ranges().size());
    Losses obs;
    pipe.solver().add_observer(&obs);
    pipe.solver().solve();
    losses[static_cast<size_t>(rank)] = obs.v;
  }));
  return losses;
}

void expect_same_weights(const std::string& got_path, const std::string& want_path, double tol) {
  SafetensorsReader got(got_path), want(want_path);
  ASSERT_EQ(got.tensors().size(), want.tensors().size());
  for (const TensorView& w : want.tensors()) {
    const TensorView* g = got.find(w.name);
    ASSERT_NE(g, nullptr) << w.name;
    ASSERT_EQ(g->shape, w.shape) << w.name;
    std::vector<float> a(w.nbytes / 4), b(w.nbytes / 4);
    std::memcpy(a.data(), w.data, w.nbytes);
    std::memcpy(b.data(), g->data, g->nbytes);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], tol * std::max(1.0f, std::fabs(a[i]))) << w.name;
  }
}

struct EquivCase {
  int dp, pp, micro;
  PipelineSchedule schedule;
  bool shuffle;
  // kBatched: the GPU pipeline's transfers (pipeline_transfers.h), here over tcp.
  StageTransfers transfers = StageTransfers::kAuto;
  Cut how = Cut::kMiddle;
  ShardStage shard = ShardStage::kNone;  // along the dp axis
  bool recompute = false;  // the pipeline's net recomputes fc2..relu2 (the reference keeps everything)
};

class PipelineEquivalence : public ::testing::TestWithParam<EquivCase> {};

TEST_P(PipelineEquivalence, TrainsLikeOneProcessWithIterSize) {
  set_num_threads(1);
  const EquivCase c = GetParam();
  TempDir dir;
  write_data(dir);
  for (const char* d : {"ref", "pp", "ref2"}) std::filesystem::create_directories(dir.file(d));
  const int batch = 8, iters = 5;
  const std::vector<float> want =
      train_reference(make_config(dir, batch * c.dp, c.micro, iters, c.shuffle, dir.file("ref/run")));
  std::atomic<int> ranges{0};
  const auto got = train_pipeline(make_config(dir, batch, 1, iters, c.shuffle, dir.file("pp/run"), c.recompute), c.dp,
                                  c.pp, c.micro, c.schedule, c.transfers, c.how, c.shard, &ranges);
  // The stage that holds fc2..relu2 recomputes it, on each of its dp ranks.
  EXPECT_EQ(ranges.load(), c.recompute ? c.dp : 0);
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want.size()) << "rank " << r;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[r][i], want[i], 1e-4) << "rank " << r << " iter " << i;
  }
  expect_same_weights(dir.file("pp/run_iter_5.safetensors"), dir.file("ref/run_iter_5.safetensors"), 1e-4);
  // The one snapshot loads into the unsplit net, optimizer history included.
  Solver unsplit(make_config(dir, batch * c.dp, c.micro, iters + 1, c.shuffle, dir.file("ref2/run")));
  EXPECT_EQ(unsplit.restore(dir.file("pp/run_iter_5.solverstate.safetensors")).iter, 5);
  // The history itself is the one process's (sharded: gathered from every dp rank's slices).
  Solver reference(make_config(dir, batch * c.dp, c.micro, iters + 1, c.shuffle, dir.file("ref2/run")));
  reference.restore(dir.file("ref/run_iter_5.solverstate.safetensors"));
  const auto got_history = unsplit.optimizer().state_tensors();
  const auto want_history = reference.optimizer().state_tensors();
  ASSERT_EQ(got_history.size(), want_history.size());
  for (size_t k = 0; k < want_history.size(); ++k) {
    ASSERT_EQ(got_history[k].first, want_history[k].first);
    const Tensor& g = got_history[k].second;
    const Tensor& w = want_history[k].second;
    ASSERT_EQ(g.numel(), w.numel()) << want_history[k].first;
    for (int64_t i = 0; i < w.numel(); ++i) {
      EXPECT_NEAR(g.data<float>()[i], w.data<float>()[i], 1e-4 * std::max(1.0f, std::fabs(w.data<float>()[i])))
          << want_history[k].first << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PipelineEquivalence,
    ::testing::Values(EquivCase{1, 2, 4, PipelineSchedule::kGPipe, true},
                      EquivCase{1, 2, 4, PipelineSchedule::kOneFOneB, true},
                      EquivCase{1, 3, 4, PipelineSchedule::kGPipe, true},
                      EquivCase{1, 3, 5, PipelineSchedule::kOneFOneB, true},
                      EquivCase{2, 2, 3, PipelineSchedule::kOneFOneB, false},
                      EquivCase{1, 2, 4, PipelineSchedule::kGPipe, true, StageTransfers::kBatched},
                      EquivCase{1, 3, 5, PipelineSchedule::kOneFOneB, true, StageTransfers::kBatched},
                      EquivCase{2, 2, 3, PipelineSchedule::kOneFOneB, false, StageTransfers::kBatched},
                      EquivCase{1, 2, 4, PipelineSchedule::kOneFOneB, true, StageTransfers::kAuto, Cut::kDataAlone},
                      EquivCase{1, 3, 4, PipelineSchedule::kGPipe, true, StageTransfers::kAuto, Cut::kDataAlone},
                      EquivCase{2, 2, 3, PipelineSchedule::kOneFOneB, false, StageTransfers::kAuto, Cut::kMiddle,
                                ShardStage::kOptimizer},
                      EquivCase{2, 2, 3, PipelineSchedule::kGPipe, false, StageTransfers::kAuto, Cut::kMiddle,
                                ShardStage::kGradients},
                      EquivCase{2, 2, 1, PipelineSchedule::kOneFOneB, false, StageTransfers::kAuto, Cut::kMiddle,
                                ShardStage::kGradients},
                      EquivCase{2, 2, 3, PipelineSchedule::kOneFOneB, false, StageTransfers::kAuto, Cut::kMiddle,
                                ShardStage::kParameters},
                      EquivCase{2, 2, 3, PipelineSchedule::kGPipe, false, StageTransfers::kAuto, Cut::kMiddle,
                                ShardStage::kParameters},
                      EquivCase{2, 2, 1, PipelineSchedule::kOneFOneB, false, StageTransfers::kAuto, Cut::kMiddle,
                                ShardStage::kParameters},
                      EquivCase{1, 2, 4, PipelineSchedule::kOneFOneB, true, StageTransfers::kAuto, Cut::kMiddle,
                                ShardStage::kNone, true},
                      EquivCase{1, 3, 5, PipelineSchedule::kGPipe, true, StageTransfers::kAuto, Cut::kMiddle,
                                ShardStage::kNone, true},
                      EquivCase{2, 2, 3, PipelineSchedule::kOneFOneB, false, StageTransfers::kAuto, Cut::kMiddle,
                                ShardStage::kGradients, true}),
    [](const ::testing::TestParamInfo<EquivCase>& i) {
      return "dp" + std::to_string(i.param.dp) + "_pp" + std::to_string(i.param.pp) + "_m" +
             std::to_string(i.param.micro) + "_" + pipeline_schedule_name(i.param.schedule) +
             (i.param.transfers == StageTransfers::kBatched ? "_batched" : "") +
             (i.param.how == Cut::kDataAlone ? "_data_alone" : "") +
             (i.param.shard == ShardStage::kNone ? "" : std::string("_shard_") + shard_stage_name(i.param.shard)) +
             (i.param.recompute ? "_recompute" : "");
    });

// ---- plans and errors ----

TEST(PipelinePlan, StageKeysAndBoundaries) {
  const ConfigNode root = parse_config_text(
      "layer { name: 'd' type: 'Input' top: 'x' top: 'y' input_param { shape { dim: 2 dim: 3 } } }\n"
      "layer { name: 'a' type: 'InnerProduct' bottom: 'x' top: 'a' inner_product_param { num_output: 2 } }\n"
      "layer { name: 'r' type: 'ReLU' bottom: 'a' top: 'a' stage: 1 }\n"
      "layer { name: 'b' type: 'InnerProduct' bottom: 'a' top: 'b' inner_product_param { num_output: 2 } }\n"
      "layer { name: 'l' type: 'EuclideanLoss' bottom: 'b' bottom: 'y' top: 'l' stage: 2 }\n",
      "plan.prototxt");
  const PipelinePlan plan = plan_pipeline(root, 3);
  ASSERT_EQ(plan.boundaries.size(), 3u);
  EXPECT_EQ(plan.boundaries[0].blob, "a");  // in place on stage 1: received from stage 0
  EXPECT_EQ(plan.boundaries[1].blob, "b");
  EXPECT_EQ(plan.boundaries[2].blob, "y");
  EXPECT_EQ(plan.boundaries[2].from, 0);
  EXPECT_EQ(plan.boundaries[2].to, 2);
  EXPECT_THROW(plan_pipeline(root, 2), ConfigError);  // stage 2 out of range
}

TEST(PipelinePlan, RecomputeRangesGoToTheirStageAndMayNotCrossAnEdge) {
  const std::string layers =
      "layer { name: 'd' type: 'Input' top: 'x' top: 'y' input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }\n"
      "layer { name: 'a' type: 'InnerProduct' bottom: 'x' top: 'a' inner_product_param { num_output: 2 } }\n"
      "layer { name: 'r' type: 'ReLU' bottom: 'a' top: 'a' }\n"
      "layer { name: 'b' type: 'InnerProduct' bottom: 'a' top: 'b' inner_product_param { num_output: 2 } stage: 1 }\n"
      "layer { name: 's' type: 'Sigmoid' bottom: 'b' top: 's' }\n"
      "layer { name: 'l' type: 'EuclideanLoss' bottom: 's' bottom: 'y' top: 'l' }\n";
  const std::map<std::string, Shape> shapes = {{"a", {2, 2}}, {"y", {2, 2}}, {"x", {2, 3}}};
  const auto ranges_on = [&](const PipelinePlan& plan, int stage) {
    std::vector<std::string> out;
    const ConfigNode config = stage_compute_config(plan, stage, shapes);
    for (const ConfigNode& c : config.children()) {
      if (c.key() == "recompute") out.push_back(c.get_string("from") + ".." + c.get_string("to"));
    }
    return out;
  };
  const PipelinePlan inside = plan_pipeline(
      parse_config_text(layers + "recompute { from: 'a' to: 'r' }\nrecompute { from: 'b' to: 's' }\n", "p.prototxt"), 2);
  EXPECT_EQ(ranges_on(inside, 0), std::vector<std::string>{"a..r"});
  EXPECT_EQ(ranges_on(inside, 1), std::vector<std::string>{"b..s"});
  const PipelinePlan across = plan_pipeline(parse_config_text(layers + "recompute { from: 'r' to: 'b' }\n", "p.prototxt"), 2);
  EXPECT_CONTAINS(test::error_of<ConfigError>([&] { stage_compute_config(across, 0, shapes); }),
                  "starts on pipeline stage 0 and ends on stage 1; a range must stay inside one stage");
  const PipelinePlan unknown = plan_pipeline(parse_config_text(layers + "recompute { from: 'q' to: 'b' }\n", "p.prototxt"), 2);
  EXPECT_CONTAINS(test::error_of<ConfigError>([&] { stage_compute_config(unknown, 1, shapes); }),
                  "no TRAIN-phase layer 'q' in the net");
}

TEST(PipelinePlan, DecreasingStagesAreRejected) {
  const ConfigNode root = parse_config_text(
      "layer { name: 'd' type: 'Input' top: 'x' input_param { shape { dim: 2 dim: 3 } } stage: 1 }\n"
      "layer { name: 'a' type: 'ReLU' bottom: 'x' top: 'a' stage: 0 }\n",
      "plan.prototxt");
  try {
    plan_pipeline(root, 2);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'a'"), std::string::npos) << e.what();
  }
}

TEST(PipelineSetup, StagesThatDisagreeOnAShapeFailNamingTheBoundary) {
  set_num_threads(1);
  TempDir dir;
  write_data(dir);
  // Stage 1 reshapes the 12 received features into 5 x 2: the stages disagree.
  std::string net = net_text(8, false);
  net = net.substr(0, net.find("layer { name: 'fc2'")) +
        "layer { name: 'reshape' type: 'Reshape' bottom: 'fc1' top: 'r' stage: 1\n"
        "  reshape_param { shape { dim: 8 dim: 5 dim: 2 } } }\n"
        "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'r' bottom: 'label' top: 'loss' }\n";
  const std::string solver = "net_param { " + net + " }\n type: 'SGD' base_lr: 0.1 max_iter: 1 snapshot: 0\n";
  const SolverConfig config = parse_solver_config(parse_config_text(solver, dir.file("s.prototxt")), dir.file("s.prototxt"));
  auto comms = make_world(2, "pp-world");
  auto grads = make_world(2, "pp-world");
  for (auto& c : comms) c->set_timeout(std::chrono::seconds(2));
  std::vector<std::string> errors = run_ranks(2, [&](int rank) {
    PipelineOptions po;
    po.config.stages = 2;
    PipelineParallel pipe(config, *comms[static_cast<size_t>(rank)], *grads[static_cast<size_t>(rank)], po);
  });
  EXPECT_NE(errors[1].find("'fc1' [8, 12] from stage 0"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("pipeline stage 1 of 2"), std::string::npos) << errors[1];
  // Stage 0 waits in setup for the int that connects the link back down
  // (over tcp a dead peer is seen at once; these ranks are threads).
  EXPECT_NE(errors[0].find("pipeline stage 0 of 2"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("setup: connect the links to the stages below"), std::string::npos) << errors[0];
}

// A stage that stops answering (here: stage 1 takes one step, then never
// calls again) is named by the other within the communicators' timeout:
// its stage, the iteration, what it waited for (micro-batch, direction,
// peer stage), then the transport's own account; in both transfer modes.
class PipelineStalledPeer : public ::testing::TestWithParam<StageTransfers> {};

TEST_P(PipelineStalledPeer, IsNamedWithinTheTimeout) {
  set_num_threads(1);
  TempDir dir;
  write_data(dir);
  const SolverConfig config = make_config(dir, 8, 1, 10, false, dir.file("run"));
  constexpr auto kTimeout = std::chrono::seconds(2);
  auto comms = make_world(2, "pp-stall");
  auto grads = make_world(2, "pp-stall-grad");
  for (auto* w : {&comms, &grads}) {
    for (auto& c : *w) c->set_timeout(kTimeout);
  }
  std::promise<void> stage0_done;
  std::shared_future<void> stage0_finished = stage0_done.get_future().share();
  std::string error;
  double waited = 0.0;
  std::vector<std::string> errors = run_ranks(2, [&](int rank) {
    PipelineOptions po;
    po.config.stages = 2;
    po.config.micro_batches = 2;
    po.config.schedule = PipelineSchedule::kGPipe;
    po.transfers = GetParam();
    po.stage_of_layer = cut(2);
    po.snapshots = SnapshotWriting::kDisabled;
    PipelineParallel pipe(config, *comms[static_cast<size_t>(rank)], *grads[static_cast<size_t>(rank)], po);
    pipe.solver().step();  // both stages: one whole step
    if (rank == 1) {
      stage0_finished.wait();  // stops answering, without closing a connection
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      pipe.solver().step();
    } catch (const Error& e) {
      error = e.what();
    }
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stage0_done.set_value();
  });
  expect_no_errors(errors);
  ASSERT_NE(error, "") << "stage 0's second step did not fail although stage 1 stopped answering";
  EXPECT_LT(waited, 2.0 * std::chrono::duration<double>(kTimeout).count() + 3.0) << error;
  EXPECT_CONTAINS(error, "pipeline stage 0 of 2");
  EXPECT_CONTAINS(error, "iteration 2");  // the log's numbering: the second step
  EXPECT_CONTAINS(error, "micro-batch 0");
  EXPECT_CONTAINS(error, "from stage 1");
  EXPECT_CONTAINS(error, "receive the gradient of 'fc");  // fc1 or fc2, both sent to stage 1
}

INSTANTIATE_TEST_SUITE_P(Transfers, PipelineStalledPeer,
                         ::testing::Values(StageTransfers::kBackgroundSends, StageTransfers::kBatched),
                         [](const ::testing::TestParamInfo<StageTransfers>& i) {
                           return i.param == StageTransfers::kBatched ? std::string("Batched")
                                                                      : std::string("BackgroundSends");
                         });

TEST(PipelinePlan, TestPhaseLayersTakeTheStagesOfTheirTrainLayers) {
  const ConfigNode root = parse_config_text(
      "layer { name: 'd' type: 'Input' top: 'x' top: 'y' input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } }\n"
      "  include { phase: TRAIN } }\n"
      "layer { name: 'd' type: 'Input' top: 'x' top: 'y' input_param { shape { dim: 5 dim: 3 } shape { dim: 5 } }\n"
      "  include { phase: TEST } }\n"
      "layer { name: 'a' type: 'InnerProduct' bottom: 'x' top: 'a' inner_product_param { num_output: 2 } }\n"
      "layer { name: 'l' type: 'SoftmaxWithLoss' bottom: 'a' bottom: 'y' top: 'l' }\n"
      "layer { name: 'acc' type: 'Accuracy' bottom: 'a' bottom: 'y' top: 'acc' include { phase: TEST } }\n",
      "plan.prototxt");
  const PipelinePlan train = plan_pipeline(root, 2, {0, 1, 1});  // d | a l
  const PipelinePlan test = plan_test_pipeline(root, train);
  ASSERT_EQ(test.layers.size(), 4u);
  EXPECT_EQ(test.phase, Phase::kTest);
  EXPECT_EQ(test.layers[0].stage, 0);  // 'd' (TEST) as 'd' (TRAIN)
  EXPECT_EQ(test.layers[1].stage, 1);  // 'a'
  EXPECT_EQ(test.layers[3].stage, 1);  // TEST-only 'acc': the stage of the layer before
  ASSERT_EQ(test.boundaries.size(), 2u);  // x and y from stage 0 to 1
}

// data (TRAIN and TEST) fc1 relu1 | fc2 relu2 sum fc3 loss accuracy(TEST)
SolverConfig make_test_config(const TempDir& dir, int iter_size, int max_iter, const std::string& prefix) {
  std::string net = net_text(8, true);
  const std::string test_data =
      "layer { name: 'data' type: 'ArrayData' top: 'data' top: 'label' include { phase: TEST }\n"
      "  array_data_param { source: 'x.npy' label_source: 'y.npy' batch_size: 16 shuffle: false } }\n";
  net.insert(net.find("} }\nlayer { name: 'fc1'") + 1, " include { phase: TRAIN }");
  net.insert(net.find("layer { name: 'fc1'"), test_data);
  net += "layer { name: 'accuracy' type: 'Accuracy' bottom: 'fc3' bottom: 'label' top: 'accuracy'\n"
         "  include { phase: TEST } }\n";
  const std::string solver = "net_param { " + net +
                             " }\n"
                             "type: 'SGD' base_lr: 0.1 momentum: 0.9 lr_policy: 'fixed' test_iter: 3 test_interval: 2\n"
                             "max_iter: " + std::to_string(max_iter) + " iter_size: " + std::to_string(iter_size) +
                             "\ndisplay: 1 snapshot: 0 snapshot_after_train: true snapshot_prefix: '" + prefix +
                             "' random_seed: 5\n";
  const std::string path = dir.file("solver_test.prototxt");
  return parse_solver_config(parse_config_text(solver, path), path);
}

TEST(PipelineTestPhase, RunsThroughTheStagesAndEveryRankReportsTheLastStagesOutputs) {
  set_num_threads(1);
  TempDir dir;
  write_data(dir);
  std::filesystem::create_directories(dir.file("ref"));
  std::filesystem::create_directories(dir.file("pp"));
  Solver ref(make_test_config(dir, 2, 4, dir.file("ref/run")));
  for (int i = 0; i < 3; ++i) ref.step();
  const NamedValues want = ref.test();
  ASSERT_EQ(want.size(), 2u);  // accuracy, loss
  const SolverConfig config = make_test_config(dir, 1, 4, dir.file("pp/run"));
  // Both ways of moving tensors (kBatched: the GPU pipeline's, here over tcp).
  for (StageTransfers transfers : {StageTransfers::kBackgroundSends, StageTransfers::kBatched}) {
    SCOPED_TRACE(transfers == StageTransfers::kBatched ? "batched" : "background sends");
    auto comms = make_world(2, "pp-world");
    auto grads = make_world(2, "pp-world");
    std::vector<NamedValues> got(2);
    expect_no_errors(run_ranks(2, [&](int rank) {
      PipelineOptions po;
      po.config.stages = 2;
      po.config.micro_batches = 2;
      po.transfers = transfers;
      po.stage_of_layer = cut(2);
      PipelineParallel pipe(config, *comms[static_cast<size_t>(rank)], *grads[static_cast<size_t>(rank)], po);
      EXPECT_TRUE(pipe.has_test_net());
      for (int i = 0; i < 3; ++i) pipe.solver().step();
      got[static_cast<size_t>(rank)] = pipe.solver().test();
    }));
    for (size_t r = 0; r < got.size(); ++r) {
      ASSERT_EQ(got[r].size(), want.size()) << "rank " << r;
      for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_EQ(got[r][k].first, want[k].first);
        EXPECT_NEAR(got[r][k].second, want[k].second, 1e-5) << "rank " << r << " " << want[k].first;
      }
    }
  }
}

// dp x pp 2 for `config.max_iter` iterations, resumed from `resume` when
// given; the losses rank 0 saw.
std::vector<float> train_pp2(const SolverConfig& config, const std::string& resume, int dp = 1) {
  const int world = 2 * dp;
  auto comms = make_world(world, "pp-world");
  auto store = make_memory_store(20s);
  std::vector<float> losses;
  expect_no_errors(run_ranks(world, [&](int rank) {
    RankEnv env;
    env.rank = rank;
    env.world_size = world;
    env.hostname = "host-" + std::to_string(rank);
    env.timeout = 20s;
    ProcessGridOptions go;
    go.store = store;
    go.advertise_host = "127.0.0.1";
    ProcessGrid grid(*comms[static_cast<size_t>(rank)], make_grid_shape(world, 2, 1), env, go);
    auto grads = grid.new_communicator(GridAxis::kPp, "grad");
    PipelineOptions po;
    po.config.stages = 2;
    po.config.micro_batches = 3;
    po.stage_of_layer = cut(2);
    po.dp_rank = grid.dp_rank();
    po.dp_size = dp;
    po.snapshots = grid.dp_rank() == 0 ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
    if (dp > 1) po.dp = &grid.dp();
    PipelineParallel pipe(config, grid.pp(), *grads, po);
    std::unique_ptr<DataParallel> dpar;
    if (dp > 1) dpar = std::make_unique<DataParallel>(pipe.solver(), grid.dp(), DataParallelConfig{});
    if (!resume.empty()) {
      const ResumeInfo info = pipe.restore(resume);
      EXPECT_EQ(info.iter, 3);
      EXPECT_FALSE(info.data_order_restarted);
    }
    Losses obs;
    pipe.solver().add_observer(&obs);
    pipe.solver().solve();
    if (rank == 0) losses = obs.v;
  }));
  return losses;
}

TEST(PipelineResume, FromItsOwnSnapshotIsBitExact) {
  set_num_threads(1);
  TempDir dir;
  write_data(dir);
  for (const char* d : {"full", "half", "resumed"}) std::filesystem::create_directories(dir.file(d));
  // Shuffled data and momentum: the data cursors, the order and the history must all come back.
  const std::vector<float> full = train_pp2(make_config(dir, 8, 1, 6, true, dir.file("full/run")), "");
  train_pp2(make_config(dir, 8, 1, 3, true, dir.file("half/run")), "");
  const std::vector<float> resumed =
      train_pp2(make_config(dir, 8, 1, 6, true, dir.file("resumed/run")), dir.file("half/run_iter_3.solverstate.safetensors"));
  ASSERT_EQ(full.size(), 6u);
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[i], full[i + 3]) << "iteration " << i + 4;
  expect_same_weights(dir.file("resumed/run_iter_6.safetensors"), dir.file("full/run_iter_6.safetensors"), 0.0);
  // dp 2 x pp 2: each pipeline resumes its own shard's cursor.
  for (const char* d : {"dfull", "dhalf", "dresumed"}) std::filesystem::create_directories(dir.file(d));
  const std::vector<float> dfull = train_pp2(make_config(dir, 8, 1, 6, true, dir.file("dfull/run")), "", 2);
  train_pp2(make_config(dir, 8, 1, 3, true, dir.file("dhalf/run")), "", 2);
  const std::vector<float> dresumed = train_pp2(make_config(dir, 8, 1, 6, true, dir.file("dresumed/run")),
                                                dir.file("dhalf/run_iter_3.solverstate.safetensors"), 2);
  ASSERT_EQ(dfull.size(), 6u);
  ASSERT_EQ(dresumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(dresumed[i], dfull[i + 3]) << "dp 2, iteration " << i + 4;
  expect_same_weights(dir.file("dresumed/run_iter_6.safetensors"), dir.file("dfull/run_iter_6.safetensors"), 0.0);
  // A snapshot of the wrong net is an error naming the missing parameters.
  auto comms = make_world(2, "pp-world");
  auto grads = make_world(2, "pp-world");
  std::vector<std::string> errors = run_ranks(2, [&](int rank) {
    PipelineOptions po;
    po.config.stages = 2;
    po.stage_of_layer = cut(2);
    PipelineParallel pipe(make_config(dir, 8, 1, 6, true, dir.file("resumed/run")), *comms[static_cast<size_t>(rank)],
                          *grads[static_cast<size_t>(rank)], po);
    SolverState st = load_solver_state(dir.file("half/run_iter_3.solverstate.safetensors"));
    std::vector<TensorToWrite> none;
    write_safetensors(dir.file("empty_" + std::to_string(rank) + ".safetensors"), none, {});
    st.weights_file = "empty_" + std::to_string(rank) + ".safetensors";
    save_solver_state(dir.file("bad_" + std::to_string(rank) + ".solverstate.safetensors"), st);
    pipe.restore(dir.file("bad_" + std::to_string(rank) + ".solverstate.safetensors"));
  });
  EXPECT_NE(errors[0].find("needs parameters that"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("fc3.weight"), std::string::npos) << errors[1];
}

}  // namespace
}  // namespace strata::parallel
