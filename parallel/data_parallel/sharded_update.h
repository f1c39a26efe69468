// Sharded data parallel (ZeRO stages 1 to 3): the gradient exchange and the
// update of a DataParallel run with shard OPTIMIZER, GRADIENTS or PARAMETERS.
//
// Slicing (shard_layout.h): rank r owns slice r of every gradient bucket; it
// keeps the optimizer state of those elements only and updates only them.
// Every updated parameter is in a bucket (those no backward reaches in a last
// one), so the sliced update equals the whole one element for element.
//
// One step:
//   backward       bucket b final: its gradients into a wire buffer of world x block
//                  values, reduce_scatter_async (average; with FP16/BF16 scaled by
//                  1 / world first and summed, as plain data parallel does)
//   before_update  wait for every bucket; this rank's slice -> f32 slice gradients
//   check          scale them (1 / iter_size, loss scale); one allgather of every
//                  rank's (sum of squares, finite): every rank sees the global norm
//                  and the same verdict
//   update         clip with the global norm; the optimizer on this rank's slices;
//                  allgather of the updated slices (f32) into every rank's weights
// reduce-scatter + allgather move the bytes of one ring allreduce (the
// allgather carries f32 weights also when gradients travel compressed).
//
// Stage 3 (PARAMETERS) works as stage 2, and the slices are all a rank keeps
// of the weights: no allgather after the update; instead each bucket's whole
// weights are gathered before its layers run and let go after
// (weight_gathering.h).
//
// Memory each rank holds (memory_of): the weights (whole; stage 3: the
// slices, plus the buckets gathered while their layers run); gradients: the net's own per-parameter gradients (whole: the
// engine accumulates backward into them); reduce buffers: the slice's
// gradients and weights as the optimizer sees them (2 / world; copies, as a
// Tensor cannot view part of another), and the wire buffers with their
// reduced blocks: stage 1 one per bucket (the whole gradient, like plain data
// parallel), stage 2 two, used in turn (bucket b reuses bucket b-2's once that
// reduce-scatter has arrived); the optimizer state of the slice only.
//
// Snapshots stay single files that load on any layout: gather_history puts
// the whole optimizer state (every rank's slices) into rank 0's snapshot, and
// the constructor takes its slices from the Solver's optimizer (restored
// from any snapshot, sharded or not, before the DataParallel is built), then
// releases the Solver optimizer's whole-size history.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/io/checkpoint.h"
#include "framework/solver/optimizer.h"
#include "framework/solver/solver.h"
#include "framework/tensor.h"
#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/data_parallel/grad_buckets.h"
#include "parallel/data_parallel/shard_layout.h"

namespace strata::parallel {

class WeightGathering;  // weight_gathering.h

// Bytes one rank holds, by kind.
struct ShardMemory {
  size_t parameters = 0;
  size_t net_gradients = 0;    // the net's gradients (whole: backward accumulates into the net's flat buffer)
  size_t reduce_buffers = 0;   // wire buffers and slice gradients
  size_t optimizer_state = 0;
  // PARAMETERS: the most whole weights gathered at once while layers run.
  size_t gathered = 0;
};

// Bytes of the buckets whole at once, at most, when bucket b is whole from
// layer first_layer[b] to last_layer[b] (f32 values).
size_t most_whole_at_once(const std::vector<GradBucket>& buckets, const std::vector<int>& first_layer,
                          const std::vector<int>& last_layer);

// What rank `rank` holds with `stage` (kNone: plain data parallel's buffers
// and whole optimizer state), for the start line; every rank computes the same.
ShardMemory memory_of(ShardStage stage, const std::vector<GradBucket>& buckets, const std::vector<NetParam>& params,
                      int rank, int world, GradCompression compression, int optimizer_slots);
// "parameters 1.2 MiB, gradients 1.2 MiB + 0.4 MiB buffers, optimizer state 0.8 MiB"
std::string memory_line(const ShardMemory& m);

class ShardedUpdate {
 public:
  // `buckets` come from assign_buckets(..., BucketReach::kAllUpdated) (one
  // merged bucket with overlap off); the wire buffers live on wire_device.
  ShardedUpdate(Solver& solver, Communicator& comm, const DataParallelConfig& config,
                const std::vector<GradBucket>& buckets, Device wire_device);
  ~ShardedUpdate();
  ShardedUpdate(const ShardedUpdate&) = delete;
  ShardedUpdate& operator=(const ShardedUpdate&) = delete;

  // Bucket b's gradients are final: into a wire buffer, reduce-scatter started.
  // Buckets are launched in index order, each once per step.
  void launch(size_t b);
  // Lets backends that progress only inside their calls (mpi) move bucket b's reduce-scatter on.
  void poke(size_t b) {
    if (works_[b]) works_[b]->is_done();
  }
  // Waits for every bucket's reduce-scatter (all launched) and decodes this rank's slices.
  void finish_gradients();
  // TrainingStrategy::scale_check_gradients, over every rank.
  bool scale_check(float factor);
  // Clips, updates this rank's slices and allgathers the weights; returns the rate used.
  double update();
  // At a snapshot point, on every rank: rank 0's state gets the whole history.
  void gather_history(SolverState& state);

  // Seconds spent in the check's and the weights' allgathers since the previous call.
  double take_comm_seconds() {
    const double s = comm_seconds_;
    comm_seconds_ = 0.0;
    return s;
  }

  const std::vector<BucketShard>& shards() const { return shards_; }
  // PARAMETERS: who gathers and releases the net's whole weights; nullptr otherwise.
  WeightGathering* gathering() { return gathering_.get(); }
  const WeightGathering* gathering() const { return gathering_.get(); }
  // This rank's pieces as parameters (the optimizer's view; tests look at them).
  const std::vector<NetParam>& pieces() const { return pieces_; }

 private:
  // Bucket b's slot, once the bucket that used it before has arrived.
  Tensor& wire_buffer(size_t b);
  // Waits for bucket b's reduce-scatter and decodes this rank's slice into pieces_.
  void complete(size_t b);
  // f32 buffers of one block and of world blocks for bucket b's weights or
  // history: the slot's own when gradients travel in f32, else block_, gathered_.
  Tensor& f32_block(size_t b);
  Tensor& f32_gathered(size_t b);
  void allgather_small(const Tensor& in, Tensor& out);

  Solver& solver_;
  Communicator& comm_;
  DataParallelConfig config_;
  std::vector<GradBucket> buckets_;
  Device wire_device_;
  std::vector<BucketShard> shards_;
  std::vector<size_t> first_piece_;           // per bucket: its first entry in pieces_
  std::vector<NetParam> pieces_;              // this rank's slices, each a parameter of its own
  std::unique_ptr<Optimizer> optimizer_;      // history of pieces_ only
  // Slots, used in turn (stage 1: one per bucket; stage 2: two): a bucket's
  // gradients on the wire (world blocks), then this rank's reduced block;
  // after the reduce-scatter, with f32 gradients, the weights' allgather.
  std::vector<Tensor> wire_;
  std::vector<Tensor> received_;
  std::vector<std::unique_ptr<CommWork>> works_;  // per bucket, while in flight
  Tensor staging_;                            // host f32 scratch (compression)
  Tensor block_;                              // compression only: f32, one block (this rank's slice going out)
  Tensor gathered_;                           // compression only: f32, world blocks (a bucket's weights coming in)
  std::unique_ptr<WeightGathering> gathering_;  // PARAMETERS only
  double sum_squares_ = 0.0;                  // of the scaled slice gradients, over every rank
  double comm_seconds_ = 0.0;
};

}  // namespace strata::parallel
