// ELU (Caffe "ELU"): y = x for x > 0, alpha * (exp(x) - 1) otherwise
// (alpha defaults to 1). May run in place.
#pragma once

#include "layers/neuron_input_layer.h"

namespace strata {

// The formulas, for elu.cpp and elu.cu. With alpha >= 0, y > 0 exactly when
// x > 0, and for x <= 0 dy/dx = alpha * exp(x) = y + alpha (Caffe's form):
// backward reads only the output, so in place costs nothing.
struct ELUOp {
  float alpha;
  STRATA_HOST_DEVICE float forward(float x) const { return x > 0.0f ? x : alpha * expm1f(x); }
  STRATA_HOST_DEVICE float backward(float y, float dy) const { return y > 0.0f ? dy : dy * (y + alpha); }
};

// With alpha < 0 the sign of y no longer tells the side of x, so backward
// reads the input (kept in a copy when in place).
struct ELUFromInputOp {
  float alpha;
  STRATA_HOST_DEVICE float forward(float x) const { return x > 0.0f ? x : alpha * expm1f(x); }
  STRATA_HOST_DEVICE float backward(float x, float dy) const { return x > 0.0f ? dy : dy * alpha * expf(x); }
};

class ELULayer : public InputSavingNeuronLayer {
 public:
  ELULayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in elu.cu
  bool replays_in_a_graph() const override { return true; }

 protected:
  bool backward_reads_input() const override { return alpha_ < 0.0f; }

 private:
  float alpha_;
};

}  // namespace strata
