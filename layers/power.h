// Power (Caffe "Power"): y = (shift + scale * x)^power. May run in place
// (then forward keeps a copy of x, which backward reads).
#pragma once

#include "layers/neuron_input_layer.h"

namespace strata {

// The formula, for power.cpp and power.cu. backward() takes the input x:
// dy/dx = power * scale * (shift + scale * x)^(power - 1), and exactly 0
// when power * scale is 0 (Caffe's rule; the formula would give 0 * inf at
// shift + scale * x == 0).
struct PowerOp {
  float power, scale, shift;
  STRATA_HOST_DEVICE float forward(float x) const { return powf(shift + scale * x, power); }
  STRATA_HOST_DEVICE float backward(float x, float dy) const {
    const float diff_scale = power * scale;
    if (diff_scale == 0.0f) return 0.0f;
    if (power == 1.0f) return dy * diff_scale;
    return dy * diff_scale * powf(shift + scale * x, power - 1.0f);
  }
};

class PowerLayer : public InputSavingNeuronLayer {
 public:
  PowerLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in power.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  PowerOp op_;
};

}  // namespace strata
