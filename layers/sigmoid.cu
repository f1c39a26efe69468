#include "layers/neuron_layer.cuh"
#include "layers/sigmoid.h"

namespace strata {

void SigmoidLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cuda(SigmoidOp{}, bottom[0]->data, top[0]->data);
}

void SigmoidLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                 const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  neuron_backward_cuda(SigmoidOp{}, top[0]->data, top[0]->diff, bottom[0]->diff);
}

}  // namespace strata
