#include "parallel/data_parallel/weight_gathering.h"

#include <algorithm>
#include <map>

#include "framework/error.h"
#include "framework/memory_plan.h"
#include "framework/timeline.h"
#include "parallel/data_parallel/sharded_update.h"

namespace strata::parallel {

WeightGathering::WeightGathering(Net& net, Communicator& comm, const std::vector<GradBucket>& buckets,
                                 const std::vector<BucketShard>& shards, const std::vector<NetParam>& pieces,
                                 const std::vector<size_t>& first_piece, Device wire_device)
    : net_(net), comm_(comm), buckets_(buckets), shards_(shards), pieces_(pieces), first_piece_(first_piece) {
  // Which layers read each bucket: every layer holding one of its parameters
  // (a parameter shared by name sits in several layers).
  std::map<const Blob*, size_t> bucket_of_blob;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (int id : buckets_[b].params) bucket_of_blob[net_.params()[static_cast<size_t>(id)].blob.get()] = b;
  }
  layer_buckets_.resize(static_cast<size_t>(net_.num_layers()));
  first_layer_.assign(buckets_.size(), -1);
  last_layer_.assign(buckets_.size(), -1);
  for (int i = 0; i < net_.num_layers(); ++i) {
    for (const LayerParam& p : net_.layer(i).params()) {
      auto it = bucket_of_blob.find(p.blob.get());
      if (it == bucket_of_blob.end()) continue;
      const size_t b = it->second;
      std::vector<size_t>& mine = layer_buckets_[static_cast<size_t>(i)];
      if (std::find(mine.begin(), mine.end(), b) == mine.end()) mine.push_back(b);
      if (first_layer_[b] < 0) first_layer_[b] = i;
      last_layer_[b] = i;
    }
  }
  int64_t largest = 0;
  for (const BucketShard& s : shards_) largest = std::max(largest, s.block);
  block_ = Tensor({largest}, DType::kF32, wire_device);
  all_ = Tensor({largest * comm_.world_size()}, DType::kF32, wire_device);
  gathered_.assign(buckets_.size(), 1);  // the net holds every whole weight now
  release_all();

  Net::LayerPassHooks hooks;
  auto gather_layer = [this](int i) {
    for (size_t b : layer_buckets_[static_cast<size_t>(i)]) gather(b);
  };
  hooks.before_forward = gather_layer;
  hooks.before_backward = gather_layer;
  hooks.after_forward = [this](int i) {
    for (size_t b : layer_buckets_[static_cast<size_t>(i)]) {
      if (last_layer_[b] == i) release(b);
    }
  };
  hooks.after_backward = [this](int i) {
    for (size_t b : layer_buckets_[static_cast<size_t>(i)]) {
      if (first_layer_[b] == i) release(b);
    }
  };
  net_.set_layer_pass_hooks(std::move(hooks));
}

WeightGathering::~WeightGathering() { net_.set_layer_pass_hooks({}); }

void WeightGathering::gather(size_t b) {
  if (gathered_[b]) return;
  const TimelineScope event("allgather", Timeline::on() ? "gather weights, bucket " + std::to_string(b) : "");
  const BucketShard& shard = shards_[b];
  block_.resize({shard.block});  // within capacity: no allocation
  all_.resize({shard.block * comm_.world_size()});
  for (size_t i = first_piece_[b]; i < first_piece_[b + 1]; ++i) {
    const ShardPiece& piece = shard.pieces[i - first_piece_[b]];
    copy_elements(block_, piece.slice_offset, pieces_[i].blob->data, 0, piece.count);
  }
  comm_.allgather(block_, all_);
  const GradBucket& bucket = buckets_[b];
  std::vector<NetParam>& params = net_.params();
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    Tensor& w = params[static_cast<size_t>(bucket.params[k])].blob->data;
    copy_elements(w, 0, all_, bucket.offsets[k], w.numel());
  }
  gathered_[b] = 1;
}

void WeightGathering::release(size_t b) {
  if (!gathered_[b]) return;
  // New tensors of the same shapes, sized under a plan: no storage until the next gather writes them.
  MemoryPlan deferred;
  for (int id : buckets_[b].params) {
    Tensor& w = net_.params()[static_cast<size_t>(id)].blob->data;
    w = Tensor(w.shape(), w.dtype(), w.device());
  }
  gathered_[b] = 0;
}

void WeightGathering::gather_all() {
  for (size_t b = 0; b < buckets_.size(); ++b) gather(b);
}

void WeightGathering::release_all() {
  for (size_t b = 0; b < buckets_.size(); ++b) release(b);
}

size_t WeightGathering::peak_gathered_bytes() const {
  return most_whole_at_once(buckets_, first_layer_, last_layer_);
}

}  // namespace strata::parallel
