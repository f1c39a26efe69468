// The softmax-loss core that SoftmaxWithLoss and InfogainLoss share (Caffe's
// InfogainLoss is SoftmaxWithLoss with a weight matrix): scores
// [..., C (axis), ...] viewed as [outer, C, inner] with one label per
// (outer, inner) position, the labels checked as class indices, the softmax
// kept for backward, the summed loss divided as loss_param says, and a
// gradient arriving on the optional probabilities top sent back through the
// softmax (Caffe drops it). A subclass writes only its loss per outer slice
// and the gradient of it, on the CPU and, with CUDA, as kernels over
// positions. Accuracy shares the view and the label rule (class_positions,
// class_label, device_class_label).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/layer.h"
#include "layers/loss_layer.h"
#include "layers/softmax.h"

namespace strata {

// Scores of `scores` shape viewed around class axis `axis` (negative counts
// from the end) into *g, with labels of `labels` shape (one per position,
// any shape). "" when they fit, else
// what is wrong, for Layer::shape_error; `axis_key` names the option
// ("softmax_param.axis").
std::string class_positions(const std::string& axis_key, int axis, const Shape& scores, const Shape& labels,
                            SoftmaxGeometry* g);

class SoftmaxLossLayer : public LossLayer {
 public:
  int max_tops() const override { return 2; }
  // Backward reads the probabilities and labels it kept itself.
  BackwardReads backward_reads() const override { return {false, false}; }
  // Scores, their gradient and the probabilities top in bf16 or f16: widened
  // into scratch and computed in f32 (the labels and the loss stay f32).
  bool takes_storage(DType dtype) const override { return is_float_dtype(dtype); }
  size_t scratch_bytes() const override;

  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) final;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) final;
  STRATA_CUDA_METHODS;  // in layers/softmax_loss.cu
  bool replays_in_a_graph() const override { return true; }
#ifdef STRATA_WITH_CUDA
  void before_replay() override;  // reports the bad label the last replay found
#endif

 protected:
  // `axis_block` holds the class axis ("softmax_param"); loss_param gives
  // ignore_label and normalization (`normalization` when it says nothing).
  SoftmaxLossLayer(const LayerSpec& spec, const LayerContext& ctx, const std::string& axis_block,
                   LossNormalization normalization);

  // The summed loss of outer slice o over its labelled positions: labels_
  // holds each position's class (-1: ignored); x the scores; row_max_ and
  // row_sum_ give log p = x - max - log(sum).
  virtual double slice_loss_cpu(const BlobVec& bottom, const float* x, int64_t o) const = 0;
  // d loss / d scores of slice o times `scale` (loss weight / divisor) into
  // dx (the slice's C * inner values, all written; 0 at ignored positions).
  virtual void slice_gradient_cpu(const BlobVec& bottom, int64_t o, float scale, float* dx) const = 0;
  // Called once before the slices of a backward (InfogainLoss: H's row sums).
  virtual void prepare_backward_cpu(const BlobVec& /*bottom*/) {}

  // Scratch for a call on 16-bit scores: `tensors` f32 blocks of their shape.
  size_t f32_scratch(int tensors) const;

#ifdef STRATA_WITH_CUDA
 public:
  struct CudaScratch;  // in layers/softmax_loss.cuh

 protected:
  // Kernels on the compute stream. Loss: per position, its class into
  // labels (device_class_label, bad indices to `bad`), its loss into terms
  // and 1 into valid when it counts. Gradient: as slice_gradient_cpu over
  // all outer * C * inner scores, scaled by loss_weight[0] / divisor[0].
  // `x`: the scores in f32 (bottom[0] itself, or widened from 16 bits).
  virtual void position_loss_cuda(const BlobVec& bottom, const float* x, CudaScratch& st,
                                  unsigned long long* bad) = 0;
  virtual void position_gradient_cuda(const BlobVec& bottom, const float* loss_weight, CudaScratch& st,
                                      float* dx) = 0;
#endif

  std::string axis_key_;  // "softmax_param.axis", for errors
  int axis_;
  std::optional<int64_t> ignore_label_;
  LossNormalization normalization_;
  SoftmaxGeometry geom_;
  bool probability_top_ = false;     // a second top, the probabilities
  Tensor prob_;                      // softmax output, kept for backward
  Tensor row_max_, row_sum_;         // per position, from softmax_forward
  std::vector<int32_t> labels_;      // checked class index per position, -1 = ignored
  std::vector<double> outer_loss_;   // per outer slice, summed in order for determinism
  double divisor_ = 1.0;             // of the last CPU forward

#ifdef STRATA_WITH_CUDA
 private:
  std::shared_ptr<CudaScratch> cuda_;
#endif
};

}  // namespace strata
