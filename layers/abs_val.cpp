#include "layers/abs_val.h"

#include "framework/layer_registry.h"

namespace strata {

LayerSchema AbsValLayer::schema() {
  LayerSchema s;
  s.summary = "Absolute value |x|, elementwise (Caffe's AbsVal); may run in place";
  // Kink at 0: the generic test keeps Gaussian inputs two steps away from 0.
  s.examples = {layer_example("", {{2, 3, 4}})};
  return s;
}

void AbsValLayer::forward_cpu(const BlobVec& bottom, const BlobVec& top) {
  save_input_cpu(bottom, top);
  neuron_forward_cpu(AbsValOp{}, bottom[0]->numel(), bottom[0]->data.data<float>(), top[0]->data.data<float>());
}

void AbsValLayer::backward_cpu(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cpu(AbsValOp{}, top[0]->numel(), saved_input(top, bottom).data<float>(), top[0]->diff.data<float>(),
                      bottom[0]->diff.data<float>());
}

STRATA_REGISTER_LAYER("AbsVal", AbsValLayer);

}  // namespace strata
