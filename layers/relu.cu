#include "layers/neuron_layer.cuh"
#include "layers/relu.h"

namespace strata {

void ReLULayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cuda(ReLUOp{negative_slope_}, bottom[0]->data, top[0]->data);
}

void ReLULayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cuda(ReLUOp{negative_slope_}, backward_saved(top, bottom), top[0]->diff, bottom[0]->diff);
}

}  // namespace strata
