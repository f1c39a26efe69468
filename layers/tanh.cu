#include "layers/neuron_layer.cuh"
#include "layers/tanh.h"

namespace strata {

void TanHLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cuda(TanHOp{}, bottom[0]->data, top[0]->data);
}

void TanHLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cuda(TanHOp{}, top[0]->data, top[0]->diff, bottom[0]->diff);
}

}  // namespace strata
