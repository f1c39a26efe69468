// ReLU (Caffe "ReLU"): y = x for x > 0, negative_slope * x otherwise.
// With negative_slope > 0 it is Caffe's leaky ReLU; LeakyReLULayer reuses it.
#pragma once

#include "layers/neuron_layer.h"

namespace strata {

// The formula, for relu.cpp and relu.cu. backward() reads the sign of
// `saved`: the output when the slope is not negative (y > 0 exactly when
// x > 0, so it also works in place), else the input.
struct ReLUOp {
  float slope;
  // Both sides computed, then selected: a multiply only under the condition
  // is not if-converted (it could raise a floating-point flag), which left
  // the CPU loops scalar and branching on the sign of random data.
  STRATA_HOST_DEVICE float forward(float x) const {
    const float neg = slope * x;
    return x > 0.0f ? x : neg;
  }
  STRATA_HOST_DEVICE float backward(float saved, float dy) const {
    const float neg = slope * dy;
    return saved > 0.0f ? dy : neg;
  }
};

class ReLULayer : public NeuronLayer {
 public:
  ReLULayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // The sign comes from the output, or the input when the slope is negative (backward_saved).
  BackwardReads backward_reads() const override { return {negative_slope_ < 0.0f, negative_slope_ >= 0.0f}; }
  // Blobs stored in bf16 or f16 are taken as they are (the Tensor forms of layers/neuron_layer.h).
  bool takes_storage(DType dtype) const override { return takes_float_storage(dtype); }
  // In place, the layer before it can apply it (its backward reads the
  // output then); not with a negative slope, whose backward reads the input.
  Epilogue as_epilogue() const override {
    if (negative_slope_ < 0.0f) return {};
    return {Epilogue::Kind::kReLU, negative_slope_};
  }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in relu.cu
  bool replays_in_a_graph() const override { return true; }

 protected:
  // For subclasses that read the slope from another block.
  ReLULayer(const LayerSpec& spec, const LayerContext& ctx, float negative_slope);

 private:
  // What backward reads the sign from (see ReLUOp).
  const Tensor& backward_saved(const BlobVec& top, const BlobVec& bottom) const {
    return negative_slope_ < 0.0f ? bottom[0]->data : top[0]->data;
  }

  float negative_slope_;
};

}  // namespace strata
