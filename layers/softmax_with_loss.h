// SoftmaxWithLoss (Caffe "SoftmaxWithLoss"): softmax over softmax_param.axis
// followed by the multinomial logistic loss -log p[label], averaged according
// to loss_param.normalization (default VALID). Bottoms: scores
// [..., C (axis), ...] and labels (class indices stored as floats; one per
// position, i.e. outer * inner of them in any shape). Tops: the loss scalar,
// optionally the probabilities. A gradient on the probabilities top is
// propagated through the softmax as well (Caffe ignores it); with no consumer
// it is zero. The shared machinery is in layers/softmax_loss.h.
#pragma once

#include <vector>

#include "layers/softmax_loss.h"

namespace strata {

class SoftmaxWithLossLayer : public SoftmaxLossLayer {
 public:
  SoftmaxWithLossLayer(const LayerSpec& spec, const LayerContext& ctx)
      : SoftmaxLossLayer(spec, ctx, "softmax_param", LossNormalization::kValid) {}
  static LayerSchema schema();

 protected:
  double slice_loss_cpu(const BlobVec& bottom, const float* x, int64_t o) const override;
  void slice_gradient_cpu(const BlobVec& bottom, int64_t o, float scale, float* dx) const override;
#ifdef STRATA_WITH_CUDA
  void position_loss_cuda(const BlobVec& bottom, const float* x, CudaScratch& st, unsigned long long* bad) override;
  void position_gradient_cuda(const BlobVec& bottom, const float* loss_weight, CudaScratch& st, float* dx) override;
#endif
};

}  // namespace strata
