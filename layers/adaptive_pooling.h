// AdaptivePooling (PyTorch adaptive_avg_pool2d / adaptive_max_pool2d):
// [N, C, H, W] -> [N, C, out_h, out_w] whatever H and W are. Output row i
// pools input rows [floor(i * H / out_h), ceil((i + 1) * H / out_h)) (columns
// alike), so bins may overlap and every input row is in at least one bin.
// MAX: the first maximum of a bin wins (and gets the gradient); NaN
// propagates (as in torch).
#pragma once

#include "framework/layer.h"

namespace strata {

class AdaptivePoolingLayer : public Layer {
 public:
  AdaptivePoolingLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // Blobs stored in bf16 or f16 are taken as they are: maxima compared and
  // averages summed (in double) on the widened values, each output rounded
  // once; backward sums each input's share in f32 (bins may overlap) and
  // rounds it once.
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }

  STRATA_CPU_METHODS;

 private:
  enum class Pool { kAve, kMax };

  Pool pool_;
  int64_t out_h_, out_w_;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0;
  Tensor argmax_;  // [N, C, out_h, out_w] int32: flat h * W + w of each MAX winner

 public:
  STRATA_CUDA_METHODS;  // in adaptive_pooling.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
