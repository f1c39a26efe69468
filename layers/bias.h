// Bias (Caffe "Bias"): y = x + b, with b broadcast over bottom axes
// [axis, axis + num_axes) (bias_param, as Scale's scale_param). With one
// bottom b is a learnable param "bias" (filler default constant 0); with two
// it is bottom 1, whose shape must equal bottom 0's dims from `axis` on.
// May run in place. Backward: dx = dy; db = dy summed over the other axes.
#pragma once

#include <vector>

#include "framework/filler.h"
#include "framework/layer.h"

namespace strata {

class BiasLayer : public Layer {
 public:
  BiasLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int max_bottoms() const override { return 2; }
  bool supports_in_place() const override { return true; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in bias.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  const Blob& bias_blob(const BlobVec& bottom) const { return bottom.size() > 1 ? *bottom[1] : param(0); }
  // Canonical [axis, end) of the bias within `s`; ShapeError when it does not fit.
  void bias_axes(const Shape& s, const Shape* bias_shape, int64_t* axis, int64_t* end) const;

  int64_t axis_param_;
  int64_t num_axes_param_;
  FillerSpec filler_;
  int64_t outer_ = 0, dim_ = 0, inner_ = 0;  // bottom 0 as [outer, dim (bias), inner]
};

}  // namespace strata
