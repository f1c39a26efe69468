// Threshold (Caffe "Threshold"): y = 1 where x > threshold, else 0. A step
// function has no useful gradient, and Caffe implements none: this layer
// takes no gradient to its bottom (can_backward_to() is false, as for
// Accuracy), and being asked for one is an error. May run in place.
#pragma once

#include "layers/neuron_layer.h"

namespace strata {

// The formula, for threshold.cpp and threshold.cu. NaN is not above any
// threshold, so it gives 0.
struct ThresholdOp {
  float threshold;
  STRATA_HOST_DEVICE float forward(float x) const { return x > threshold ? 1.0f : 0.0f; }
};

class ThresholdLayer : public NeuronLayer {
 public:
  ThresholdLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  bool can_backward_to(int /*bottom_index*/) const override { return false; }
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  // Nothing without propagate_down; an Error with it.
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in threshold.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  void refuse_gradient(const std::vector<bool>& propagate_down) const;

  float threshold_;
};

}  // namespace strata
