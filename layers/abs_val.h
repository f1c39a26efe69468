// AbsVal (Caffe "AbsVal"): y = |x|, dy/dx = sign(x) (0 at 0). May run in
// place, which Caffe refuses: forward then keeps a copy of x for the sign.
#pragma once

#include "layers/neuron_input_layer.h"

namespace strata {

// The formula, for abs_val.cpp and abs_val.cu. backward() takes the input x.
struct AbsValOp {
  STRATA_HOST_DEVICE float forward(float x) const { return fabsf(x); }
  STRATA_HOST_DEVICE float backward(float x, float dy) const { return x > 0.0f ? dy : (x < 0.0f ? -dy : 0.0f); }
};

class AbsValLayer : public InputSavingNeuronLayer {
 public:
  using InputSavingNeuronLayer::InputSavingNeuronLayer;
  static LayerSchema schema();

  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in abs_val.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
