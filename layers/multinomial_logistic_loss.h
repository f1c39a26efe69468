// MultinomialLogisticLoss (Caffe "MultinomialLogisticLoss"): the negative log
// likelihood of probabilities p [N, C, ...] (C = count / N per sample; what
// a Softmax layer gives) at labels [N]:
//   loss = -sum_n log(max(p[n, label_n], 1e-20)) / N.
// PyTorch's nll_loss of log(p). The labels take no gradient; p gets
// -1 / (N max(p, 1e-20)) at each label and 0 elsewhere (Caffe's gradient,
// also below the clamp). For scores rather than probabilities use
// SoftmaxWithLoss, which is stabler.
#pragma once

#include <memory>
#include <vector>

#include "framework/layer.h"
#include "layers/loss_layer.h"

namespace strata {

class MultinomialLogisticLossLayer : public LossLayer {
 public:
  using LossLayer::LossLayer;
  static LayerSchema schema();

  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;
  bool replays_in_a_graph() const override { return true; }
#ifdef STRATA_WITH_CUDA
  void before_replay() override;  // reports the bad label the last replay found
#endif

 private:
  double divisor() const { return static_cast<double>(num_ > 0 ? num_ : 1); }

  int64_t num_ = 0, dim_ = 0;
  std::vector<int32_t> labels_;  // checked class index per sample

  struct CudaState;  // device scratch, in layers/multinomial_logistic_loss.cu
  std::shared_ptr<CudaState> cuda_;
};

}  // namespace strata
