// Flatten: merges axes [axis, end_axis] of the bottom into one (Caffe's
// flatten_param). Values are copied, not shared, so top and bottom stay
// independent blobs for the Net's memory handling.
#pragma once

#include <vector>

#include "framework/layer.h"

namespace strata {

class FlattenLayer : public Layer {
 public:
  FlattenLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // Backward copies the gradient only.
  BackwardReads backward_reads() const override { return {false, false}; }
  // A copy of the bytes, exact in any dtype: blobs stored in bf16 or f16 are taken as they are.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in flatten.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  int64_t axis_;
  int64_t end_axis_;
};

}  // namespace strata
