// Scale: y = x * scale (+ bias), with scale broadcast over bottom axes
// [axis, axis + num_axes) (Caffe's scale_param). With one bottom the scale is
// a learnable param "weight" (filler default constant 1); with two bottoms it
// is bottom[1], whose shape must equal bottom[0]'s dims from `axis` on.
// bias_term adds a learnable "bias" of the scale's shape (default constant 0).
#pragma once

#include <vector>

#include "framework/filler.h"
#include "framework/layer.h"

namespace strata {

class ScaleLayer : public Layer {
 public:
  ScaleLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: the input (or its copy, in place) and a second bottom's scale; never the output.
  BackwardReads backward_reads() const override { return {true, false}; }

  int max_bottoms() const override { return 2; }
  bool supports_in_place() const override { return true; }
  // With one bottom, blobs stored in bf16 or f16 are taken as they are: each
  // output rounded once, the parameter gradients summed in double into the
  // f32 gradients. The two-bottom form computes in f32 (the net copies).
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype) && spec_.bottoms.size() == 1; }
  // In place: the input the top overwrites (the scale gradient needs it), in
  // the call dtype, from forward to backward (Kept).
  size_t kept_bytes() const override;

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in scale.cu
  bool replays_in_a_graph() const override { return true; }
  // NHWC blobs too where the scale spans the channels alone (one bottom,
  // axis 1, one axis: after a BatchNorm), as [N * H * W, C, 1].
  ChannelsLast channels_last() const override {
    return spec_.bottoms.size() == 1 && axis_param_ == 1 && num_axes_param_ == 1 ? ChannelsLast::kTakes
                                                                                 : ChannelsLast::kNo;
  }

 private:
  // Where the scale and bias live, once setup() knows the number of bottoms.
  const Blob& scale_blob(const BlobVec& bottom) const { return bottom.size() > 1 ? *bottom[1] : param(0); }
  Blob* bias_blob() { return bias_term_ ? &param(params_.size() - 1) : nullptr; }
  // Canonical [axis, end) of the scale within `s`; ShapeError when it does not fit.
  void scale_axes(const Shape& s, const Shape* scale_shape, int64_t* axis, int64_t* end) const;

  int64_t axis_param_;
  int64_t num_axes_param_;
  bool bias_term_;
  FillerSpec filler_;
  FillerSpec bias_filler_;
  int64_t outer_ = 0, dim_ = 0, inner_ = 0;  // bottom[0] as [outer, dim (scale), inner]
  bool in_place_ = false;                     // top 0 is bottom 0 (at the last reshape)
  Tensor row_partials_;  // NHWC on a GPU: the parameter gradients' slab partials (cuda::channel_row_sums)
  // Forward's copy of the input when in place; empty otherwise.
  Tensor take_x_copy();
};

}  // namespace strata
