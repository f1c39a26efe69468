#include "layers/bnll.h"

#include "framework/layer_registry.h"

namespace strata {

LayerSchema BNLLLayer::schema() {
  LayerSchema s;
  s.summary = "log(1 + exp(x)) (softplus), elementwise and stable for large |x| (Caffe's BNLL); may run in place";
  s.examples = {layer_example("", {{2, 3, 4}})};
  return s;
}

void BNLLLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cpu(BNLLOp{}, bottom[0]->numel(), bottom[0]->data.data<float>(), top[0]->data.data<float>());
}

void BNLLLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cpu(BNLLOp{}, top[0]->numel(), top[0]->data.data<float>(), top[0]->diff.data<float>(),
                      bottom[0]->diff.data<float>());
}

STRATA_REGISTER_LAYER("BNLL", BNLLLayer);

}  // namespace strata
