#include "layers/neuron_layer.cuh"
#include "swish.h"

namespace swish {

void SwishLayer::forward_cuda(const strata::BlobVec& bottom, const strata::BlobVec& top) {
  save_input_cuda(bottom, top);
  strata::neuron_forward_cuda(SwishOp{}, bottom[0]->numel(), bottom[0]->data.device_data<float>(),
                              top[0]->data.device_data<float>());
}

void SwishLayer::backward_cuda(const strata::BlobVec& top, const std::vector<bool>& propagate_down,
                               const strata::BlobVec& bottom) {
  if (!propagate_down[0]) return;
  strata::neuron_backward_cuda(SwishOp{}, top[0]->numel(), saved_input(top, bottom).device_data<float>(),
                               top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
}

}  // namespace swish
