// Pooling (Caffe "Pooling") over the spatial dims of NCHW input, with Caffe's
// semantics:
// - output size: ceil((in + 2 * pad - kernel) / stride) + 1 (round_mode CEIL,
//   the default) or floor(...) + 1 (FLOOR; also `ceil_mode: false`, the
//   spelling of a widely used fork); an output whose window would
//   start at or beyond in + pad is dropped. (Caffe checks that only when there
//   is padding; without it the check matters only where Caffe would pool an
//   empty window, so we always apply it, as PyTorch does.)
// - MAX keeps the argmax of each window for backward; the first maximum wins
//   on ties and NaN propagates.
// - AVE divides by the window size clipped to the padded image (not to the
//   image), as Caffe and PyTorch's count_include_pad=True do.
// - global_pooling: the window is the whole image.
#pragma once

#include "framework/layer.h"

namespace strata {

class PoolingLayer : public Layer {
 public:
  enum class Method { kMax, kAve };
  enum class RoundMode { kCeil, kFloor };

  PoolingLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: MAX keeps its own argmax mask and AVE needs only the geometry.
  BackwardReads backward_reads() const override { return {false, false}; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in pooling.cu

 private:
  enum class Global { kNo, kYes };

  void check_bottom(const Shape& s) const;
  int64_t pooled_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride) const;
  void forward_max(const float* x, float* y, int32_t* mask, int64_t planes) const;
  void forward_ave(const float* x, float* y, int64_t planes) const;

  Method method_;
  RoundMode round_;
  Global global_;
  int64_t kernel_h_ = 0, kernel_w_ = 0;  // for global pooling: set by reshape()
  int64_t stride_h_ = 1, stride_w_ = 1;
  int64_t pad_h_ = 0, pad_w_ = 0;

  int64_t num_ = 0, channels_ = 0, height_ = 0, width_ = 0, out_h_ = 0, out_w_ = 0;
  Tensor mask_;  // MAX: index h * W + w of each output's input, [N, C, out_h, out_w]
};

}  // namespace strata
