// ReLU (Caffe "ReLU"): y = x for x > 0, negative_slope * x otherwise.
// With negative_slope > 0 it is Caffe's leaky ReLU; LeakyReLULayer reuses it.
#pragma once

#include "framework/layer.h"

namespace strata {

class ReLULayer : public Layer {
 public:
  ReLULayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  bool supports_in_place() const override { return true; }
  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void reshape(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
#ifdef STRATA_WITH_CUDA
  bool has_cuda() const override { return true; }
  void forward_cuda(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                     const BlobVec& bottom) override;
#endif

 protected:
  // For subclasses that read the slope from another block.
  ReLULayer(const LayerSpec& spec, const LayerContext& ctx, float negative_slope);

 private:
  float negative_slope_;
};

}  // namespace strata
