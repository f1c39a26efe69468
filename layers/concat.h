// Concat: joins N bottoms along one axis (Caffe's concat_param; the legacy
// concat_dim is accepted as the axis). All other dims must agree.
#pragma once

#include <vector>

#include "framework/layer.h"

namespace strata {

class ConcatLayer : public Layer {
 public:
  ConcatLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // Backward copies the gradient's slices only.
  BackwardReads backward_reads() const override { return {false, false}; }
  // Any float dtype: the slices are moved as bytes.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

  int max_bottoms() const override { return -1; }

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in concat.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  int64_t axis_param_;
  int64_t axis_ = 0;   // canonical, set by reshape()
  int64_t outer_ = 0;  // product of dims before the axis
  int64_t inner_ = 0;  // product of dims after the axis
  std::vector<bool> all_;  // every bottom enabled, for forward
};

}  // namespace strata
