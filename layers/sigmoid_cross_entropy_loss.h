// SigmoidCrossEntropyLoss (Caffe "SigmoidCrossEntropyLoss"): the binary
// cross-entropy of sigmoid(x) against targets t in [0, 1] (PyTorch's
// BCEWithLogits), summed over every element and divided as
// loss_param.normalization says (Caffe's default here: BATCH_SIZE = the first
// dimension). Bottoms: scores x and targets of the same count; elements whose
// target equals loss_param.ignore_label add nothing. The targets take no
// gradient; d loss/dx = (sigmoid(x) - t) / divisor.
#pragma once

#include <cmath>  // expf, log1pf for the shared formulas
#include <memory>
#include <optional>
#include <vector>

#include "framework/layer.h"
#include "layers/host_device.h"
#include "layers/loss_layer.h"

namespace strata {

class SigmoidCrossEntropyLossLayer : public LossLayer {
 public:
  SigmoidCrossEntropyLossLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;
  bool replays_in_a_graph() const override { return true; }

 private:
  // The divisor for VALID needs the count of kept targets, known after forward.
  double fixed_divisor(const BlobVec& bottom) const;

  LossNormalization normalization_;
  std::optional<int64_t> ignore_label_;
  double divisor_ = 1.0;  // of the last CPU forward, for backward

  struct CudaState;  // device scratch, in layers/sigmoid_cross_entropy_loss.cu
  std::shared_ptr<CudaState> cuda_;
};

// The stable per-element loss max(x, 0) - x t + log(1 + exp(-|x|)) and its
// gradient sigmoid(x) - t, for the .cpp and the .cu.
STRATA_HOST_DEVICE float sigmoid_cross_entropy(float x, float t) {
  return fmaxf(x, 0.0f) - x * t + log1pf(expf(-fabsf(x)));
}
STRATA_HOST_DEVICE float sigmoid_cross_entropy_grad(float x, float t) {
  const float s = x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
  return s - t;
}

}  // namespace strata
