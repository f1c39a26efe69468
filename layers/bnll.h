// BNLL (Caffe "BNLL", binomial normal log likelihood): y = log(1 + exp(x)),
// i.e. softplus, computed without overflow. May run in place.
#pragma once

#include "layers/neuron_layer.h"

namespace strata {

// The formula, for bnll.cpp and bnll.cu. dy/dx = sigmoid(x), and from
// y = log(1 + e^x) it is 1 - e^(-y) = -expm1(-y): backward needs only the
// output (so in place is free), and expm1 keeps it exact where y is tiny.
struct BNLLOp {
  STRATA_HOST_DEVICE float forward(float x) const {
    return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
  }
  STRATA_HOST_DEVICE float backward(float y, float dy) const { return -dy * expm1f(-y); }
};

class BNLLLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  static LayerSchema schema();

  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in bnll.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
