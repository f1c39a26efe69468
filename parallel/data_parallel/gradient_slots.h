// Where sharded data parallel keeps the net's gradients (sharded_update.h).
//
// The net's own flat buffer holds every gradient for the whole step. Under
// shard GRADIENTS and PARAMETERS a rank needs a bucket's whole gradient only
// from the first backward that writes it until its reduce-scatter has read
// it; after that only its slice (the reduced block) is kept. So the net
// hands the updated parameters' gradients over (Net::hand_over_gradients)
// and they live in a few slots, each laid out as the reduce-scatter reads a
// bucket (world x block values: the bucket's gradients one after another,
// zero padding after), used in turn:
//
//   backward reaches a layer writing bucket b   the slot's previous bucket must have
//                                               arrived; the slot is zeroed and b's
//                                               parameters' diffs become views of it
//   b final                                     reduce-scatter straight from the slot
//
// How many slots: the fewest K >= 2 with which bucket b - K has been
// launched before backward first writes bucket b, for every b (from the
// layers that hold each bucket's parameters and the order buckets are
// launched in: plan_gradient_slots). A rank then holds K buckets of whole
// gradients instead of all of them, the reduced slices besides.
//
// Without reuse (shard OPTIMIZER, which keeps whole gradients by design, and
// iter_size > 1, where gradients accumulate over passes before any leaves)
// every bucket has a slot of its own, bound once: the reduce-scatter still
// reads the gradients where backward wrote them, with no wire buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/net.h"
#include "parallel/data_parallel/grad_buckets.h"

namespace strata::parallel {

struct GradientSlotPlan {
  std::vector<int> slot_of;         // per bucket: its slot
  std::vector<int64_t> slot_numel;  // per slot: world x the largest block of the buckets it serves
  // Per bucket: the layer whose backward writes it first (the highest
  // holding one of its parameters), or -1 when no backward does (it is
  // bound when it is launched).
  std::vector<int> opened_at;
  // Per bucket: the layer after whose backward it is launched (buckets go
  // in index order), or -1 for after the whole backward pass.
  std::vector<int> launched_after;
  bool reuse = false;
  int64_t total_numel() const;
};

// `reuse` false: one slot per bucket. `writers[b]`: the layers holding
// bucket b's parameters (a parameter shared by name sits in several).
GradientSlotPlan plan_gradient_slots(const std::vector<GradBucket>& buckets,
                                     const std::vector<std::vector<int>>& writers,
                                     const std::vector<NetParam>& params, int world, bool reuse);
// The same from a net: the writers from its layers' parameters.
GradientSlotPlan plan_gradient_slots(const Net& net, const std::vector<GradBucket>& buckets, int world, bool reuse);
// Per bucket, the layers holding its parameters, ascending.
std::vector<std::vector<int>> bucket_layers(const Net& net, const std::vector<GradBucket>& buckets);

}  // namespace strata::parallel
