// Swish (SiLU): y = x * sigmoid(x), a layer written outside strata's tree
// exactly as a built-in one is. The formula is written once, as a functor
// both the CPU and the CUDA code apply (layers/neuron_layer.h); backward
// reads the input, which InputSavingNeuronLayer keeps when it runs in place.
#pragma once

#include "layers/neuron_input_layer.h"

namespace swish {

struct SwishOp {
  STRATA_HOST_DEVICE float sigmoid(float x) const {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
  }
  STRATA_HOST_DEVICE float forward(float x) const { return x * sigmoid(x); }
  // dy/dx = s + x s (1 - s), s = sigmoid(x)
  STRATA_HOST_DEVICE float backward(float x, float dy) const {
    const float s = sigmoid(x);
    return dy * (s + x * s * (1.0f - s));
  }
};

class SwishLayer : public strata::InputSavingNeuronLayer {
 public:
  using InputSavingNeuronLayer::InputSavingNeuronLayer;
  static strata::LayerSchema schema();

  void forward_cpu(const strata::BlobVec& bottom, const strata::BlobVec& top) override;
  void backward_cpu(const strata::BlobVec& top, const std::vector<bool>& propagate_down,
                    const strata::BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in swish.cu, built where strata and this project have CUDA
};

}  // namespace swish
