#include "layers/exp.h"

#include <cmath>

#include "framework/error.h"
#include "framework/layer_registry.h"

namespace strata {

double read_log_base(const ConfigNode& param, const std::string& block_name, const std::string& where) {
  const double base = param.get_double("base", -1.0);
  if (base != -1.0 && !(base > 0.0)) {
    fail<ConfigError>(where, " at ", param.find("base")->loc().str(), ": ", block_name, ".base ", base,
                      " must be positive, or -1 for e (the default)");
  }
  return base;
}

ExpLayer::ExpLayer(const LayerSpec& spec, const LayerContext& ctx) : NeuronLayer(spec, ctx) {
  const ConfigNode& p = block("exp_param");
  const double base = read_log_base(p, "exp_param", where());
  const double scale = p.get_double("scale", 1.0), shift = p.get_double("shift", 0.0);
  const double log_base = base == -1.0 ? 1.0 : std::log(base);
  op_ = ExpOp{static_cast<float>(log_base * scale), static_cast<float>(std::exp(log_base * shift))};
}

LayerSchema ExpLayer::schema() {
  LayerSchema s;
  s.summary = "base^(shift + scale * x), elementwise, base e by default (Caffe's Exp); may run in place";
  s.blocks = {{"exp_param", {"base", "scale", "shift"}}};
  s.examples = {
      layer_example("", {{2, 3, 4}}),
      layer_example("exp_param { base: 2 scale: 0.5 shift: 1 }", {{2, 3, 4}}),
      layer_example("exp_param { base: -1 scale: -1.5 shift: -0.5 }", {{2, 3, 4}}),
  };
  return s;
}

void ExpLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cpu(op_, bottom[0]->numel(), bottom[0]->data.data<float>(), top[0]->data.data<float>());
}

void ExpLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cpu(op_, top[0]->numel(), top[0]->data.data<float>(), top[0]->diff.data<float>(),
                      bottom[0]->diff.data<float>());
}

STRATA_REGISTER_LAYER("Exp", ExpLayer);

}  // namespace strata
