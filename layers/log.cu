#include "layers/log.h"
#include "layers/neuron_layer.cuh"

namespace strata {

void LogLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  save_input_cuda(bottom, top);
  neuron_forward_cuda(op_, bottom[0]->numel(), bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>());
}

void LogLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cuda(op_, top[0]->numel(), saved_input(top, bottom).device_data<float>(),
                       top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
}

}  // namespace strata
