// Sharded data parallel (ZeRO stages 1 to 3): the gradient exchange and the
// update of a DataParallel run with shard OPTIMIZER, GRADIENTS or PARAMETERS.
//
// Slicing (shard_layout.h): rank r owns slice r of every gradient bucket; it
// keeps the optimizer state of those elements only and updates only them.
// Every updated parameter is in a bucket (those no backward reaches in a last
// one), so the sliced update equals the whole one element for element.
//
// Where things live: the net hands its gradients over to gradient slots
// (gradient_slots.h), each laid out as a reduce-scatter reads a bucket;
// with GRADIENTS and PARAMETERS a few slots are used in turn, with OPTIMIZER
// (and with iter_size > 1) every bucket has its own. This rank's slice of
// each bucket is one tensor of averaged gradients (`block` values); the
// optimizer's pieces (one per parameter run in the slice) are views of it
// and of the weights: the net's own with OPTIMIZER and GRADIENTS (updated
// where they are), the slice's block with PARAMETERS.
//
// One step:
//   backward       a layer about to write bucket b: b's slot is free (its previous
//                  bucket's reduce-scatter has arrived), zeroed, bound as b's diffs
//                  bucket b final: reduce_scatter_async (average) from the slot into
//                  b's slice gradients; with FP16/BF16 on the wire, or a wire on
//                  another device (a GPU over tcp), through a wire buffer instead
//                  (scaled by 1 / world first and summed, as plain data parallel does)
//   before_update  wait for every bucket
//   check          scale the slices (1 / iter_size, loss scale); one allgather of every
//                  rank's (sum of squares, finite): every rank sees the global norm
//                  and the same verdict
//   update         clip with the global norm; the optimizer on this rank's slices;
//                  the updated slice packed into its (spent) gradient block and
//                  allgathered (f32) through the free gradient slot into every
//                  rank's weights
// reduce-scatter + allgather move the bytes of one ring allreduce (the
// allgather carries f32 weights also when gradients travel compressed).
//
// Stage 3 (PARAMETERS) works as stage 2, and the slices are all a rank keeps
// of the weights: no allgather after the update; instead each bucket's whole
// weights are gathered before its layers run and let go after
// (weight_gathering.h).
//
// Memory each rank holds (memory_of): the weights (whole; stage 3: the
// slices, plus the buckets gathered while their layers run); gradients: the
// slots; reduce buffers: the slices' gradients (and their weights where the
// pieces cannot view the net's: a wire on another device), wire buffers
// only where the reduce-scatter cannot read the slots, and stage 3's gather
// buffers; the optimizer state of the slice only.
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
#include "parallel/data_parallel/gradient_slots.h"
#include "parallel/data_parallel/shard_layout.h"

namespace strata::parallel {

class WeightGathering;  // weight_gathering.h

// Bytes one rank holds, by kind.
struct ShardMemory {
  size_t parameters = 0;
  size_t net_gradients = 0;    // the net's gradients: whole (NONE), or the gradient slots
  size_t reduce_buffers = 0;   // the slices' gradients and weights, wire buffers, gather buffers
  size_t optimizer_state = 0;
  // PARAMETERS: the most whole weights gathered at once while layers run.
  size_t gathered = 0;
};

// How a run lays its buffers out (the same on every rank).
struct ShardBuffers {
  GradCompression compression = GradCompression::kNone;
  // The collectives read and write the net's gradients themselves (f32, the
  // wire on the net's device); else through wire buffers.
  bool in_place = true;
  // The wire's device is the net's: with OPTIMIZER and GRADIENTS the
  // optimizer updates this rank's slice inside the net's weights (its pieces
  // are views of them), with no copy of the slice's weights.
  bool same_device = true;
  GradientSlotPlan slots;  // where the gradients live (the stages; unused with NONE)
};

// PARAMETERS' whole weights at once, at most, while layers run, when bucket
// b is whole from layer first_layer[b] to last_layer[b]. With `world` > 0
// (gathered in place) each bucket as world blocks, and at each layer the
// largest of the other buckets besides, for the one prefetched; with 0 the
// buckets' f32 values alone.
size_t gathered_bytes(const std::vector<GradBucket>& buckets, const std::vector<int>& first_layer,
                      const std::vector<int>& last_layer, int world);

// What rank `rank` holds with `stage` (kNone: plain data parallel's
// gradients, wire buffers and whole optimizer state), for the start line;
// every rank computes the same.
ShardMemory memory_of(ShardStage stage, const std::vector<GradBucket>& buckets, const std::vector<NetParam>& params,
                      int rank, int world, const ShardBuffers& how, int optimizer_slots);
// "parameters 1.2 MiB, gradients 1.2 MiB + 0.4 MiB reduce buffers, optimizer state 0.8 MiB"
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

  // Bucket b's gradients are final: reduce-scatter started (from its slot,
  // or through a wire buffer). Buckets are launched in index order, each once per step.
  void launch(size_t b);
  // Lets backends that progress only inside their calls (mpi) move bucket b's reduce-scatter on.
  void poke(size_t b) {
    if (works_[b]) works_[b]->is_done();
  }
  // Before the step's passes: slots that keep their bucket (no reuse) are zeroed.
  void before_step();
  // Waits for every bucket's reduce-scatter (all launched); this rank's slices hold the averages.
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
  const ShardBuffers& buffers() const { return how_; }
  // What rank `rank` holds (memory_of with this run's layout).
  ShardMemory memory(int rank) const;
  // The net's gradients as laid out now: bytes of the slots.
  size_t slot_bytes() const;
  // Other nets running the solver's layers on its parameters (a pipeline's
  // copies): they get the same pass hooks (DataParallel::add_stage_nets).
  void add_nets(const std::vector<Net*>& nets);
  // PARAMETERS: who gathers and releases the net's whole weights; nullptr otherwise.
  WeightGathering* gathering() { return gathering_.get(); }
  const WeightGathering* gathering() const { return gathering_.get(); }
  // This rank's pieces as parameters (the optimizer's view; tests look at them).
  const std::vector<NetParam>& pieces() const { return pieces_; }

 private:
  // A bucket through a step: not bound to its slot yet, bound (backward
  // writes it), reduce-scatter launched, arrived.
  enum class BucketState { kIdle, kFilling, kLaunched, kArrived };

  // Binds bucket b's gradients to its slot, zeroed, once the slot's previous
  // bucket has arrived.
  void open(size_t b);
  // Bucket b's slot as the reduce-scatter reads it (world x block values).
  Tensor slot_view(size_t b) const;
  // Bucket b's wire buffer (not in place), once the bucket that used it before has arrived.
  Tensor& wire_buffer(size_t b);
  // Waits for bucket b's reduce-scatter; with compression decodes this rank's block.
  void complete(size_t b);
  // f32 buffers of world blocks for bucket b's weights: the gradient slot
  // (free after the reduce-scatter) in place, else the wire buffer or gathered_.
  Tensor f32_gathered(size_t b);
  // This rank's updated weights of bucket b as one block, for the allgather.
  const Tensor& slice_block(size_t b);
  void allgather_small(const Tensor& in, Tensor& out);
  void install_hooks();

  Solver& solver_;
  Communicator& comm_;
  DataParallelConfig config_;
  std::vector<GradBucket> buckets_;
  Device wire_device_;
  ShardBuffers how_;
  std::vector<BucketShard> shards_;
  std::vector<size_t> first_piece_;           // per bucket: its first entry in pieces_
  std::vector<NetParam> pieces_;              // this rank's slices, each a parameter of its own
  std::vector<Tensor> slice_grads_;           // per bucket: this rank's block of averaged gradients
  // Per bucket: this rank's block of weights where the pieces cannot view
  // the net's (PARAMETERS, whose slices are all a rank keeps; a wire on
  // another device); else empty.
  std::vector<Tensor> slice_weights_;
  bool own_weights_ = false;                  // slice_weights_ are the pieces' weights
  std::unique_ptr<Optimizer> optimizer_;      // history of pieces_ only
  std::vector<Tensor> slots_;                 // the net's gradients (gradient_slots.h), on the net's device
  std::vector<int> occupant_;                 // per slot: the bucket bound to it, or -1
  std::vector<BucketState> state_;            // per bucket
  std::vector<std::vector<size_t>> layer_buckets_;  // per layer: the buckets whose gradients it writes
  // Not in place only: wire buffers in slots used in turn (stage 1: one per
  // bucket; stages 2 and 3: two), with compression the reduced blocks.
  std::vector<Tensor> wire_;
  std::vector<Tensor> received_;
  std::vector<std::unique_ptr<CommWork>> works_;  // per bucket, while in flight
  Tensor staging_;                            // host f32 scratch (compression)
  Tensor gathered_;                           // compression only: f32, world blocks (a bucket's weights coming in)
  std::unique_ptr<WeightGathering> gathering_;  // PARAMETERS only
  std::vector<Net*> hooked_;                  // the nets whose pass hooks are ours: the solver's first
  double sum_squares_ = 0.0;                  // of the scaled slice gradients, over every rank
  double comm_seconds_ = 0.0;
};

}  // namespace strata::parallel
