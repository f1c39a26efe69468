#include "layers/neuron_layer.cuh"
#include "layers/threshold.h"

namespace strata {

void ThresholdLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  neuron_forward_cuda(ThresholdOp{threshold_}, bottom[0]->numel(), bottom[0]->data.device_data<float>(),
                      top[0]->data.device_data<float>());
}

void ThresholdLayer::backward_cuda(const BlobVec& /*top*/, const std::vector<bool>& propagate_down,
                                   const BlobVec& /*bottom*/) {
  refuse_gradient(propagate_down);
}

}  // namespace strata
