#include "layers/power.h"

#include "framework/layer_registry.h"

namespace strata {

PowerLayer::PowerLayer(const LayerSpec& spec, const LayerContext& ctx) : InputSavingNeuronLayer(spec, ctx) {
  const ConfigNode& p = block("power_param");
  op_ = PowerOp{static_cast<float>(p.get_double("power", 1.0)), static_cast<float>(p.get_double("scale", 1.0)),
                static_cast<float>(p.get_double("shift", 0.0))};
}

LayerSchema PowerLayer::schema() {
  LayerSchema s;
  s.summary = "(shift + scale * x)^power, elementwise (Caffe's Power); may run in place";
  s.blocks = {{"power_param", {"power", "scale", "shift"}}};
  LayerExample root = layer_example("power_param { power: 0.5 scale: 2 shift: 0.5 }", {{2, 3, 4}});
  root.inputs = {InputKind::kPositive};  // a fractional power needs shift + scale * x > 0
  s.examples = {
      layer_example("", {{2, 3, 4}}),
      layer_example("power_param { power: 2 scale: 0.5 shift: 1 }", {{2, 3, 4}}),
      layer_example("power_param { power: 3 scale: -1.5 shift: 0.2 }", {{2, 3, 4}}),
      root,
  };
  return s;
}

void PowerLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  save_input_cpu(bottom, top);
  neuron_forward_cpu(op_, bottom[0]->numel(), bottom[0]->data.data<float>(), top[0]->data.data<float>());
}

void PowerLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cpu(op_, top[0]->numel(), saved_input(top, bottom).data<float>(), top[0]->diff.data<float>(),
                      bottom[0]->diff.data<float>());
}

STRATA_REGISTER_LAYER("Power", PowerLayer);

}  // namespace strata
