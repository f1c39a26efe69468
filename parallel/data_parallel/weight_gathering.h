// Sharded data parallel's PARAMETERS stage (ZeRO stage 3): between uses,
// every rank keeps only its slice of each bucket's weights (the optimizer's
// pieces, sharded_update.h); a bucket's whole weights are allgathered into
// the net just before the first layer that reads them runs, and let go after
// the last one has, in forward and again in backward (Net::LayerPassHooks).
//
// A layer's parameters may lie in two buckets (a weight and its bias); a
// bucket's layers are contiguous (buckets follow backward's order). So in
// forward a bucket is gathered at the first of its layers and released
// after the last; in backward the other way round. A recompute's forward
// inside backward gathers again what it needs. Gathers are collectives:
// every rank runs the same passes in the same order, so the ranks agree on
// each bucket's state without a word.
//
// In place: a bucket's slices are allgathered straight into a new tensor of
// world x block values, and the bucket's weights become views of it; when
// they are let go the tensor goes with them. Nothing is kept between
// gathers and nothing is copied (with a wire on another device, a GPU over
// tcp, the gather lands in one host buffer and is copied to the device).
//
// Prefetch: when a layer's buckets are gathered, the allgather of the next
// bucket the pass will need is started (allgather_async) into its own new
// tensor, so it travels while the layers before it compute; its weights
// become views of it when its first layer asks for them (or another gather
// comes first). One gather ahead at most.
//
// A released weight keeps its shape (reshape and the memory report read
// it); its storage is deferred (framework/memory_plan.h) until the next
// gather gives it views. Snapshots, tests and the end of training gather
// everything (gather_all); an update releases everything, the slices being new.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "framework/communicator.h"
#include "framework/net.h"
#include "framework/tensor.h"
#include "parallel/data_parallel/grad_buckets.h"
#include "parallel/data_parallel/shard_layout.h"

namespace strata::parallel {

class WeightGathering {
 public:
  // `slices[b]` (this rank's block of bucket b's weights, on wire_device)
  // hold the weights from now on; they must outlive this. Releases every
  // bucket's whole weights.
  WeightGathering(Net& net, Communicator& comm, const std::vector<GradBucket>& buckets,
                  const std::vector<BucketShard>& shards, const std::vector<Tensor>& slices, Device wire_device);
  // The weights stay as they are.
  ~WeightGathering();
  WeightGathering(const WeightGathering&) = delete;
  WeightGathering& operator=(const WeightGathering&) = delete;

  // What the net's pass hooks do (ShardedUpdate installs them, beside the
  // gradient slots'): gather a layer's buckets before it runs (and start
  // the next one's), let them go after their last layer in the pass.
  void before_forward(int layer) { before_layer(layer, Pass::kForward); }
  void before_backward(int layer) { before_layer(layer, Pass::kBackward); }
  void after_forward(int layer);
  void after_backward(int layer);

  // Bucket b's whole weights into the net (nothing when they are there).
  void gather(size_t b);
  // Lets bucket b's whole weights go (nothing when they are gone).
  void release(size_t b);
  void gather_all();
  void release_all();
  bool gathered(size_t b) const { return state_[b] == State::kWhole; }
  // The bucket whose gather is in flight (prefetched), or -1.
  int bucket_ahead() const { return ahead_work_ ? static_cast<int>(ahead_bucket_) : -1; }

 private:
  enum class State { kReleased, kInFlight, kWhole };
  enum class Pass { kForward, kBackward };

  void before_layer(int layer, Pass pass);
  // Where bucket b's gather lands: a new tensor of world blocks on the net's
  // device (in place), or the host staging buffer.
  Tensor landing(size_t b);
  // The gathered bucket into the net: its weights become views of `all`
  // (in place) or copies of it.
  void land(size_t b, const Tensor& all);
  // Starts the allgather of the next bucket `pass` needs after layer `layer`, if any and none is in flight.
  void prefetch_after(int layer, Pass pass);
  // Waits for the gather in flight, if any; with `keep`, its weights go into the net.
  void finish_prefetch(bool keep);

  Net& net_;
  Communicator& comm_;
  const std::vector<GradBucket>& buckets_;
  const std::vector<BucketShard>& shards_;
  const std::vector<Tensor>& slices_;
  bool in_place_;  // the wire's device is the net's
  std::vector<std::vector<size_t>> layer_buckets_;  // per layer: the buckets holding its parameters
  std::vector<int> first_layer_, last_layer_;       // per bucket: the lowest and highest layer reading it
  std::vector<State> state_;                        // per bucket
  Tensor staging_;                                  // not in place: every gather lands here
  Tensor ahead_;                                    // where the gather in flight lands
  size_t ahead_bucket_ = 0;                         // the bucket in flight, when one is
  std::unique_ptr<CommWork> ahead_work_;
};

}  // namespace strata::parallel
