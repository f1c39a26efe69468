#include "layers/elu.h"

#include "framework/layer_registry.h"

namespace strata {

ELULayer::ELULayer(const LayerSpec& spec, const LayerContext& ctx)
    : InputSavingNeuronLayer(spec, ctx), alpha_(static_cast<float>(block("elu_param").get_double("alpha", 1.0))) {}

LayerSchema ELULayer::schema() {
  LayerSchema s;
  s.summary = "Exponential linear unit: x for x > 0, alpha * (exp(x) - 1) otherwise (Caffe's ELU); may run in place";
  s.blocks = {{"elu_param", {"alpha"}}};
  // Kink at 0 (for alpha != 1): Gaussian inputs stay two steps away from 0.
  s.examples = {
      layer_example("", {{2, 3, 4}}),
      layer_example("elu_param { alpha: 0.3 }", {{2, 3, 4}}),
      layer_example("elu_param { alpha: -0.5 }", {{2, 3, 4}}),
  };
  return s;
}

void ELULayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  save_input_cpu(bottom, top);
  neuron_forward_cpu(ELUOp{alpha_}, bottom[0]->numel(), bottom[0]->data.data<float>(), top[0]->data.data<float>());
}

void ELULayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = top[0]->numel();
  const float* dy = top[0]->diff.data<float>();
  float* dx = bottom[0]->diff.data<float>();
  if (backward_reads_input()) {
    neuron_backward_cpu(ELUFromInputOp{alpha_}, n, saved_input(top, bottom).data<float>(), dy, dx);
  } else {
    neuron_backward_cpu(ELUOp{alpha_}, n, top[0]->data.data<float>(), dy, dx);
  }
}

STRATA_REGISTER_LAYER("ELU", ELULayer);

}  // namespace strata
