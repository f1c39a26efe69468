#include "layers/threshold.h"

#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

ThresholdLayer::ThresholdLayer(const LayerSpec& spec, const LayerContext& ctx)
    : NeuronLayer(spec, ctx), threshold_(static_cast<float>(block("threshold_param").get_double("threshold", 0.0))) {}

LayerSchema ThresholdLayer::schema() {
  LayerSchema s;
  s.summary = "1 where x > threshold, else 0 (Caffe's Threshold); no gradient; may run in place";
  s.blocks = {{"threshold_param", {"threshold"}}};
  LayerExample zero = layer_example("", {{2, 3, 4}});
  zero.gradient = GradientCheck::kNo;
  LayerExample half = zero;
  half.config = "threshold_param { threshold: 0.5 }";
  s.examples = {zero, half};
  return s;
}

void ThresholdLayer::refuse_gradient(const std::vector<bool>& propagate_down) const {
  if (propagate_down.empty() || !propagate_down[0]) return;
  fail<Error>(where(), ": Threshold has no gradient (a step function; Caffe implements none either), but a "
              "gradient was asked for its bottom '", spec_.bottoms.empty() ? std::string("?") : spec_.bottoms[0],
              "'; set propagate_down: false on this layer, or use Sigmoid for a differentiable step");
}

void ThresholdLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cpu(ThresholdOp{threshold_}, bottom[0]->numel(), bottom[0]->data.data<float>(),
                     top[0]->data.data<float>());
}

void ThresholdLayer::backward_cpu(const BlobVec& /*top*/, const std::vector<bool>& propagate_down,
                                  const BlobVec& /*bottom*/) {
  refuse_gradient(propagate_down);
}

STRATA_REGISTER_LAYER("Threshold", ThresholdLayer);

}  // namespace strata
