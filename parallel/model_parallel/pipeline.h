// Pipeline-parallel training: each rank of a pp group runs one stage (a
// contiguous range of layers, parallel/model_parallel/pipeline_plan.h) and the stages pass
// activations forward and gradients back for M micro-batches per step, in
// the order of a schedule (parallel/model_parallel/pipeline_schedule.h).
//
//   PipelineParallel pipe(config, grid.pp(), *grad_comm, options);  // collective over the pp group
//   if (resume) pipe.restore(state_path);                             // every stage its part
//   DataParallel dp(pipe.solver(), grid.dp(), dp_config);           // optional, over the dp group
//   pipe.solver().solve();
//
// It attaches to its own Solver as a TrainingStrategy (scope kWithinReplica:
// it owns the step, the test and the snapshot layout), so a DataParallel on
// the same Solver combines with it in either order of construction.
//
// What it does:
// - Builds only this stage's layers: a Solver whose net is the stage's
//   compute net (iter_size = M, so gradients are averaged over the
//   micro-batches and each stage updates its own weights once per step),
//   further copies of that net sharing its parameters for micro-batches in
//   flight (M with GPIPE, up to P - stage with ONE_F_ONE_B), and a feeder net
//   with the stage's data layers.
// - Setup: stages build in order; each sends every receiver the shape of
//   each boundary blob and whether it wants the gradient back. A receiver
//   whose net cannot take those shapes fails with a ShapeError naming the
//   boundary and both stages.
// - A step (run_step): runs the schedule; activations travel
//   on `activations` (lower -> higher stage), gradients on `gradients`
//   (higher -> lower), sends from a background thread, so that a large send
//   never blocks a stage that must first receive. Over nccl (GPUs), whose
//   communicator runs one operation at a time, every transfer goes on
//   `activations` instead, the sends of one pass and the receives of the
//   next in one batch (parallel/model_parallel/pipeline_transfers.h). The loss (summed over the
//   stages' loss layers, averaged over micro-batches) is allreduced over the
//   group, so every stage reports the same loss (DataParallel then averages
//   it over the dp group).
// - Snapshots: every stage sends its parameters, optimizer history and
//   layer states to stage 0, whose writer (dp rank 0) writes one weights
//   file and one state file with full-net names: they load into the unsplit
//   net (strata train --weights, or --snapshot with one process). Under
//   tensor parallelism tp rank 0 of each stage sends whole tensors
//   (gathered from its group) and the others write nothing.
// - Resume (restore): every stage reads the same full-net snapshot and
//   restores its own part (parameters, optimizer history, layer states,
//   iteration and loss window); the feeder restores its data layers.
// - TEST phase (test_interval > 0 and a TEST net): the TEST-phase layers are
//   staged like the TRAIN ones (a `stage:` key, else the stage of the TRAIN
//   layer of the same name, else that of the layer before) and each stage
//   builds a forward-only test net sharing its weights. Solver::test() runs
//   them through the stages batch by batch (run_test) and every rank
//   reports the last stage's scalar outputs, averaged over test_iter (and
//   over the dp group by DataParallel).
// Not supported under a pipeline: parameters shared (`param { name: }`)
// between layers on different stages.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/net.h"
#include "framework/solver/solver.h"
#include "framework/solver/training_strategy.h"
#include "parallel/model_parallel/model_parallel_config.h"
#include "parallel/model_parallel/pipeline_plan.h"
#include "parallel/model_parallel/pipeline_schedule.h"
#include "parallel/model_parallel/pipeline_transfers.h"

namespace strata::parallel {

// How a step's activations and gradients travel between the stages.
enum class StageTransfers {
  kAuto,             // kBatched over nccl, else kBackgroundSends
  kBackgroundSends,  // receives in the schedule, sends from a thread per direction
  kBatched,          // the sends of a pass and the receives of the next in one exchange
};

struct PipelineOptions {
  PipelineConfig config;
  // Where the stage's nets run (the rank's GPU, or the CPU).
  Device device = Device::cpu();
  StageTransfers transfers = StageTransfers::kAuto;
  // One stage per TRAIN-phase layer (the balancer's cut); empty: the
  // `stage:` keys of the net config.
  std::vector<int> stage_of_layer;
  // Data-parallel position of this pipeline (data sharding and seeds).
  int dp_rank = 0;
  int dp_size = 1;
  Communicator* tp = nullptr;  // NetOptions::comm of the stage's nets (tensor parallelism)
  // The dp group (the same stage of every pipeline), over which each
  // pipeline's data cursors are gathered into snapshots as "@rank<r>/<layer>"
  // so that every dp rank resumes its own shard (nullptr: one pipeline).
  Communicator* dp = nullptr;
  // Whether this rank writes snapshots (dp rank 0's pipeline, tp rank 0 of
  // each stage's group: it gathers the split parameters); stage 0 writes the files.
  SnapshotWriting snapshots = SnapshotWriting::kEnabled;
};

// Times of the last step on this stage, for the bubble benchmark.
struct PipelineStepTimes {
  double step_seconds = 0.0;     // the whole step runner
  double compute_seconds = 0.0;  // inside forward/backward of this stage's nets
};

// Sums over the steps after the first (which allocates and warms up).
struct PipelineTimeTotals {
  int64_t steps = 0;
  double step_seconds = 0.0;
  double compute_seconds = 0.0;
  // The share of a step this stage waited (not computing): the measured bubble.
  double idle_share() const { return step_seconds > 0 ? 1.0 - compute_seconds / step_seconds : 0.0; }
};

class PipelineParallel final : public TrainingStrategy {
 public:
  // Collective over the pp group (activations.rank() is the stage). Both
  // communicators join the same ranks in the same order; `activations`
  // also carries the setup and snapshot messages and the loss.
  PipelineParallel(const SolverConfig& config, Communicator& activations, Communicator& gradients,
                   const PipelineOptions& options);
  ~PipelineParallel() override;
  PipelineParallel(const PipelineParallel&) = delete;
  PipelineParallel& operator=(const PipelineParallel&) = delete;

  Solver& solver() { return *solver_; }
  int stage() const { return stage_; }
  int stages() const { return plan_.stages; }
  const PipelinePlan& plan() const { return plan_; }
  const PipelineOptions& options() const { return options_; }
  int activation_slots() const { return static_cast<int>(slots_.size()); }
  // The nets that run this stage's layers on its parameters: the solver's
  // and its copies for the micro-batches in flight.
  const std::vector<Net*>& stage_nets() const { return slots_; }
  // This stage: parameters, gradients and buffers once, activations of
  // every slot net and the feeder.
  MemoryReport memory_report() const;
  const PipelineStepTimes& last_step_times() const { return times_; }
  const PipelineTimeTotals& total_times() const { return totals_; }
  // "stage 1: 12 steps, step 35.1 ms, compute 27.0 ms, idle 23.1% (theory 20.0%)"
  std::string times_line() const;

  bool has_test_net() const { return test_net_ != nullptr; }

  // Resumes from a snapshot of the whole net (written by a pipeline of any
  // layout, or by one process): this stage restores its part. Collective
  // only in that every stage must call it with the same file.
  ResumeInfo restore(const std::string& state_path);

  // ---- TrainingStrategy ----
  std::string name() const override { return "pipeline"; }
  StrategyScope scope() const override { return StrategyScope::kWithinReplica; }
  bool owns_step() const override { return true; }
  float run_step() override;
  bool owns_test() const override { return test_net_ != nullptr; }
  NamedValues run_test() override;
  void snapshot_state(SolverState& st) override { gather_snapshot(st); }
  bool assembles_snapshot() const override { return true; }
  void write_weights(const std::string& path, const Metadata& md) override;

 private:
  struct Sender;
  float forward(int micro);
  void backward(int micro);
  Net& slot(int micro) { return *slots_[static_cast<size_t>(micro) % slots_.size()]; }
  // The gradient buffer of boundary b, on the nets' device, of its shape.
  Tensor& grad_buffer(int b);
  // kBatched: posts one batch of the step (TEST: of the TEST pass).
  void exchange_batch(const std::vector<StageTransfer>& batch);
  void exchange_test_batch(const std::vector<StageTransfer>& batch);
  void exchange_setup(const SolverConfig& config);
  void connect_links_downward();
  void setup_test(const SolverConfig& config, const NetOptions& net_options);
  void gather_snapshot(SolverState& st);
  // Runs `wait` (a transfer, an exchange or a collective on the pp group);
  // an error it throws (a timeout, a peer gone) is thrown again beginning
  // with this stage, its rank and the iteration (1-based, as the log counts
  // them), then what() it waited for (the micro-batch, the direction and the
  // peer stage), then the cause. what() runs only then: a step builds no text.
  void waiting_for(const std::function<std::string()>& what, const std::function<void()>& wait) const;
  // "send the activation 'pool2' of micro-batch 1 to stage 1"
  std::string describe_transfer(const StageTransfer& t) const;
  // What a batch of the step holds, and before which op it runs.
  std::string describe_batch(const std::vector<StageTransfer>& batch, size_t before_op) const;

  PipelineOptions options_;
  Communicator& act_;
  Communicator& grad_;
  int stage_ = 0;
  PipelinePlan plan_;
  std::vector<PipeOp> ops_;
  std::unique_ptr<Net> feeder_;
  std::unique_ptr<Solver> solver_;
  bool set_up_ = false;  // the constructor has finished: later waits belong to an iteration
  std::vector<Net*> slots_;                  // slots_[0] is the solver's net
  std::vector<std::unique_ptr<Net>> extra_slots_;
  std::vector<Tensor> grad_in_;              // per boundary: gradient received from its receiver
  std::unique_ptr<Sender> act_sender_, grad_sender_;  // kBackgroundSends only
  bool batched_ = false;                               // kBatched
  std::vector<std::vector<StageTransfer>> step_batches_;
  // Gathered at a snapshot point on the writer: full-net weights in order.
  std::vector<std::pair<std::string, Tensor>> snapshot_weights_;
  PipelineStepTimes times_;
  PipelineTimeTotals totals_;
  int64_t steps_run_ = 0;
  double compute_acc_ = 0.0;
  // TEST phase: its own plan (boundaries), forward-only net and feeder.
  PipelinePlan test_plan_;
  std::unique_ptr<Net> test_net_, test_feeder_;
  Communicator* dp_ = nullptr;  // options_.dp
};

}  // namespace strata::parallel
