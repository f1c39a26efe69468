// Slice (Caffe "Slice"): cuts one bottom into several tops along an axis
// (slice_param.axis, default 1; Caffe's legacy slice_dim is accepted), at
// the given slice_points (one fewer than the tops, strictly increasing), or
// into equal parts when none are given. The reverse of Concat; backward
// puts each top's gradient back into its range of the bottom's.
#pragma once

#include <vector>

#include "framework/layer.h"

namespace strata {

class SliceLayer : public Layer {
 public:
  SliceLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int max_tops() const override { return -1; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in slice.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  int64_t axis_param_;
  std::vector<int64_t> points_;  // slice_point, as given
  int64_t axis_ = 0;             // canonical, set by reshape()
  int64_t outer_ = 0;            // product of dims before the axis
  int64_t inner_ = 0;            // product of dims after the axis
  std::vector<int64_t> sizes_;   // each top's size on the axis
};

}  // namespace strata
