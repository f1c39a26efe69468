// Sigmoid (Caffe "Sigmoid"): y = 1 / (1 + exp(-x)). May run in place.
#pragma once

#include "framework/layer.h"

namespace strata {

class SigmoidLayer : public Layer {
 public:
  using Layer::Layer;
  static LayerSchema schema();

  bool supports_in_place() const override { return true; }
  void setup(const BlobVec& /*bottom*/, const BlobVec& /*top*/) override {}
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  // Uses only the output: dx = dy * y * (1 - y), so in-place is correct.
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
#ifdef STRATA_WITH_CUDA
  bool has_cuda() const override { return true; }
  void forward_cuda(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                     const BlobVec& bottom) override;
#endif
};

}  // namespace strata
