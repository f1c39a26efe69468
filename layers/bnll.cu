#include "layers/bnll.h"
#include "layers/neuron_layer.cuh"

namespace strata {

void BNLLLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cuda(BNLLOp{}, bottom[0]->numel(), bottom[0]->data.device_data<float>(),
                      top[0]->data.device_data<float>());
}

void BNLLLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cuda(BNLLOp{}, top[0]->numel(), top[0]->data.device_data<float>(), top[0]->diff.device_data<float>(),
                       bottom[0]->diff.device_data<float>());
}

}  // namespace strata
