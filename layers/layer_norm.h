// LayerNorm (PyTorch nn.LayerNorm): each sample is normalised over the dims
// from `axis` to the end (D values), y = (x - mean) / sqrt(var + eps) * weight
// + bias, with the biased variance. weight and bias are [D] (D = the product
// of those dims), so torch's LayerNorm(d) weights load directly for the usual
// axis -1.
#pragma once

#include "framework/filler.h"
#include "framework/layer.h"
#include "framework/scratch.h"

namespace strata {

class LayerNormLayer : public Layer {
 public:
  LayerNormLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: the input and the saved mean and 1/std; never the output.
  BackwardReads backward_reads() const override { return {true, false}; }
  // Blobs stored in bf16 or f16 are taken as they are: each row's
  // statistics and arithmetic in f32 (sums in double), each output rounded
  // once. Weight, bias, mean and 1/std stay f32.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;
  bool replays_in_a_graph() const override { return true; }
  // Its bottom as a residual sum a + b (residual_sum()): each element summed
  // in f32, rounded to the blobs' dtype and written to the bottom, and the
  // row normalised from those stored values, as the two layers would.
  bool takes_residual_sum() const override { return true; }
  // The rows' mean and 1/std, from forward to backward (Kept).
  size_t kept_bytes() const override;
  // On a GPU in TRAIN: backward's per-chunk partial sums of the parameter
  // gradients (partials_shape()); nothing on the CPU.
  size_t scratch_bytes() const override;

 private:
  int canonical_axis(const Shape& s) const;

  // What forward keeps for backward: mean and rstd = 1 / sqrt(var + eps),
  // [rows] each. Placed by the net's plan, so nothing of the layer's own
  // outlives a step.
  struct Kept {
    Tensor mean, rstd;
  };
  Kept lay_out_kept(ScratchCarver& c) const;
  Kept take_kept();
  // [2, chunks, D]: the GPU backward's sums of dy * xhat and of dy per chunk
  // of rows (layer_norm.cu).
  Shape partials_shape() const;

  double eps_;
  int axis_;  // as configured
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  int64_t d_ = 0;     // values per normalised row, fixed at setup
  int64_t rows_ = 0;  // rows in the current batch
};

}  // namespace strata
