#include "parallel/data_parallel/gradient_slots.h"

#include <algorithm>
#include <map>

#include "parallel/data_parallel/shard_layout.h"

namespace strata::parallel {

namespace {

// Backward runs from the last layer down, so "after layer a" comes later
// than "after layer c" when a < c; -1 (after the whole pass) is latest.
int later(int a, int c) { return a < 0 || c < 0 ? -1 : std::min(a, c); }

}  // namespace

int64_t GradientSlotPlan::total_numel() const {
  int64_t n = 0;
  for (int64_t s : slot_numel) n += s;
  return n;
}

std::vector<std::vector<int>> bucket_layers(const Net& net, const std::vector<GradBucket>& buckets) {
  std::map<const Blob*, size_t> bucket_of_blob;
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (int id : buckets[b].params) bucket_of_blob[net.params()[static_cast<size_t>(id)].blob.get()] = b;
  }
  std::vector<std::vector<int>> layers(buckets.size());
  for (int i = 0; i < net.num_layers(); ++i) {
    for (const LayerParam& p : net.layer(i).params()) {
      auto it = bucket_of_blob.find(p.blob.get());
      if (it == bucket_of_blob.end()) continue;
      std::vector<int>& mine = layers[it->second];
      if (mine.empty() || mine.back() != i) mine.push_back(i);
    }
  }
  return layers;
}

GradientSlotPlan plan_gradient_slots(const std::vector<GradBucket>& buckets,
                                     const std::vector<std::vector<int>>& writers,
                                     const std::vector<NetParam>& params, int world, bool reuse) {
  const size_t n = buckets.size();
  GradientSlotPlan plan;
  plan.reuse = reuse;
  plan.opened_at.assign(n, -1);
  plan.launched_after.assign(n, -1);
  for (size_t b = 0; b < n; ++b) {
    for (int layer : writers[b]) plan.opened_at[b] = std::max(plan.opened_at[b], layer);
    // Final after the last backward writing each of its parameters (the
    // lowest layer); a parameter no backward reaches makes it wait for the end.
    int ready = -2;
    for (int id : buckets[b].params) {
      const int last = params[static_cast<size_t>(id)].last_backward_layer;
      ready = ready == -2 ? last : later(ready, last);
    }
    if (ready == -2) ready = -1;
    plan.launched_after[b] = b == 0 ? ready : later(plan.launched_after[b - 1], ready);
  }
  // Bucket b may take the slot of bucket b - k when b - k has been launched
  // before b is first written (or b is bound only at its own launch, after
  // b - k's); then b waits at most for that reduce-scatter to arrive.
  auto fits = [&](size_t k) {
    for (size_t b = k; b < n; ++b) {
      const int opened = plan.opened_at[b];
      if (opened >= 0 && !(plan.launched_after[b - k] > opened)) return false;
    }
    return true;
  };
  size_t k = reuse ? std::min<size_t>(2, n) : n;
  while (k < n && !fits(k)) ++k;
  plan.slot_of.assign(n, 0);
  plan.slot_numel.assign(k, 0);
  for (size_t b = 0; b < n; ++b) {
    const size_t s = b % k;
    plan.slot_of[b] = static_cast<int>(s);
    plan.slot_numel[s] = std::max(plan.slot_numel[s], world * shard_block(buckets[b].numel, world));
  }
  return plan;
}

GradientSlotPlan plan_gradient_slots(const Net& net, const std::vector<GradBucket>& buckets, int world, bool reuse) {
  return plan_gradient_slots(buckets, bucket_layers(net, buckets), net.params(), world, reuse);
}

}  // namespace strata::parallel
