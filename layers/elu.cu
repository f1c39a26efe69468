#include "layers/elu.h"
#include "layers/neuron_layer.cuh"

namespace strata {

void ELULayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  save_input_cuda(bottom, top);
  neuron_forward_cuda(ELUOp{alpha_}, bottom[0]->numel(), bottom[0]->data.device_data<float>(),
                      top[0]->data.device_data<float>());
}

void ELULayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = top[0]->numel();
  const float* dy = top[0]->diff.device_data<float>();
  float* dx = bottom[0]->diff.device_data<float>();
  if (backward_reads_input()) {
    neuron_backward_cuda(ELUFromInputOp{alpha_}, n, saved_input(top, bottom).device_data<float>(), dy, dx);
  } else {
    neuron_backward_cuda(ELUOp{alpha_}, n, top[0]->data.device_data<float>(), dy, dx);
  }
}

}  // namespace strata
