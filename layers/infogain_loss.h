// InfogainLoss (Caffe "InfogainLoss"): softmax over infogain_loss_param.axis,
// then the information-gain weighted log loss with a C x C matrix H:
//   loss = -sum_positions sum_c H[label, c] * log(max(p_c, 1e-20)) / divisor,
// with loss_param's ignore_label and normalization (default VALID) as in
// SoftmaxWithLoss; H = identity gives SoftmaxWithLoss. Bottoms: scores
// [..., C (axis), ...], labels (one per position), and H [C, C] (any shape of
// C * C values) as a third bottom, or read once from Caffe's binaryproto
// (`infogain_loss_param { source }`) when there is no third bottom. Tops: the
// loss, optionally the probabilities, whose gradient (if any) flows back
// through the softmax as in SoftmaxWithLoss. Only the scores take a gradient:
// p_c * sum_k H[label, k] - H[label, c], Caffe's formula.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "framework/layer.h"
#include "layers/loss_layer.h"
#include "layers/softmax.h"

namespace strata {

class InfogainLossLayer : public Layer {
 public:
  InfogainLossLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 3; }
  int max_tops() const override { return 2; }
  float default_loss_weight(int top_index) const override { return top_index == 0 ? 1.0f : 0.0f; }
  bool can_backward_to(int bottom_index) const override { return bottom_index == 0; }

  void setup(const BlobVec& /*bottom*/, const BlobVec& /*top*/) override {}
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;

 private:
  // H: the third bottom when given, else the matrix read from `source`.
  const Tensor& h_of(const BlobVec& bottom) const { return bottom.size() > 2 ? bottom[2]->data : h_from_file_; }

  int axis_;
  Tensor h_from_file_;
  std::optional<int64_t> ignore_label_;
  LossNormalization normalization_;
  SoftmaxGeometry geom_;
  Tensor prob_;                     // softmax output, kept for backward
  Tensor row_max_, row_sum_;        // per position, from softmax_forward
  std::vector<int32_t> labels_;     // checked class index per position, -1 = ignored
  std::vector<double> outer_loss_;  // per outer slice, summed in order for determinism
  std::vector<float> sum_rows_;     // sum_k H[c, k] per class c
  double divisor_ = 1.0;            // of the last CPU forward

#ifdef STRATA_WITH_CUDA
 public:
  STRATA_CUDA_METHODS;

 private:
  struct CudaState;  // device scratch, in layers/infogain_loss.cu
  std::shared_ptr<CudaState> cuda_;
#endif
};

}  // namespace strata
