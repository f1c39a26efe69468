// Synchronous data-parallel training: every rank runs the same Solver on its
// own shard of the data (data layers read samples i % world == rank) and the
// ranks average their gradients before each update, so N ranks with batch
// B/N train like one process with batch B.
//
//   Solver solver(config, {rank, world, comm, rank == 0 ? kEnabled : kDisabled});
//   (restore a snapshot / load weights)
//   solver.set_stop_flag(&g_stop);
//   DataParallel dp(solver, *comm, dp_config);  // checks the nets agree, broadcasts rank 0's weights, attaches
//   solver.solve();
//
// It attaches to the Solver as a TrainingStrategy (framework/solver/training_strategy.h,
// scope kAcrossReplicas) and takes part in:
// - Gradients. The updated parameters (learnable, lr_mult > 0, reached by
//   backward) are grouped into buckets of about bucket_mb, in the order their
//   gradients become final during backward (the reverse of the layer order).
//   With overlap on, the Net's grad-ready callback, during the last of the
//   iter_size backward passes, starts allreduce_async on a bucket whose
//   parameters are all ready, while backward goes on; buckets start strictly
//   in index order, so every rank issues the same sequence. before_update
//   waits for all of them. With overlap off, before_update does one blocking
//   allreduce of all gradients. A bucket is reduced in place, as a view of
//   the Net's flat gradient buffer (Net::gradient_view: the default
//   blob_memory, uncompressed, the buffer where the backend reduces);
//   otherwise its gradients are copied into a wire buffer and the averages
//   back. With compression FP16/BF16 the wire buffers hold 16-bit values
//   (scaled by 1/world before the sum, so FP16 does not overflow).
// - The loss: each rank's loss is averaged over the ranks (one small
//   allreduce per iteration that also carries the stop flag: when any rank is
//   asked to stop, every rank stops after the same iteration).
// - Test results and the TRAIN outputs of progress lines are averaged.
// - Buffers (learnable: no, e.g. BatchNorm running statistics) are averaged
//   before each test and at each snapshot point.
// - Snapshots: rank 0 writes them; at each snapshot point the other ranks'
//   layer states (their data cursors) are gathered into rank 0's snapshot
//   (framework/solver/solver.h: "@rank<r>/<layer>"), so that a resume with the same
//   number of ranks continues each rank's data exactly. Where another
//   strategy assembles the snapshot (a pipeline: its data layers live on
//   its stages), that one gathers the replicas' states instead.
// - Stopping: when any rank's stop flag (Solver::set_stop_flag) is set, every
//   rank stops after the same iteration.
// - Nets on a GPU: with the nccl backend the buckets live on the same GPU
//   and are reduced there (compression is refused); with tcp or mpi they
//   live on the host and the gradients are copied in and out (staged).
// - Sharding (shard: OPTIMIZER or GRADIENTS, ZeRO stages 1 and 2): buckets
//   are reduce-scattered instead of allreduced, each rank keeps the optimizer
//   state of its slice of every bucket and updates only that slice, and the
//   updated slices are allgathered (sharded_update.h). With PARAMETERS (stage
//   3) the slices are all a rank keeps of the weights: a bucket's whole
//   weights are gathered just before its layers run and let go after
//   (weight_gathering.h), and tests and snapshots gather them all. The net
//   hands its gradients over to the strategy, which keeps them in bucket
//   slots that the reduce-scatter reads in place: whole with OPTIMIZER, a
//   few used in turn with GRADIENTS and PARAMETERS (gradient_slots.h). The strategy then owns
//   the update and the gradient check (the Solver's clipping and non-finite
//   check see the global norm through it). Every updated parameter is in a
//   bucket (BucketReach::kAllUpdated); with overlap off, one bucket of all.
// Communication errors (a timeout, a closed connection: they name the rank,
// host and operation) propagate out of Solver::solve() as strata::Error.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/net.h"
#include "framework/solver/solver.h"
#include "framework/tensor.h"
#include "framework/solver/training_log.h"
#include "framework/solver/training_strategy.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/data_parallel/grad_buckets.h"
#include "parallel/data_parallel/sharded_update.h"

namespace strata::parallel {

class DataParallel final : public TrainingStrategy {
 public:
  // Verifies that every rank built the same parameters (names and shapes;
  // ConfigError naming the first difference), broadcasts rank 0's parameters
  // and buffers, and attaches to the solver. `solver` and `comm` must outlive this.
  DataParallel(Solver& solver, Communicator& comm, const DataParallelConfig& config);
  // Detaches from the solver.
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return comm_.rank(); }
  int world_size() const { return comm_.world_size(); }
  const DataParallelConfig& config() const { return config_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // The sliced update with shard OPTIMIZER, GRADIENTS or PARAMETERS; nullptr otherwise.
  const ShardedUpdate* sharded() const { return sharded_.get(); }

  // ---- TrainingStrategy ----
  std::string name() const override { return "data parallel"; }
  StrategyScope scope() const override { return StrategyScope::kAcrossReplicas; }
  void before_step() override {
    if (sharded_) sharded_->before_step();
  }
  bool wants_grad_ready() const override { return config_.overlap == Overlap::kOn; }
  void on_grad_ready(int param_index) override;
  void before_update(Net&) override { finish_gradients(); }
  bool owns_update() const override { return sharded_ != nullptr; }
  double run_update(Net&) override;
  bool owns_gradient_check() const override { return sharded_ != nullptr; }
  bool scale_check_gradients(float factor) override;
  // The mean loss over the ranks; carries the stop flag in the same allreduce.
  float reduce_loss(float loss) override;
  // Results read one step later: the loss averaged and the stop agreed on
  // where the record lies (nccl: on the device, queued; tcp: on the host).
  // Sharded data parallel checks the gradients itself and reads every step.
  bool takes_results_one_step_later() const override { return sharded_ == nullptr; }
  void reduce_results(const StepSlots& slots) override;
  void read_results(const StepVerdict& verdict) override {
    if (verdict.stop > 0.0) global_stop_ = true;
  }
  void before_test() override;
  void reduce_outputs(NamedValues& values) override;
  void snapshot_state(SolverState& state) override;
  bool decides_stop() const override { return true; }
  bool stop_requested() const override { return global_stop_; }

  // Bytes of the wire buffers this rank holds for plain data parallel
  // (0 when every bucket is reduced in place in the net's gradients).
  size_t wire_buffer_bytes() const;

  // Seconds spent waiting for communication (gradients and loss; sharded:
  // also the check's and the weights' allgathers) since the previous call.
  double take_comm_wait_seconds();

  // The parameter check and rank 0's broadcast (the constructor does both).
  void check_parameters_match();
  void broadcast_parameters();
  // Averages the buffers (non-learnable parameters) over the ranks.
  void average_buffers();
  // Nets besides the solver's that run its layers on its parameters (a
  // pipeline stage's copies for micro-batches in flight): with shard
  // PARAMETERS their layers gather and release the weights too. Call it
  // once, before training.
  void add_stage_nets(const std::vector<Net*>& nets) {
    if (sharded_) sharded_->add_nets(nets);
  }
  // With shard PARAMETERS: every whole weight into the net (tests, snapshots
  // and whoever reads the weights after training call it on every rank); the
  // next update lets them go again. Nothing otherwise.
  void gather_parameters();

 private:
  using Clock = std::chrono::steady_clock;

  void launch(size_t bucket);
  // The gradients of `params` as one view of the net's flat buffer when they
  // can be reduced there (no compression, on the wire's device), else nullopt.
  std::optional<Tensor> in_place(const std::vector<int>& params) const;
  void finish_gradients();
  // A parameter's gradient into / out of a wire buffer at element `offset`,
  // with the configured compression; host or device on either side.
  void encode_param(const Tensor& grad, float scale, Tensor& buf, int64_t offset);
  void decode_param(const Tensor& buf, int64_t offset, Tensor& grad);
  // Collectives on small host tensors, staged through wire_device_ when the
  // backend moves device memory only.
  static void copy_record_value(double* dst, const double* src, Device record, bool to_record);
  void allreduce_host(Tensor& t, ReduceOp op);
  void allgather_host(const Tensor& in, Tensor& out);
  void gather_host(const Tensor& in, Tensor& out, int root);
  void gather_layer_states(SolverState& state);

  Solver& solver_;
  Communicator& comm_;
  DataParallelConfig config_;
  std::vector<GradBucket> buckets_;
  std::vector<int> bucket_of_;        // per param: its bucket, or -1
  std::vector<int> pending_;          // per bucket: parameters not yet ready this iteration
  std::vector<char> reported_;        // per param: reported ready this iteration
  size_t next_launch_ = 0;            // buckets [0, next_launch_) are in flight
  Device wire_device_;                // where buffers_ live: the GPU with nccl, else the host
  std::vector<Tensor> buffers_;       // per bucket (overlap on), or one for all (overlap off); empty in place
  std::vector<Tensor> views_;         // per bucket (overlap on): the gradients reduced in place, this step
  std::vector<char> in_place_;        // per bucket (overlap on): reduced in place this step
  Tensor staging_;                    // host f32 scratch: GPU gradients into compressed host buckets
  std::vector<std::unique_ptr<CommWork>> works_;  // after buffers_: destroyed first
  std::vector<int64_t> launched_us_;  // per bucket: when its allreduce started (timeline)
  Tensor scalars_;                    // loss + stop flag
  Tensor results_;                    // the same, on the device (results read one step later)
  std::unique_ptr<ShardedUpdate> sharded_;  // any shard stage: owns its buffers (and the gradients) instead of buffers_

  bool global_stop_ = false;
  double comm_wait_ = 0.0;
};

// The console printer of a data-parallel run (rank 0): like ConsolePrinter,
// with the world size, per-rank and total throughput, and the share of the
// time spent waiting for communication on each progress line:
//   iter 100/600  loss 0.42  lr 0.048  2476 samples/s/rank  4953 samples/s total (2 ranks)  comm wait 12%  ETA 0:01
class DataParallelConsole final : public TrainingObserver {
 public:
  DataParallelConsole(std::ostream& out, DataParallel& dp);
  void on_start(const StartInfo& info) override;
  void on_iteration(const IterationInfo& info) override;
  void on_test(const TestInfo& info) override { inner_.on_test(info); }
  void on_snapshot(const SnapshotInfo& info) override { inner_.on_snapshot(info); }
  void on_finish(const FinishInfo& info) override { inner_.on_finish(info); }

 private:
  std::ostream& out_;
  DataParallel& dp_;
  ConsolePrinter inner_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace strata::parallel
