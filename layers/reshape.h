// Reshape: changes the shape without touching values (Caffe's reshape_param).
// shape { dim } replaces bottom axes [axis, axis + num_axes); a dim of 0
// copies the bottom's dim at the same position, one dim of -1 is inferred.
#pragma once

#include <vector>

#include "framework/layer.h"

namespace strata {

class ReshapeLayer : public Layer {
 public:
  ReshapeLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // Backward copies the gradient only.
  BackwardReads backward_reads() const override { return {false, false}; }
  // A copy of the bytes, exact in any dtype: blobs stored in bf16 or f16 are taken as they are.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in reshape.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  std::vector<int64_t> dims_;  // as written: >0 fixed, 0 copy, -1 infer
  int64_t axis_;
  int64_t num_axes_;
};

}  // namespace strata
