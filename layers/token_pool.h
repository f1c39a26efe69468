// TokenPool (ViT head input): tokens [N, T, D] -> [N, D], either the class
// token (token 0; torchvision's x[:, 0]) or the mean over all T tokens.
#pragma once

#include "framework/layer.h"

namespace strata {

class TokenPoolLayer : public Layer {
 public:
  TokenPoolLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: the gradient is copied or spread; no values.
  BackwardReads backward_reads() const override { return {false, false}; }
  // Blobs stored in bf16 or f16 are taken as they are: the mean summed in
  // f32 and rounded once, the class token copied.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

  STRATA_CPU_METHODS;

 private:
  enum class Pool { kClassToken, kMean };

  Pool pool_;
  int64_t n_ = 0, t_ = 0, d_ = 0;

 public:
  STRATA_CUDA_METHODS;  // in token_pool.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
