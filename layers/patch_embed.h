// PatchEmbed (ViT's patch projection, torchvision conv_proj + flatten(2) +
// transpose(1, 2)): cuts [N, C, H, W] into non-overlapping P x P patches and
// projects each to D values: top [N, (H/P) * (W/P), D], patches in row-major
// order. Equal to a Convolution with kernel = stride = P, so the weight is
// [D, C, P, P] and torch's conv weights load directly; bias [D].
#pragma once

#include "framework/filler.h"
#include "framework/layer.h"
#include "framework/scratch.h"

namespace strata {

class PatchEmbedLayer : public Layer {
 public:
  PatchEmbedLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: its own copy of the patches; neither blob's values.
  BackwardReads backward_reads() const override { return {false, false}; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  // The patch matrix, from forward to backward (the weight gradient reads it).
  size_t kept_bytes() const override;
  // In TRAIN: backward's gradient of the patch matrix, scattered into the
  // input gradient.
  size_t scratch_bytes() const override;

 private:
  // Calls fn(patch_offset, image_offset) for every run of P contiguous
  // values shared by the image [N, C, H, W] and the patch matrix
  // [N * T, C * P * P] (a row per patch, in the weight's (c, ky, kx) order).
  template <typename Fn>
  void for_each_patch_run(const Fn& fn) const;
  // [N * T, C * P * P], the shape of the patch matrix and of its gradient.
  Shape patches_shape() const;
  // kept() or scratch() as one [N * T, C * P * P] matrix.
  Tensor patch_matrix(const Tensor& block) const;

  int64_t patch_;
  int64_t num_output_;
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  int64_t channels_ = 0;  // fixed at setup
  int64_t n_ = 0, h_ = 0, w_ = 0;

 public:
  STRATA_CUDA_METHODS;  // in patch_embed.cu
};

}  // namespace strata
