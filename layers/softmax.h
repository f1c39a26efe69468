// Softmax (Caffe "Softmax") along softmax_param.axis (default 1; negative
// counts from the end). Max-subtracted, so huge logits stay finite.
// May run in place.
#pragma once

#include "framework/layer.h"

namespace strata {

// The view of a tensor as [outer, channels, inner] around one axis.
struct SoftmaxGeometry {
  int64_t outer = 0;
  int64_t channels = 0;
  int64_t inner = 0;
};

// Softmax of x viewed as [outer, channels, inner] over the channel axis,
// written to y (may equal x). For every (outer, inner) position, row_max and
// row_sum (each outer * inner long) receive the maximum logit and
// sum(exp(x - max)), so callers can form log-softmax as x - max - log(sum).
void softmax_forward(const SoftmaxGeometry& g, const float* x, float* y, float* row_max, float* row_sum);

class SoftmaxLayer : public Layer {
 public:
  SoftmaxLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // Backward reads the output only.
  BackwardReads backward_reads() const override { return {false, true}; }

  bool supports_in_place() const override { return true; }
  // Blobs stored in bf16 or f16 are taken as they are: the maxima and sums
  // of exponentials in f32 (the CPU keeps them per position), each output
  // rounded once; backward reads the stored output.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }
  // Uses only the output y: dx = y * (dy - sum_c(dy * y)).
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in softmax.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  int axis_;  // as configured; resolved against the bottom in reshape()
  SoftmaxGeometry geom_;
  Tensor row_a_;  // scratch, outer * inner: max (forward) or dot (backward)
  Tensor row_b_;  // scratch, outer * inner: sum of exponentials
};

}  // namespace strata
