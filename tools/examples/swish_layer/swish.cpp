#include "swish.h"

#include "framework/plugin_api.h"

namespace swish {

strata::LayerSchema SwishLayer::schema() {
  strata::LayerSchema s;
  s.summary = "Swish (SiLU) x * sigmoid(x), from the example layer library";
  s.examples = {strata::layer_example("", {{2, 3, 4}}), strata::layer_example("", {{4, 5}})};
  return s;
}

void SwishLayer::forward_cpu(const strata::BlobVec& bottom, const strata::BlobVec& top) {
  save_input_cpu(bottom, top);
  strata::neuron_forward_cpu(SwishOp{}, bottom[0]->numel(), bottom[0]->data.data<float>(),
                             top[0]->data.data<float>());
}

void SwishLayer::backward_cpu(const strata::BlobVec& top, const std::vector<bool>& propagate_down,
                              const strata::BlobVec& bottom) {
  if (!propagate_down[0]) return;
  strata::neuron_backward_cpu(SwishOp{}, top[0]->numel(), saved_input(top, bottom).data<float>(),
                              top[0]->diff.data<float>(), bottom[0]->diff.data<float>());
}

STRATA_REGISTER_LAYER("Swish", SwishLayer);

}  // namespace swish

STRATA_PLUGIN();
