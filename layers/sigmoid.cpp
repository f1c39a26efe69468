#include "layers/sigmoid.h"

#include "framework/layer_registry.h"

namespace strata {

LayerSchema SigmoidLayer::schema() {
  LayerSchema s;
  s.summary = "Logistic sigmoid 1 / (1 + exp(-x)), stable for large |x|; may run in place";
  s.blocks = {{"sigmoid_param", {"engine"}}};  // engine accepted for Caffe files, ignored
  LayerExample ex;
  ex.bottom_shapes = {{2, 3, 4}};
  s.examples = {ex};
  return s;
}

void SigmoidLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cpu(SigmoidOp{}, bottom[0]->numel(), bottom[0]->data.data<float>(), top[0]->data.data<float>());
}

void SigmoidLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cpu(SigmoidOp{}, top[0]->numel(), top[0]->data.data<float>(), top[0]->diff.data<float>(),
                      bottom[0]->diff.data<float>());
}

STRATA_REGISTER_LAYER("Sigmoid", SigmoidLayer);

}  // namespace strata
