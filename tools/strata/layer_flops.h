// Floating-point operations of each layer of a net built here, for
// `strata estimate --device-throughput`, which splits a published step time
// over the layers by them (parallel/estimate/profile_scale.h).
#pragma once

#include "framework/net.h"
#include "parallel/estimate/step_profile.h"

namespace strata::cli {

// Sets flops and backward_flops of every layer of `profile` (built from
// `net` by step_profile, same layer order). Forward, per step:
//   Convolution, InnerProduct, PatchEmbed:  2 · weights · rows, rows the
//       output positions (N·H·W of an NCHW top, N·T of an [N, T, D] top);
//   Deconvolution: the same with the input's positions;
//   MultiHeadAttention: its projections as above plus 4 · N · T² · D for
//       the scores and their weighted sum;
//   any other layer: one per output element (they are memory-bound; their
//       FLOPs understate their time on a GPU, see profile_scale.h).
// Backward: twice the forward where the layer runs a backward (input and
// weight gradients), else 0.
void add_layer_flops(const Net& net, estimate::StepProfile* profile);

}  // namespace strata::cli
