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

// Seconds of collectives one split layer costs per step over `ranks` ranks.
double tensor_parallel_layer_seconds(const LayerProfile& layer, int ranks, const Link& link);

StepEstimate tensor_parallel_step(const StepProfile& profile, int ranks, const Link& link);

// True if some layer has a split key (otherwise tensor parallel replicates the whole net).
bool has_split_layers(const StepProfile& profile);

}  // namespace strata::estimate
