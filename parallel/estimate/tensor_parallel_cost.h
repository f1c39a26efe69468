// Tensor parallel (Megatron-style, docs/config.md "Tensor parallel"): T
// workers split the layers marked `split`, each doing 1/T of their work,
// and the rest runs replicated. Each split layer adds blocking collectives
// over the T ranks (Shoeybi et al., "Megatron-LM", 2019, section 3):
//
//   COLUMN            backward: allreduce of the input gradient (bottom bytes)
//   ROW               forward:  allreduce of the partial outputs (top bytes)
//   HEADS             both of the above
//   OUTPUT_CHANNELS   forward: allgather of the top; backward: allreduce of the input gradient
//
//   step = sum over layers of (split ? (f + b) / T : f + b) + the collectives (ring, collectives_cost.h)
//
// One group processes one batch per step: strong scaling.
#pragma once

#include "parallel/estimate/link.h"
#include "parallel/estimate/step_estimate.h"

namespace strata::estimate {

// Seconds of collectives one split layer costs per step over `ranks` ranks,
// in its forward and in its backward.
struct TensorParallelCollectives {
  double forward = 0.0;
  double backward = 0.0;
  double total() const { return forward + backward; }
};
TensorParallelCollectives tensor_parallel_layer_collectives(const LayerProfile& layer, int ranks, const Link& link);
double tensor_parallel_layer_seconds(const LayerProfile& layer, int ranks, const Link& link);

// The step as one rank of a group of `ranks` sees it: a split layer's
// forward and backward take 1/T of their time plus their collectives, it
// holds 1/T of its parameters and gradients, and a COLUMN layer 1/T of its
// outputs (the rank's slice; the other splits end with whole outputs).
// The bias a ROW or HEADS layer keeps whole is counted split too (it is small).
StepProfile tensor_parallel_rank_profile(const StepProfile& profile, int ranks, const Link& link);

StepEstimate tensor_parallel_step(const StepProfile& profile, int ranks, const Link& link);

// True if some layer has a split key (otherwise tensor parallel replicates the whole net).
bool has_split_layers(const StepProfile& profile);

}  // namespace strata::estimate
