#include "layers/neuron_layer.cuh"
#include "layers/relu.h"

namespace strata {

void ReLULayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cuda(ReLUOp{negative_slope_}, bottom[0]->numel(), bottom[0]->data.device_data<float>(),
                      top[0]->data.device_data<float>());
}

void ReLULayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cuda(ReLUOp{negative_slope_}, top[0]->numel(), backward_saved(top, bottom).device_data<float>(),
                       top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
}

}  // namespace strata
