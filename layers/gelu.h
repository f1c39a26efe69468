// GELU (PyTorch F.gelu): y = x * Phi(x), Phi the standard normal CDF, exact
// (erf) by default or torch's tanh approximation with `approximate: TANH`.
// May run in place: then forward keeps a copy of the input for backward.
#pragma once

#include "layers/neuron_layer.h"

namespace strata {

// The formulas, for gelu.cpp and gelu.cu. backward() takes the input x.
struct GELUErfOp {
  static constexpr float kInvSqrt2 = 0.70710678118654752f;
  static constexpr float kInvSqrt2Pi = 0.39894228040143268f;
  STRATA_HOST_DEVICE float forward(float x) const { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }
  STRATA_HOST_DEVICE float backward(float x, float dy) const {
    return dy * (0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x));
  }
};

struct GELUTanhOp {
  static constexpr float kSqrt2OverPi = 0.79788456080286536f;
  static constexpr float kTanhCoeff = 0.044715f;
  STRATA_HOST_DEVICE float forward(float x) const {
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kTanhCoeff * x * x * x)));
  }
  STRATA_HOST_DEVICE float backward(float x, float dy) const {
    const float t = tanhf(kSqrt2OverPi * (x + kTanhCoeff * x * x * x));
    // (1 - t) (1 + t) rather than 1 - t^2: exact 0 once tanh saturates, so a
    // huge |x| times it stays 0 instead of inf * 0.
    const float sech2 = (1.0f - t) * (1.0f + t);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kTanhCoeff * x * x);
    const float tail = sech2 == 0.0f ? 0.0f : 0.5f * x * sech2 * du;
    return dy * (0.5f * (1.0f + t) + tail);
  }
};

class GELULayer : public NeuronLayer {
 public:
  GELULayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // What backward reads: the input (or its copy, in place); never the output.
  BackwardReads backward_reads() const override { return {true, false}; }
  // Blobs stored in bf16 or f16 are taken as they are (the Tensor forms of layers/neuron_layer.h).
  bool takes_storage(DType dtype) const override { return takes_float_storage(dtype); }

  STRATA_CPU_METHODS;

 private:
  enum class Approximate { kNone, kTanh };

  // The input backward reads: the bottom, or its copy when in place, in the
  // blob's dtype.
  const Tensor& saved_input(const BlobVec& top, const BlobVec& bottom) const {
    return top[0] == bottom[0] ? input_copy_ : bottom[0]->data;
  }

  Approximate approximate_;
  Tensor input_copy_;  // the input, kept only when running in place, stored as the blob is

 public:
  STRATA_CUDA_METHODS;  // in gelu.cu
  bool replays_in_a_graph() const override { return true; }
};

}  // namespace strata
