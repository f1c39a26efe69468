// Sigmoid (Caffe "Sigmoid"): y = 1 / (1 + exp(-x)). May run in place.
#pragma once

#include "layers/neuron_layer.h"

namespace strata {

// The formula, for sigmoid.cpp and sigmoid.cu. expf() only ever sees a
// non-positive argument, so it cannot overflow and large |x| saturate
// cleanly to 0 or 1. Backward uses only the output, dx = dy * y * (1 - y),
// so in place is correct.
struct SigmoidOp {
  STRATA_HOST_DEVICE float forward(float x) const {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
  }
  STRATA_HOST_DEVICE float backward(float y, float dy) const { return dy * y * (1.0f - y); }
};

class SigmoidLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  static LayerSchema schema();
  // Backward reads the output only (SigmoidOp).
  BackwardReads backward_reads() const override { return {false, true}; }
  // Blobs stored in bf16 or f16 are taken as they are (the Tensor forms of layers/neuron_layer.h).
  bool takes_storage(DType dtype) const override { return takes_float_storage(dtype); }

  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in sigmoid.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
