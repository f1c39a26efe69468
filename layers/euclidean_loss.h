// EuclideanLoss (Caffe "EuclideanLoss"): loss = sum((a - b)^2) / (2 N), N
// the first dimension of a. Bottoms a and b with the same count per sample
// (count from axis 1 on; their shapes may differ). Both take a gradient:
// d loss/da = (a - b) / N = -d loss/db.
#pragma once

#include <memory>
#include <vector>

#include "framework/layer.h"
#include "layers/loss_layer.h"

namespace strata {

class EuclideanLossLayer : public LossLayer {
 public:
  using LossLayer::LossLayer;
  static LayerSchema schema();

  bool can_backward_to(int /*bottom_index*/) const override { return true; }  // both bottoms

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;
  bool replays_in_a_graph() const override { return true; }

 private:
  // 2 N, at least 1 (a zero batch gives loss 0).
  double divisor(const BlobVec& bottom) const;

  std::vector<float> diff_;  // a - b, kept for backward

  struct CudaState;  // device scratch, in layers/euclidean_loss.cu
  std::shared_ptr<CudaState> cuda_;
};

}  // namespace strata
