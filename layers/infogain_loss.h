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

#include <vector>

#include "layers/softmax_loss.h"

namespace strata {

class InfogainLossLayer : public SoftmaxLossLayer {
 public:
  InfogainLossLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // Backward reads H (a bottom when given as one).
  BackwardReads backward_reads() const override { return {true, false}; }

  int max_bottoms() const override { return 3; }
  void reshape(const BlobVec& bottom, const BlobVec& top) override;

 protected:
  double slice_loss_cpu(const BlobVec& bottom, const float* x, int64_t o) const override;
  void slice_gradient_cpu(const BlobVec& bottom, int64_t o, float scale, float* dx) const override;
  void prepare_backward_cpu(const BlobVec& bottom) override;
#ifdef STRATA_WITH_CUDA
  void position_loss_cuda(const BlobVec& bottom, const float* x, CudaScratch& st, unsigned long long* bad) override;
  void position_gradient_cuda(const BlobVec& bottom, const float* loss_weight, CudaScratch& st, float* dx) override;
#endif

 private:
  // H: the third bottom when given, else the matrix read from `source`.
  const Tensor& h_of(const BlobVec& bottom) const { return bottom.size() > 2 ? bottom[2]->data : h_from_file_; }

  Tensor h_from_file_;
  std::vector<float> sum_rows_;  // sum_k H[c, k] per class c, for the CPU backward
};

}  // namespace strata
