// InnerProduct (Caffe "InnerProduct", PyTorch Linear): y = x W^T + b.
// The bottom is viewed as [M, K] with M = product of dims before `axis` and
// K = product of dims from `axis` on; the top is bottom dims before `axis`
// followed by num_output. Weight [num_output, K] (PyTorch layout), or
// [K, num_output] with transpose: true (Caffe's transpose flag); bias [num_output].
#pragma once

#include "framework/filler.h"
#include "framework/layer.h"

namespace strata {

class InnerProductLayer : public Layer {
 public:
  InnerProductLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;

 private:
  // Weight storage order.
  enum class WeightLayout { kOutputMajor, kInputMajor };
  enum class Bias { kNo, kYes };

  int canonical_axis(const Shape& s) const;

  int64_t num_output_;
  Bias bias_;
  int axis_;
  WeightLayout layout_;
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  int64_t k_ = 0;  // inputs per sample, fixed at setup
  int64_t m_ = 0;  // samples in the current batch
};

}  // namespace strata
