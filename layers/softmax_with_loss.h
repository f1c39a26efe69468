// SoftmaxWithLoss (Caffe "SoftmaxWithLoss"): softmax over softmax_param.axis
// followed by the multinomial logistic loss -log p[label], averaged according
// to loss_param.normalization. Bottoms: scores [..., C (axis), ...] and labels
// (class indices stored as floats; one per position, i.e. outer * inner of
// them in any shape). Tops: the loss scalar, optionally the probabilities.
// A gradient on the probabilities top is propagated through the softmax as
// well (Caffe ignores it); with no consumer it is zero.
#pragma once

#include <optional>
#include <vector>

#include "framework/layer.h"
#include "layers/softmax.h"

namespace strata {

class SoftmaxWithLossLayer : public Layer {
 public:
  SoftmaxWithLossLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  int max_tops() const override { return 2; }
  float default_loss_weight(int top_index) const override { return top_index == 0 ? 1.0f : 0.0f; }
  bool can_backward_to(int bottom_index) const override { return bottom_index == 0; }

  void setup(const BlobVec& /*bottom*/, const BlobVec& /*top*/) override {}
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;

 private:
  enum class Normalization { kValid, kBatchSize, kFull, kNone };

  // Divisor of the summed loss for this batch (never below 1, so an empty or
  // fully ignored batch gives loss 0 rather than NaN).
  double normalizer(int64_t valid_count) const;

  int axis_;
  std::optional<int64_t> ignore_label_;
  Normalization normalization_;
  SoftmaxGeometry geom_;
  Tensor prob_;                      // softmax output, kept for backward
  Tensor row_max_, row_sum_;         // per position, from softmax_forward
  std::vector<int32_t> labels_;      // checked class index per position, -1 = ignored
  std::vector<double> outer_loss_;   // per outer slice, summed in order for determinism
  int64_t valid_count_ = 0;

#ifdef STRATA_WITH_CUDA
 public:
  STRATA_CUDA_METHODS;

 private:
  struct CudaState;  // device scratch and library handles, in layers/softmax_with_loss.cu
  std::shared_ptr<CudaState> cuda_;
#endif
};

}  // namespace strata
