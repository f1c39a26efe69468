#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/softmax.h"

namespace strata {

// Our own kernels rather than cuDNN's: the same max-subtracted formula as the
// CPU, in place allowed, and any axis without building 4-D descriptors.
void SoftmaxLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  cuda::softmax_channels(geom_.outer, geom_.channels, geom_.inner, bottom[0]->data.device_data<float>(),
                         top[0]->data.device_data<float>(), nullptr, nullptr);
}

void SoftmaxLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                 const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  cuda::softmax_channels_backward(geom_.outer, geom_.channels, geom_.inner, top[0]->data.device_data<float>(),
                                  top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
}

}  // namespace strata
