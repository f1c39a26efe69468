// Crop (Caffe "Crop"): cuts bottom 0 down to the shape of bottom 1 on the
// axes from crop_param.axis on (default 2, the spatial axes of NCHW),
// starting at crop_param.offset on each (none: 0 everywhere; one: the same
// for every cropped axis; else one per cropped axis). The axes before `axis`
// keep bottom 0's size. Bottom 1 only gives the shape: it takes no gradient.
// Backward puts the top gradient into the cropped window of bottom 0's
// gradient and zeros elsewhere.
//
// The index map below is shared by crop.cpp and crop.cu.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/layer.h"
#include "layers/host_device.h"

namespace strata {

struct CropGeometry {
  static constexpr int kMaxAxes = 8;
  int axes;
  int64_t in[kMaxAxes];      // bottom 0's shape
  int64_t out[kMaxAxes];     // top's shape
  int64_t offset[kMaxAxes];  // 0 on the axes before `axis`

  // The bottom element that top element t copies.
  STRATA_HOST_DEVICE int64_t source(int64_t t) const {
    int64_t src = 0, stride = 1;
    for (int d = axes - 1; d >= 0; --d) {
      src += (t % out[d] + offset[d]) * stride;
      t /= out[d];
      stride *= in[d];
    }
    return src;
  }
};

class CropLayer : public Layer {
 public:
  CropLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  bool can_backward_to(int bottom_index) const override { return bottom_index == 0; }

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in crop.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  int64_t axis_param_;
  std::vector<int64_t> offsets_;  // as given
  CropGeometry geom_{};
};

}  // namespace strata
