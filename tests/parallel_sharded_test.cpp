// Sharded data parallel (ZeRO stages 1 to 3, parallel/data_parallel/sharded_update.h):
// the slicing (contiguous, every element once, the same formula on every
// rank), the shard key and its refusals, and, with the ranks of a world as
// threads over TCP loopback, the promise: shard OPTIMIZER and GRADIENTS train
// to the weights plain data parallel reaches (SGD with momentum and Adam,
// with and without gradient clipping, 2 and 3 ranks, a parameter count that
// no world size divides), each rank keeping only its slice of the optimizer
// state; snapshots that resume across layouts (sharded <-> plain, another
// world size) to the same next weights; stage 3's gathers around each layer.
// The memory each rank holds: parallel_sharded_memory_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/error.h"
#include "framework/io/checkpoint.h"
#include "framework/io/file_util.h"
#include "framework/io/npy.h"
#include "framework/cpu/threads.h"
#include "framework/solver/solver.h"
#include "framework/solver/solver_config.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/data_parallel/shard_layout.h"
#include "parallel/data_parallel/sharded_update.h"
#include "parallel/data_parallel/weight_gathering.h"
#include "tests/parallel_sharded_test_util.h"
#include "tests/parallel_test_util.h"
#include "tests/test_util.h"

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;
using parallel_test::expect_no_errors;
using parallel_test::make_world;
using parallel_test::run_ranks;
using namespace sharded_test;

// ---- the slicing ----

TEST(ShardLayout, SlicesAreContiguousCoverEveryElementOnceAndAgree) {
  for (int world : {1, 2, 3, 4, 7}) {
    for (int64_t numel : {0, 1, 2, 3, 5, 7, 10, 199, 1000, 1001}) {
      const int64_t block = shard_block(numel, world);
      EXPECT_GE(block * world, numel) << numel << " over " << world;
      EXPECT_LT(block * world - numel, world) << "padding below one element per rank";
      std::vector<int> owners(static_cast<size_t>(numel), 0);
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const SliceRange s = shard_range(numel, r, world);
        EXPECT_EQ(s.begin, next) << "rank " << r << " starts where rank " << r - 1 << " ended";
        EXPECT_LE(s.size(), block);
        EXPECT_GE(s.size(), 0);
        for (int64_t i = s.begin; i < s.end; ++i) ++owners[static_cast<size_t>(i)];
        next = s.end;
        // The same on every rank: a pure function of (numel, rank, world).
        const SliceRange again = shard_range(numel, r, world);
        EXPECT_EQ(again.begin, s.begin);
        EXPECT_EQ(again.end, s.end);
      }
      EXPECT_EQ(next, numel);
      for (int64_t i = 0; i < numel; ++i) EXPECT_EQ(owners[static_cast<size_t>(i)], 1) << "element " << i;
    }
  }
  // 10 over 3: blocks of 4, the last rank short.
  EXPECT_EQ(shard_range(10, 2, 3).begin, 8);
  EXPECT_EQ(shard_range(10, 2, 3).end, 10);
  // 5 over 4: blocks of 2, the last rank empty.
  EXPECT_EQ(shard_range(5, 3, 4).size(), 0);
  EXPECT_THROW(shard_range(5, 4, 4), Error);
}

std::vector<NetParam> fake_params(const std::vector<int64_t>& sizes) {
  std::vector<NetParam> params;
  for (size_t i = 0; i < sizes.size(); ++i) {
    NetParam p;
    p.name = "p" + std::to_string(i);
    p.blob = std::make_shared<Blob>(Shape{sizes[i]});
    params.push_back(p);
  }
  return params;
}

TEST(ShardLayout, PiecesMapEachSliceElementToItsParameter) {
  const std::vector<NetParam> params = fake_params({4, 7, 1, 3});  // 15 values
  GradBucket bucket;
  for (int id : {2, 0, 3, 1}) {  // readiness order differs from parameter order
    bucket.params.push_back(id);
    bucket.offsets.push_back(bucket.numel);
    bucket.numel += params[static_cast<size_t>(id)].blob->numel();
  }
  for (int world : {1, 2, 4, 6}) {
    std::vector<std::vector<int>> seen(params.size());
    for (size_t p = 0; p < params.size(); ++p) seen[p].assign(static_cast<size_t>(params[p].blob->numel()), 0);
    for (int r = 0; r < world; ++r) {
      const BucketShard s = shard_bucket(bucket, params, r, world);
      int64_t covered = 0;
      for (const ShardPiece& piece : s.pieces) {
        EXPECT_EQ(piece.slice_offset, covered) << "pieces follow each other in the slice";
        // The piece's first element is at bucket offset range.begin + slice_offset.
        size_t k = 0;
        while (bucket.params[k] != piece.param) ++k;
        EXPECT_EQ(bucket.offsets[k] + piece.param_offset, s.range.begin + piece.slice_offset);
        for (int64_t i = 0; i < piece.count; ++i) ++seen[static_cast<size_t>(piece.param)][static_cast<size_t>(piece.param_offset + i)];
        covered += piece.count;
      }
      EXPECT_EQ(covered, s.range.size()) << "rank " << r << " of " << world;
    }
    for (size_t p = 0; p < params.size(); ++p) {
      for (int v : seen[p]) EXPECT_EQ(v, 1) << "parameter " << p << ", world " << world;
    }
  }
}

// ---- reduce_scatter_async (what the buckets use) ----

// Several reduce-scatters in flight with a blocking allreduce between them,
// over tcp (asynchronous) and a world of one (the blocking default): every
// result exact, in issue order (parallel_test::check_reduce_scatter_async,
// which the shm, fabric and multi-process tests run too).
// Runs `body` on every rank (a thread each) of a world of one (the local
// communicator: the blocking defaults) and of three over tcp (asynchronous).
void on_one_and_three_ranks(const std::string& prefix, const std::function<void(Communicator&, int world)>& body) {
  for (int world : {1, 3}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    std::vector<std::unique_ptr<Communicator>> comms;
    if (world == 1) {
      comms.push_back(std::make_unique<LocalCommunicator>());
    } else {
      comms = make_world(world, prefix, AllreduceAlgorithm::kAuto, 20s);
    }
    expect_no_errors(run_ranks(world, [&](int rank) { body(*comms[static_cast<size_t>(rank)], world); }));
  }
}

TEST(ReduceScatterAsync, ExactResultsInIssueOrder) {
  on_one_and_three_ranks("rs_async", [](Communicator& c, int world) {
    parallel_test::check_reduce_scatter_async(c, {7, 0, 100003, 2 * world + 1});
    Tensor in = parallel_test::filled(7 * world, DType::kF32, c.rank());
    Tensor wrong({5}, DType::kF32);
    EXPECT_THROW(c.reduce_scatter_async(in, wrong, ReduceOp::kSum), ShapeError);
  });
}

// allgather_async (stage 3's prefetch): several in flight, a blocking
// collective queued between them, every block where it belongs.
TEST(AllgatherAsync, ExactResultsInIssueOrder) {
  on_one_and_three_ranks("ag_async", [](Communicator& c, int world) {
    const int rank = c.rank();
    const std::vector<int64_t> sizes = {7, 0, 100003};
    std::vector<Tensor> ins, outs;
    std::vector<std::unique_ptr<CommWork>> works;
    for (int64_t n : sizes) {
      ins.push_back(parallel_test::filled(n, DType::kF32, rank));
      outs.emplace_back(Shape{n * world}, DType::kF32);
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      works.push_back(c.allgather_async(ins[k], outs[k]));
      if (k == 0) {
        Tensor between = parallel_test::filled(5, DType::kF32, rank);
        c.allreduce(between, ReduceOp::kMax);  // queued behind the first
      }
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      works[k]->wait();
      for (int r = 0; r < world; ++r) {
        const Tensor want = parallel_test::filled(sizes[k], DType::kF32, r);
        for (int64_t i = 0; i < sizes[k]; ++i) {
          parallel_test::expect_eq(parallel_test::get_value(outs[k], r * sizes[k] + i),
                                   parallel_test::get_value(want, i),
                                   parallel_test::where(c, "allgather_async", DType::kF32, sizes[k]), i);
        }
      }
    }
    Tensor in = parallel_test::filled(7, DType::kF32, rank);
    Tensor wrong({5}, DType::kF32);
    EXPECT_THROW(c.allgather_async(in, wrong), ShapeError);
  });
}

// ---- the shard key ----

std::string config_error(const std::string& text) {
  try {
    parse_data_parallel_config(parse_config_text(text, "s.prototxt").block("parallel"));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ShardConfig, StagesParse) {
  auto shard_of = [](const std::string& v) {
    return parse_data_parallel_config(
               parse_config_text("parallel { data { shard: " + v + " } }", "s.prototxt").block("parallel"))
        .shard;
  };
  EXPECT_EQ(parse_data_parallel_config(ConfigNode()).shard, ShardStage::kNone);
  EXPECT_EQ(shard_of("NONE"), ShardStage::kNone);
  EXPECT_EQ(shard_of("OPTIMIZER"), ShardStage::kOptimizer);
  EXPECT_EQ(shard_of("GRADIENTS"), ShardStage::kGradients);
  EXPECT_EQ(shard_of("PARAMETERS"), ShardStage::kParameters);
  const std::string bad = config_error("parallel { data {\n shard: ALL } }");
  EXPECT_CONTAINS(bad, "OPTIMIZER");
  EXPECT_CONTAINS(bad, "'ALL'");
  EXPECT_CONTAINS(bad, "s.prototxt:2");
  EXPECT_CONTAINS(test::error_of<ConfigError>([] { parse_shard_stage("ALL", "--shard"); }), "--shard");
  DataParallelConfig c;
  c.shard = ShardStage::kGradients;
  EXPECT_CONTAINS(c.summary(), "shard GRADIENTS");
}

// ---- training: sharded == plain data parallel ----

std::vector<std::vector<float>> weights_of(Net& net) {
  std::vector<std::vector<float>> out;
  for (const NetParam& p : net.params()) {
    const float* d = p.blob->data.data<float>();
    out.emplace_back(d, d + p.blob->numel());
  }
  return out;
}

struct TrainedRun {
  std::vector<float> losses;                 // rank 0's
  std::vector<std::vector<float>> weights;   // rank 0's, at the end
  std::vector<int64_t> slice_values;         // per rank: elements of its pieces
  std::vector<size_t> solver_history;        // per rank: the Solver optimizer's own tensors left
};

// Trains `world` ranks to spec.max_iter (resuming from `resume` when given),
// checking that every rank ends with the same weights and losses.
TrainedRun train(const TempDir& dir, int world, const Spec& spec, const DataParallelConfig& dp,
          const std::string& resume = "") {
  auto comms = make_world(world, "zero", AllreduceAlgorithm::kAuto, 20s);
  const SolverConfig config = make_config(dir, spec);
  std::filesystem::create_directories(dirname_of(config.snapshot_prefix));
  std::vector<TrainedRun> runs(static_cast<size_t>(world));
  expect_no_errors(run_ranks(world, [&](int rank) {
    SolverOptions o;
    o.rank = rank;
    o.world_size = world;
    o.comm = comms[static_cast<size_t>(rank)].get();
    o.snapshots = rank == 0 ? SnapshotWriting::kEnabled : SnapshotWriting::kDisabled;
    Solver solver(config, o);
    if (!resume.empty()) solver.restore(resume);
    DataParallel strategy(solver, *comms[static_cast<size_t>(rank)], dp);
    TrainedRun& r = runs[static_cast<size_t>(rank)];
    if (const ShardedUpdate* s = strategy.sharded()) {
      int64_t n = 0;
      for (const NetParam& p : s->pieces()) n += p.blob->numel();
      r.slice_values.push_back(n);
    }
    r.solver_history.push_back(solver.optimizer().state_tensors().size());
    if (spec.snapshot > 0) {
      solver.solve();  // every rank takes part in gathering each snapshot
    } else {
      while (solver.iter() < spec.max_iter) r.losses.push_back(solver.step());
    }
    strategy.gather_parameters();  // shard PARAMETERS: the whole weights (every rank takes part)
    r.weights = weights_of(solver.net());
  }));
  for (int rank = 1; rank < world; ++rank) {
    EXPECT_EQ(runs[static_cast<size_t>(rank)].weights, runs[0].weights) << "rank " << rank;
    EXPECT_EQ(runs[static_cast<size_t>(rank)].losses, runs[0].losses) << "rank " << rank;
  }
  TrainedRun out = runs[0];
  out.slice_values.clear();
  out.solver_history.clear();
  for (const TrainedRun& r : runs) {
    out.slice_values.insert(out.slice_values.end(), r.slice_values.begin(), r.slice_values.end());
    out.solver_history.insert(out.solver_history.end(), r.solver_history.begin(), r.solver_history.end());
  }
  return out;
}

// Largest |got - want| relative to max(1, |want|) over every weight.
double max_weight_diff(const TrainedRun& got, const TrainedRun& want) {
  double worst = 0.0;
  for (size_t p = 0; p < want.weights.size(); ++p) {
    for (size_t i = 0; i < want.weights[p].size(); ++i) {
      const double w = want.weights[p][i];
      worst = std::max(worst, std::fabs(got.weights[p][i] - w) / std::max(1.0, std::fabs(w)));
    }
  }
  return worst;
}

TEST_F(ShardedTraining, MatchesPlainDataParallel) {
  struct Case {
    int world;
    std::string type;
    double clip;
  };
  const std::vector<Case> cases = {{2, "SGD", 0.0}, {2, "Adam", 0.0}, {2, "SGD", 0.5}, {2, "Adam", 0.5},
                                   {3, "SGD", 0.0}, {3, "Adam", 0.0}, {3, "SGD", 0.5}, {3, "Adam", 0.5},
                                   {4, "SGD", 0.0}, {4, "Adam", 0.5}};
  for (const Case& c : cases) {
    Spec spec;
    spec.type = c.type;
    spec.clip = c.clip;
    spec.batch = 24 / c.world;
    const TrainedRun plain = train(dir_, c.world, spec, dp_config(ShardStage::kNone, kTinyBuckets));
    ASSERT_EQ(plain.losses.size(), 12u);
    ASSERT_LT(plain.losses.back(), plain.losses.front()) << "it learns";
    for (ShardStage stage : {ShardStage::kOptimizer, ShardStage::kGradients, ShardStage::kParameters}) {
      for (double bucket_mb : {kTinyBuckets, kOneBucket}) {
        const std::string what = std::to_string(c.world) + " ranks, " + c.type + ", clip " +
                                 std::to_string(c.clip) + ", shard " + shard_stage_name(stage) + ", bucket_mb " +
                                 std::to_string(bucket_mb);
        SCOPED_TRACE(what);
        const TrainedRun got = train(dir_, c.world, spec, dp_config(stage, bucket_mb));
        // Each rank kept its slice only: together every value once, and the
        // Solver's own whole-size history is gone.
        int64_t total = 0;
        for (int64_t n : got.slice_values) {
          EXPECT_LE(n, 199 / c.world + 4) << "a rank holds about 1/world of the values";
          total += n;
        }
        EXPECT_EQ(total, 199);
        for (size_t n : got.solver_history) EXPECT_EQ(n, 0u);
        if (c.world == 2) {
          // Two ranks add the same two numbers in either reduction (a + b ==
          // b + a in floating point): the same weights, bit for bit. Clipping
          // sums the squares in another order (per slice, then per rank).
          if (c.clip == 0.0) {
            EXPECT_EQ(got.weights, plain.weights);
            EXPECT_EQ(got.losses, plain.losses);
          } else {
            EXPECT_LE(max_weight_diff(got, plain), 1e-6);
          }
        } else {
          // Three and four ranks: plain data parallel's tree allreduce
          // (small buckets) and the ring reduce-scatter add the gradients
          // in different orders, so the last bits may differ.
          EXPECT_LE(max_weight_diff(got, plain), 1e-5);
        }
      }
    }
  }
}

TEST_F(ShardedTraining, OverlapOffCompressionAndIterSizeMatchPlainDataParallel) {
  Spec spec;
  spec.batch = 12;
  // Overlap off: one bucket, one contiguous slice per rank.
  const TrainedRun plain = train(dir_, 2, spec, dp_config(ShardStage::kNone, kTinyBuckets, Overlap::kOff));
  const TrainedRun off = train(dir_, 2, spec, dp_config(ShardStage::kGradients, kTinyBuckets, Overlap::kOff));
  EXPECT_EQ(off.weights, plain.weights);
  const TrainedRun off3 = train(dir_, 2, spec, dp_config(ShardStage::kParameters, kTinyBuckets, Overlap::kOff));
  EXPECT_EQ(off3.weights, plain.weights);
  // FP16 on the wire: both scale by 1/world, sum two fp16 values, decode.
  const TrainedRun plain16 = train(dir_, 2, spec, dp_config(ShardStage::kNone, kTinyBuckets, Overlap::kOn, GradCompression::kFP16));
  const TrainedRun zero16 = train(dir_, 2, spec, dp_config(ShardStage::kOptimizer, kTinyBuckets, Overlap::kOn, GradCompression::kFP16));
  EXPECT_EQ(zero16.weights, plain16.weights);
  EXPECT_NE(zero16.weights, plain.weights) << "compression changed nothing: was it on?";
  EXPECT_LE(max_weight_diff(zero16, plain), 1e-2);
  const TrainedRun zero3_16 = train(dir_, 2, spec, dp_config(ShardStage::kParameters, kTinyBuckets, Overlap::kOn, GradCompression::kFP16));
  EXPECT_EQ(zero3_16.weights, plain16.weights);
  // iter_size 2: gradients accumulate over two passes, buckets leave after the second.
  spec.batch = 6;
  spec.iter_size = 2;
  const TrainedRun plain_acc = train(dir_, 2, spec, dp_config(ShardStage::kNone, kTinyBuckets));
  const TrainedRun zero_acc = train(dir_, 2, spec, dp_config(ShardStage::kGradients, kTinyBuckets));
  EXPECT_EQ(zero_acc.weights, plain_acc.weights);
  EXPECT_EQ(zero_acc.losses, plain_acc.losses);
  const TrainedRun zero3_acc = train(dir_, 2, spec, dp_config(ShardStage::kParameters, kTinyBuckets));
  EXPECT_EQ(zero3_acc.weights, plain_acc.weights);
  EXPECT_EQ(zero3_acc.losses, plain_acc.losses);
}

// A gradient that is not finite on one rank only, in the slice another rank
// owns: every rank must see the same verdict (else one would update and the
// others not), and the norm used for clipping is the global one.
TEST_F(ShardedTraining, EveryRankSeesTheGlobalFiniteVerdictAndNorm) {
  Spec spec;
  spec.clip = 1.0;
  const SolverConfig config = make_config(dir_, spec);
  for (const bool poison : {false, true}) {
    SCOPED_TRACE(poison ? "rank 1 holds a NaN in rank 0's slice" : "every gradient finite");
    auto comms = make_world(2, "zero", AllreduceAlgorithm::kAuto, 20s);
    std::vector<int> verdicts(2, -1);
    std::vector<std::vector<std::vector<float>>> weights(2);
    expect_no_errors(run_ranks(2, [&](int rank) {
      SolverOptions o;
      o.rank = rank;
      o.world_size = 2;
      o.comm = comms[static_cast<size_t>(rank)].get();
      Solver solver(config, o);
      DataParallel dp(solver, *comms[static_cast<size_t>(rank)], dp_config(ShardStage::kOptimizer, kOneBucket));
      // One bucket: fc2.weight first, so its element 0 is in rank 0's slice [0, 100).
      ASSERT_EQ(dp.buckets().size(), 1u);
      ASSERT_EQ(solver.net().params()[static_cast<size_t>(dp.buckets()[0].params[0])].name, "fc2.weight");
      for (NetParam& p : solver.net().params()) p.blob->diff.fill(0.5f);
      if (poison && rank == 1) {
        solver.net().params()[static_cast<size_t>(dp.buckets()[0].params[0])].blob->diff.data<float>()[0] = NAN;
      }
      dp.before_update(solver.net());
      verdicts[static_cast<size_t>(rank)] = dp.scale_check_gradients(1.0f) ? 1 : 0;
      if (!poison) {
        // The global norm is sqrt(199 x 0.25) = 7.05 > 1: every gradient
        // becomes 0.5 / (7.05 + 1e-6); a rank that saw only its own half
        // (norm 5.0) would scale by another factor.
        const std::vector<std::vector<float>> before = weights_of(solver.net());
        dp.run_update(solver.net());
        const std::vector<std::vector<float>> after = weights_of(solver.net());
        const double lr = solver.current_lr();
        const double expected_step = lr * 0.5 / (std::sqrt(199 * 0.25) + 1e-6);
        for (size_t p = 0; p < before.size(); ++p) {
          for (size_t i = 0; i < before[p].size(); ++i) {
            const double wd = 0.001 * before[p][i];  // weight_decay, decay_mult 1
            EXPECT_NEAR(before[p][i] - after[p][i], expected_step + lr * wd, 1e-6) << "parameter " << p << " [" << i << "]";
          }
        }
        weights[static_cast<size_t>(rank)] = after;
      }
    }));
    EXPECT_EQ(verdicts[0], poison ? 0 : 1);
    EXPECT_EQ(verdicts[1], poison ? 0 : 1);
    EXPECT_EQ(weights[0], weights[1]);
  }
}

// ---- snapshots across layouts ----

TEST_F(ShardedTraining, SnapshotsHoldTheWholeStateAndResumeOnAnyLayout) {
  Spec spec;
  spec.type = "Adam";
  spec.batch = 12;
  spec.max_iter = 12;
  // Straight through, plain and sharded.
  spec.prefix = "plain/run";
  const TrainedRun plain = train(dir_, 2, spec, dp_config(ShardStage::kNone, kTinyBuckets));

  // Sharded to 6, with a snapshot: the file holds whole tensors.
  spec.prefix = "zero/run";
  spec.max_iter = 6;
  spec.snapshot = 6;
  train(dir_, 2, spec, dp_config(ShardStage::kGradients, kTinyBuckets));
  const std::string zero_state = dir_.file("zero/run_iter_6.solverstate.safetensors");
  const SolverState st = load_solver_state(zero_state);
  EXPECT_EQ(st.optimizer_steps, 6);
  ASSERT_EQ(st.history.size(), 8u);  // 4 parameters x (exp_avg, exp_avg_sq)
  EXPECT_EQ(st.history[0].first, "fc1.weight.exp_avg");
  EXPECT_EQ(st.history[0].second.shape(), (Shape{kHidden, kInputs}));
  for (const auto& [name, t] : st.history) {
    double sum = 0.0;
    const float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) sum += std::fabs(v[i]);
    EXPECT_GT(sum, 0.0) << name << " holds every rank's slice, not zeros";
  }
  // The plain run's snapshot at 6 for the reverse direction.
  spec.prefix = "plain6/run";
  train(dir_, 2, spec, dp_config(ShardStage::kNone, kTinyBuckets));
  const std::string plain_state = dir_.file("plain6/run_iter_6.solverstate.safetensors");
  {
    const SolverState ps = load_solver_state(plain_state);
    ASSERT_EQ(ps.history.size(), st.history.size());
    for (size_t i = 0; i < ps.history.size(); ++i) {
      EXPECT_EQ(ps.history[i].first, st.history[i].first);
      EXPECT_EQ(ps.history[i].second.shape(), st.history[i].second.shape());
    }
  }

  spec.max_iter = 12;
  spec.snapshot = 0;
  // Sharded snapshot, resumed plain; plain snapshot, resumed sharded (both
  // stages): the weights of the run that never stopped.
  spec.prefix = "a/run";
  EXPECT_EQ(train(dir_, 2, spec, dp_config(ShardStage::kNone, kTinyBuckets), zero_state).weights, plain.weights);
  spec.prefix = "b/run";
  EXPECT_EQ(train(dir_, 2, spec, dp_config(ShardStage::kOptimizer, kOneBucket), plain_state).weights, plain.weights);
  spec.prefix = "c/run";
  EXPECT_EQ(train(dir_, 2, spec, dp_config(ShardStage::kGradients, kTinyBuckets), zero_state).weights, plain.weights);
  spec.prefix = "c3/run";
  EXPECT_EQ(train(dir_, 2, spec, dp_config(ShardStage::kParameters, kOneBucket), zero_state).weights, plain.weights);

  // Another world size: the data order restarts, so compare sharded with
  // plain data parallel resumed from the same snapshot on 3 ranks.
  spec.batch = 8;
  spec.prefix = "d/run";
  const TrainedRun plain3 = train(dir_, 3, spec, dp_config(ShardStage::kNone, kTinyBuckets), zero_state);
  spec.prefix = "e/run";
  const TrainedRun zero3 = train(dir_, 3, spec, dp_config(ShardStage::kOptimizer, kTinyBuckets), zero_state);
  EXPECT_LE(max_weight_diff(zero3, plain3), 1e-5);
  EXPECT_NE(zero3.weights, plain.weights) << "the 3-rank runs should have read another data order";
}

// ---- stage 3's gathers (memory: parallel_sharded_memory_test.cpp) ----

// Stage 3 between and inside steps: the net holds a bucket's whole weights
// only while layers that read it run (seen from hooks wrapped around the
// strategy's own), none between steps, all of them after gather_parameters;
// and the next layer's weights are on their way (prefetched) meanwhile.
TEST_F(ShardedTraining, StageThreeHoldsWholeWeightsOnlyWhileTheirLayersRun) {
  Spec spec;
  Solver solver(make_config(dir_, spec));
  LocalCommunicator comm;
  DataParallel dp(solver, comm, dp_config(ShardStage::kParameters, kTinyBuckets));
  Net& net = solver.net();
  auto held = [&] {  // "fc1.weight fc1.bias": the parameters holding memory now
    std::string out;
    for (const NetParam& p : net.params()) {
      if (p.blob->data.holds_memory()) out += (out.empty() ? "" : " ") + p.name;
    }
    return out;
  };
  EXPECT_EQ(held(), "") << "the whole weights go once the slices hold them";
  const Net::LayerPassHooks inner = net.layer_pass_hooks();
  const WeightGathering& gathering = *dp.sharded()->gathering();
  auto ahead = [&]() -> std::string {  // the layer whose weights are being prefetched
    const int b = gathering.bucket_ahead();
    if (b < 0) return "";
    const int id = dp.buckets()[static_cast<size_t>(b)].params[0];
    return " | ahead " + net.layer(net.params()[static_cast<size_t>(id)].owner_layer).name();
  };
  std::vector<std::string> seen;  // "forward fc1: fc1.weight fc1.bias | ahead fc2"
  Net::LayerPassHooks probe = inner;
  probe.before_forward = [&](int i) {
    inner.before_forward(i);
    seen.push_back("forward " + net.layer(i).name() + ": " + held() + ahead());
  };
  probe.before_backward = [&](int i) {
    inner.before_backward(i);
    seen.push_back("backward " + net.layer(i).name() + ": " + held() + ahead());
  };
  net.set_layer_pass_hooks(probe);
  solver.step();
  const std::vector<std::string> want = {
      "forward data:  | ahead fc1",
      "forward fc1: fc1.weight fc1.bias | ahead fc2",
      "forward relu1:  | ahead fc2",
      "forward fc2: fc2.weight fc2.bias",
      "forward loss: ",
      "backward loss:  | ahead fc2",
      "backward fc2: fc2.weight fc2.bias | ahead fc1",
      "backward relu1:  | ahead fc1",
      "backward fc1: fc1.weight fc1.bias",
  };
  EXPECT_EQ(seen, want);
  EXPECT_EQ(held(), "") << "after the update";
  dp.gather_parameters();
  EXPECT_EQ(held(), "fc1.weight fc1.bias fc2.weight fc2.bias");
  net.set_layer_pass_hooks(inner);
}

}  // namespace
}  // namespace strata::parallel
