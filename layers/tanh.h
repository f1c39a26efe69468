// Hyperbolic tangent (Caffe "TanH"). May run in place.
#pragma once

#include "layers/neuron_layer.h"

namespace strata {

// The formula, for tanh.cpp and tanh.cu. Backward uses only the output,
// dx = dy * (1 - y^2), so in place is correct.
struct TanHOp {
  STRATA_HOST_DEVICE float forward(float x) const { return tanhf(x); }
  STRATA_HOST_DEVICE float backward(float y, float dy) const { return dy * (1.0f - y * y); }
};

class TanHLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  static LayerSchema schema();
  // Backward reads the output only (TanHOp).
  BackwardReads backward_reads() const override { return {false, true}; }
  // Blobs stored in bf16 or f16 are taken as they are (the Tensor forms of layers/neuron_layer.h).
  bool takes_storage(DType dtype) const override { return takes_float_storage(dtype); }

  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in tanh.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
