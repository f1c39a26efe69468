#include "framework/cuda/math.h"
#include "layers/reshape.h"

namespace strata {

// A device-to-device copy, as on the CPU (top and bottom stay independent blobs).
void ReshapeLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  cuda::copy(bottom[0]->numel(), bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>());
}

void ReshapeLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  cuda::copy(top[0]->numel(), top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
}

}  // namespace strata
