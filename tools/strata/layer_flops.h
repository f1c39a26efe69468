// Floating-point operations of each layer of a net built here, for
// `strata estimate --device-throughput`, which splits a published step time
// over the layers by them (parallel/estimate/profile_scale.h).
#pragma once

#include "framework/net.h"
#include "parallel/estimate/step_profile.h"

namespace strata::cli {

// Sets flops and backward_flops of every layer of `profile` (built from
// `net` by step_profile, same layer order). Forward, per step: what the layer
// declares (Layer::forward_cost: 2 · weights · output positions for the
// layers whose schema says LayerWork::kWeights, with Deconvolution's and
// MultiHeadAttention's own additions; one per output element for the
// others, which are memory-bound: their FLOPs understate their time on a
// GPU, see profile_scale.h). Backward: twice the forward where the layer
// runs a backward (input and weight gradients), else 0.
void add_layer_flops(const Net& net, estimate::StepProfile* profile);

}  // namespace strata::cli
