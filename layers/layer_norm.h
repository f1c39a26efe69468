// LayerNorm (PyTorch nn.LayerNorm): each sample is normalised over the dims
// from `axis` to the end (D values), y = (x - mean) / sqrt(var + eps) * weight
// + bias, with the biased variance. weight and bias are [D] (D = the product
// of those dims), so torch's LayerNorm(d) weights load directly for the usual
// axis -1.
#pragma once

#include <memory>

#include "framework/filler.h"
#include "framework/layer.h"

namespace strata {

class LayerNormLayer : public Layer {
 public:
  LayerNormLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: the input and the saved mean and 1/std; never the output.
  BackwardReads backward_reads() const override { return {true, false}; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;

 private:
  int canonical_axis(const Shape& s) const;

  double eps_;
  int axis_;  // as configured
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  int64_t d_ = 0;     // values per normalised row, fixed at setup
  int64_t rows_ = 0;  // rows in the current batch
  Tensor mean_;       // [rows], from forward, for backward
  Tensor rstd_;       // [rows]: 1 / sqrt(var + eps)

  struct CudaState;  // device scratch, in layers/layer_norm.cu
  std::shared_ptr<CudaState> cuda_;
};

}  // namespace strata
