#include "layers/relu.h"

#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

ReLULayer::ReLULayer(const LayerSpec& spec, const LayerContext& ctx)
    : ReLULayer(spec, ctx, static_cast<float>(spec.node.block("relu_param").get_double("negative_slope", 0.0))) {}

ReLULayer::ReLULayer(const LayerSpec& spec, const LayerContext& ctx, float negative_slope)
    : NeuronLayer(spec, ctx), negative_slope_(negative_slope) {}

LayerSchema ReLULayer::schema() {
  LayerSchema s;
  s.summary = "Rectified linear unit: max(x, 0) + negative_slope * min(x, 0); may run in place";
  s.blocks = {{"relu_param", {"negative_slope", "engine"}}};
  // Piecewise linear: central differences are exact away from the kink at 0,
  // and the generic test keeps Gaussian inputs two steps away from 0.
  LayerExample plain;
  plain.bottom_shapes = {{2, 3, 4}};
  LayerExample leaky = plain;
  leaky.config = "relu_param { negative_slope: 0.2 }";
  s.examples = {plain, leaky};
  return s;
}

void ReLULayer::setup(const BlobVec& bottom, const BlobVec& top) {
  // In place, backward sees y instead of x. sign(y) == sign(x) only when the
  // slope is not negative, so a negative slope needs the original input.
  if (negative_slope_ < 0.0f && top[0] == bottom[0]) {
    fail<ConfigError>(where_at(), ": negative_slope ", negative_slope_,
                      " < 0 cannot run in place (the sign of the input is lost); give the top a "
                      "different name from the bottom");
  }
}

void ReLULayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cpu(ReLUOp{negative_slope_}, bottom[0]->data, top[0]->data);
}

void ReLULayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                             const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cpu(ReLUOp{negative_slope_}, backward_saved(top, bottom), top[0]->diff, bottom[0]->diff);
}

STRATA_REGISTER_LAYER("ReLU", ReLULayer);

}  // namespace strata
