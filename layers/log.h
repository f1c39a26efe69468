// Log (Caffe "Log"): y = log_base(shift + scale * x), natural log when base
// is -1 (the default). May run in place (then forward keeps a copy of x,
// which backward reads).
#pragma once

#include "layers/neuron_input_layer.h"

namespace strata {

// The formula, for log.cpp and log.cu, in Caffe's form
// y = ln(shift + scale * x) * base_scale, base_scale = 1 / ln(base);
// dy/dx = scale * base_scale / (shift + scale * x), from the input x.
struct LogOp {
  float scale, shift, base_scale;
  STRATA_HOST_DEVICE float forward(float x) const { return logf(shift + scale * x) * base_scale; }
  STRATA_HOST_DEVICE float backward(float x, float dy) const { return dy * scale * base_scale / (shift + scale * x); }
};

class LogLayer : public InputSavingNeuronLayer {
 public:
  LogLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in log.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  LogOp op_;
};

}  // namespace strata
