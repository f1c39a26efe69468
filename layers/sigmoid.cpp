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
  neuron_forward_cpu(SigmoidOp{}, bottom[0]->data, top[0]->data);
}

void SigmoidLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                                const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cpu(SigmoidOp{}, top[0]->data, top[0]->diff, bottom[0]->diff);
}

STRATA_REGISTER_LAYER("Sigmoid", SigmoidLayer);

}  // namespace strata
