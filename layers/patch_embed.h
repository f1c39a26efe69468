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
  // Blobs stored in bf16 or f16 are taken as they are (the image then comes
  // rounded to 16 bits, as under autocast), and the patch matrix kept for
  // backward is stored in that dtype. CPU: blocks of patch rows widened into
  // f32, multiplied, each output rounded once; GPU: cuBLAS on the 16-bit
  // patches against a 16-bit copy of the weight that the forward makes and
  // keeps for the backward, as InnerProduct. The weight and bias and their
  // gradients stay f32.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  // The patch matrix, from forward to backward (the weight gradient reads
  // it); with 16-bit blobs on a GPU, then the weight's 16-bit copy.
  size_t kept_bytes() const override;
  // In TRAIN: backward's gradient of the patch matrix, scattered into the
  // input gradient. With 16-bit blobs on the CPU also f32 blocks of rows.
  size_t scratch_bytes() const override;

 private:
  // Calls fn(patch_offset, image_offset) for every run of P contiguous
  // values shared by the image [N, C, H, W] and the patch matrix
  // [N * T, C * P * P] (a row per patch, in the weight's (c, ky, kx) order).
  template <typename Fn>
  void for_each_patch_run(const Fn& fn) const;
  // [N * T, C * P * P], the shape of the patch matrix and of its gradient.
  Shape patches_shape() const;
  // kept() or scratch() as one [N * T, C * P * P] matrix in the call dtype.
  Tensor patch_matrix(const Tensor& block) const;
  // kept() on a GPU with 16-bit blobs: the weight's 16-bit copy after the
  // patch matrix, rounded from the f32 weight when `refresh` (forward), else
  // as the forward left it.
  Tensor kept_weight(bool refresh);
  // A call's scratch: the patch matrix's gradient dpatches (backward, in
  // the call dtype); with 16-bit blobs on the CPU f32 blocks of block_rows()
  // patch rows (wide_p [rows, C*P*P], wide_y [rows, D]).
  struct Scratch {
    Tensor dpatches, wide_p, wide_y;
  };
  Scratch lay_out_scratch(ScratchCarver& c, bool backward) const;
  Scratch take_scratch(bool backward);
  int64_t block_rows() const;
  // The CPU calls for blobs whose elements E describes (layers/neuron_layer.h).
  template <class E>
  void forward_cpu_as(const Tensor& x, Tensor& y);
  template <class E>
  void backward_cpu_as(const Tensor& dy, Tensor* dx);

  int64_t patch_;
  int64_t num_output_;
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  int64_t channels_ = 0;  // fixed at setup
  int64_t n_ = 0, h_ = 0, w_ = 0;

 public:
  STRATA_CUDA_METHODS;  // in patch_embed.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
