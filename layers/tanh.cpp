#include "layers/tanh.h"

#include "framework/layer_registry.h"

namespace strata {

LayerSchema TanHLayer::schema() {
  LayerSchema s;
  s.summary = "Hyperbolic tangent; may run in place";
  s.blocks = {{"tanh_param", {"engine"}}};  // engine accepted for Caffe files, ignored
  LayerExample ex;
  ex.bottom_shapes = {{2, 3, 4}};
  s.examples = {ex};
  return s;
}

void TanHLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cpu(TanHOp{}, bottom[0]->data, top[0]->data);
}

void TanHLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down,
                             const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cpu(TanHOp{}, top[0]->data, top[0]->diff, bottom[0]->diff);
}

STRATA_REGISTER_LAYER("TanH", TanHLayer);

}  // namespace strata
