// Exp (Caffe "Exp"): y = base^(shift + scale * x), base e when base is -1
// (the default). May run in place.
#pragma once

#include "layers/neuron_layer.h"

namespace strata {

// The formula, for exp.cpp and exp.cu, in Caffe's form
// y = outer_scale * exp(inner_scale * x), inner_scale = ln(base) * scale,
// outer_scale = base^shift. dy/dx = inner_scale * y: backward needs only
// the output.
struct ExpOp {
  float inner_scale, outer_scale;
  STRATA_HOST_DEVICE float forward(float x) const { return outer_scale * expf(inner_scale * x); }
  STRATA_HOST_DEVICE float backward(float y, float dy) const { return dy * y * inner_scale; }
};

class ExpLayer : public NeuronLayer {
 public:
  ExpLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  void forward_cpu(const BlobVec& bottom, const BlobVec& top) override;
  void backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                    const BlobVec& bottom) override;
  STRATA_CUDA_METHODS;  // in exp.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  ExpOp op_;
};

// Reads `base` of exp_param or log_param: -1 (e) or > 0, else a ConfigError
// naming the layer and the line. Shared with LogLayer.
double read_log_base(const ConfigNode& param, const std::string& block_name, const std::string& where);

}  // namespace strata
