#include "parallel/data_parallel/weight_gathering.h"

#include <algorithm>

#include "framework/error.h"
#include "framework/memory_plan.h"
#include "framework/timeline.h"
#include "parallel/data_parallel/gradient_slots.h"
#include "parallel/data_parallel/sharded_update.h"

namespace strata::parallel {

WeightGathering::WeightGathering(Net& net, Communicator& comm, const std::vector<GradBucket>& buckets,
                                 const std::vector<BucketShard>& shards, const std::vector<Tensor>& slices,
                                 Device wire_device)
    : net_(net), comm_(comm), buckets_(buckets), shards_(shards), slices_(slices),
      in_place_(wire_device == net.device()) {
  // Which layers read each bucket: every layer holding one of its parameters
  // (a parameter shared by name sits in several).
  layer_buckets_.resize(static_cast<size_t>(net_.num_layers()));
  first_layer_.assign(buckets_.size(), -1);
  last_layer_.assign(buckets_.size(), -1);
  const std::vector<std::vector<int>> layers = bucket_layers(net_, buckets_);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (layers[b].empty()) continue;
    first_layer_[b] = layers[b].front();
    last_layer_[b] = layers[b].back();
    for (int i : layers[b]) layer_buckets_[static_cast<size_t>(i)].push_back(b);
  }
  if (!in_place_) {  // a wire on another device: one landing buffer there, copied into the net's weights
    int64_t largest = 0;
    for (const BucketShard& s : shards_) largest = std::max(largest, s.block);
    staging_ = Tensor({largest * comm_.world_size()}, DType::kF32, wire_device);
  }
  state_.assign(buckets_.size(), State::kWhole);  // the net holds every whole weight now
  release_all();
}

void WeightGathering::after_forward(int layer) {
  for (size_t b : layer_buckets_[static_cast<size_t>(layer)]) {
    if (last_layer_[b] == layer) release(b);
  }
}

void WeightGathering::after_backward(int layer) {
  for (size_t b : layer_buckets_[static_cast<size_t>(layer)]) {
    if (first_layer_[b] == layer) release(b);
  }
}

WeightGathering::~WeightGathering() {
  // A gather in flight (after an error) finishes or fails inside its work's destructor.
  ahead_work_.reset();
}

void WeightGathering::before_layer(int layer, Pass pass) {
  for (size_t b : layer_buckets_[static_cast<size_t>(layer)]) gather(b);
  prefetch_after(layer, pass);
}

Tensor WeightGathering::landing(size_t b) {
  const int64_t n = shards_[b].block * comm_.world_size();
  if (!in_place_) {
    staging_.resize({n});  // within capacity: no allocation
    return staging_;
  }
  return Tensor({n}, DType::kF32, net_.device());  // becomes the weights' storage
}

void WeightGathering::land(size_t b, const Tensor& all) {
  const GradBucket& bucket = buckets_[b];
  std::vector<NetParam>& params = net_.params();
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    Tensor& w = params[static_cast<size_t>(bucket.params[k])].blob->data;
    if (in_place_) {
      w = all.view_bytes(static_cast<size_t>(bucket.offsets[k]) * sizeof(float), w.nbytes(), w.shape(), DType::kF32);
    } else {
      copy_elements(w, 0, all, bucket.offsets[k], w.numel());
    }
  }
  state_[b] = State::kWhole;
}

void WeightGathering::gather(size_t b) {
  if (state_[b] == State::kWhole) return;
  // The prefetched bucket (this one, or the next a layer spanning two needs
  // too) lands first: its buffers are the ones a gather uses.
  finish_prefetch(true);
  if (state_[b] == State::kWhole) return;
  const TimelineScope event("allgather", Timeline::on() ? "gather weights, bucket " + std::to_string(b) : "");
  Tensor all = landing(b);
  comm_.allgather(slices_[b], all);
  land(b, all);
}

void WeightGathering::prefetch_after(int layer, Pass pass) {
  if (ahead_work_) return;  // one gather ahead at most
  // The bucket the pass reaches next: in forward the one whose first layer
  // comes soonest after `layer`, in backward the one whose last layer does.
  int best = -1;
  size_t next = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (state_[b] != State::kReleased) continue;
    const int at = pass == Pass::kForward ? first_layer_[b] : last_layer_[b];
    const bool ahead = pass == Pass::kForward ? at > layer : (at >= 0 && at < layer);
    if (!ahead) continue;
    if (best < 0 || (pass == Pass::kForward ? at < best : at > best)) {
      best = at;
      next = b;
    }
  }
  if (best < 0) return;
  ahead_ = landing(next);
  ahead_work_ = comm_.allgather_async(slices_[next], ahead_);
  ahead_bucket_ = next;
  state_[next] = State::kInFlight;
}

void WeightGathering::finish_prefetch(bool keep) {
  if (!ahead_work_) return;
  {
    const TimelineScope event("allgather", Timeline::on() ? "wait weights, bucket " + std::to_string(ahead_bucket_) : "");
    ahead_work_->wait();
  }
  ahead_work_.reset();
  if (keep) {
    land(ahead_bucket_, ahead_);
  } else {
    state_[ahead_bucket_] = State::kReleased;
  }
  ahead_ = Tensor();  // the weights' views keep what they need of it
}

void WeightGathering::release(size_t b) {
  if (state_[b] == State::kInFlight) finish_prefetch(false);  // a collective: it runs to its end on every rank
  if (state_[b] != State::kWhole) return;
  // New tensors of the same shapes, sized under a plan: no storage until the next gather writes them.
  MemoryPlan deferred;
  for (int id : buckets_[b].params) {
    Tensor& w = net_.params()[static_cast<size_t>(id)].blob->data;
    w = Tensor(w.shape(), w.dtype(), w.device());
  }
  state_[b] = State::kReleased;
}

void WeightGathering::gather_all() {
  for (size_t b = 0; b < buckets_.size(); ++b) gather(b);
}

void WeightGathering::release_all() {
  finish_prefetch(false);
  for (size_t b = 0; b < buckets_.size(); ++b) release(b);
}


}  // namespace strata::parallel
