#include "layers/log.h"

#include <cmath>

#include "framework/error.h"
#include "framework/layer_registry.h"
#include "layers/exp.h"

namespace strata {

LogLayer::LogLayer(const LayerSpec& spec, const LayerContext& ctx) : InputSavingNeuronLayer(spec, ctx) {
  const ConfigNode& p = block("log_param");
  const double base = read_log_base(p, "log_param", where());
  if (base == 1.0) {
    fail<ConfigError>(where(), " at ", p.find("base")->loc().str(),
                      ": log_param.base 1 has no logarithm (ln 1 = 0); use another base, or -1 for e");
  }
  const double base_scale = base == -1.0 ? 1.0 : 1.0 / std::log(base);
  op_ = LogOp{static_cast<float>(p.get_double("scale", 1.0)), static_cast<float>(p.get_double("shift", 0.0)),
              static_cast<float>(base_scale)};
}

LayerSchema LogLayer::schema() {
  LayerSchema s;
  s.summary = "log_base(shift + scale * x), elementwise, natural log by default (Caffe's Log); may run in place";
  s.blocks = {{"log_param", {"base", "scale", "shift"}}};
  LayerExample natural = layer_example("", {{2, 3, 4}});
  natural.inputs = {InputKind::kPositive};  // the log needs shift + scale * x > 0
  LayerExample base10 = natural;
  base10.config = "log_param { base: 10 scale: 2 shift: 0.5 }";
  LayerExample base2 = natural;
  base2.config = "log_param { base: 2 }";
  s.examples = {natural, base10, base2};
  return s;
}

void LogLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  save_input_cpu(bottom, top);
  neuron_forward_cpu(op_, bottom[0]->numel(), bottom[0]->data.data<float>(), top[0]->data.data<float>());
}

void LogLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cpu(op_, top[0]->numel(), saved_input(top, bottom).data<float>(), top[0]->diff.data<float>(),
                      bottom[0]->diff.data<float>());
}

STRATA_REGISTER_LAYER("Log", LogLayer);

}  // namespace strata
