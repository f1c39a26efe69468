// Synchronous data parallel (parallel/data_parallel/): every worker runs
// the whole net on its own batch, then the gradients are averaged with an
// allreduce. Weak scaling: the per-worker batch stays, so n workers process
// n batches per step.
//
// With overlap the gradients travel in buckets while backward still runs,
// as parallel/data_parallel/data_parallel.cpp does (assign_buckets):
//
//   backward:  |-- layer n-1 --|-- layer n-2 --|-- ... --|-- layer 0 --|
//   buckets:                  ready(b0)                ready(b1)
//   wire:                     |== allreduce b0 ==|     |== b1 ==|
//
// A layer's gradients are final after its backward, so backward order is
// readiness order; buckets are filled in that order up to bucket_bytes (a
// layer larger than a bucket gets one of its own), and the wire takes them
// one at a time, in order:
//
//   start(k) = max(ready(k), end(k-1)),  end(k) = start(k) + allreduce(n, bytes(k))
//   step     = forward + max(backward, end(last))
//
// Without overlap: step = forward + backward + allreduce(n, all gradient bytes),
// the single allreduce the no-overlap mode issues. Not modelled: the optimizer
// update (the same on every worker count), compute slowed by a communication
// thread sharing the cores, and stragglers.
#pragma once

#include <vector>

#include "parallel/data_parallel/data_parallel_config.h"
#include "parallel/estimate/collectives_cost.h"
#include "parallel/estimate/hierarchical_cost.h"
#include "parallel/estimate/step_estimate.h"

namespace strata::estimate {

struct GradientBucket {
  double bytes = 0.0;
  double ready = 0.0;  // seconds after backward starts when its last gradient is final
};

// The buckets in launch order. Granularity is the layer (the training code
// chunks by parameter: a layer's weight and bias may land in two buckets).
std::vector<GradientBucket> gradient_buckets(const StepProfile& profile, double bucket_bytes);

struct DataParallelOptions {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  parallel::Overlap overlap = parallel::Overlap::kOn;
  double bucket_bytes = 25.0 * (1 << 20);  // DataParallelConfig's default, 25 MiB
  double wire_bytes_per_gradient_byte = 1.0;  // 0.5 with FP16/BF16 compression
  NodeTopology nodes;  // servers of several devices (hierarchical_cost.h); none by default
  // Sharded data parallel: buckets are reduce-scattered (ring), not
  // allreduced; the weights' allgathers are the caller's (grid_cost.h).
  bool reduce_scatter = false;
};

StepEstimate data_parallel_step(const StepProfile& profile, int workers, const Link& link,
                                const DataParallelOptions& options);

}  // namespace strata::estimate
