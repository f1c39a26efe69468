// PatchEmbed (ViT's patch projection, torchvision conv_proj + flatten(2) +
// transpose(1, 2)): cuts [N, C, H, W] into non-overlapping P x P patches and
// projects each to D values: top [N, (H/P) * (W/P), D], patches in row-major
// order. Equal to a Convolution with kernel = stride = P, so the weight is
// [D, C, P, P] and torch's conv weights load directly; bias [D].
#pragma once

#include "framework/filler.h"
#include "framework/layer.h"

namespace strata {

class PatchEmbedLayer : public Layer {
 public:
  PatchEmbedLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: its own copy of the patches; neither blob's values.
  BackwardReads backward_reads() const override { return {false, false}; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;

 private:
  // Calls fn(patch_offset, image_offset) for every run of P contiguous
  // values shared by the image [N, C, H, W] and the patch matrix
  // [N * T, C * P * P] (a row per patch, in the weight's (c, ky, kx) order).
  template <typename Fn>
  void for_each_patch_run(const Fn& fn) const;

  int64_t patch_;
  int64_t num_output_;
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  int64_t channels_ = 0;  // fixed at setup
  int64_t n_ = 0, h_ = 0, w_ = 0;
  Tensor patches_;   // [N * T, C * P * P], from forward, for the weight gradient
  Tensor dpatches_;  // the same shape, backward scratch

 public:
  STRATA_CUDA_METHODS;  // in patch_embed.cu
};

}  // namespace strata
