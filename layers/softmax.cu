#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/cuda/stored_math.h"
#include "layers/neuron_layer.h"  // check_same_storage
#include "layers/softmax.h"

namespace strata {

// Our own kernels rather than cuDNN's: the same max-subtracted formula as the
// CPU, in place allowed, and any axis without building 4-D descriptors.
void SoftmaxLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  check_same_storage("Softmax forward", {&xt, &yt});
  if (xt.dtype() != DType::kF32) {
    return cuda::softmax_channels_stored(geom_.outer, geom_.channels, geom_.inner, xt.raw_data(), yt.raw_data(),
                                         xt.dtype());
  }
  cuda::softmax_channels(geom_.outer, geom_.channels, geom_.inner, xt.device_data<float>(), yt.device_data<float>(),
                         nullptr, nullptr);
}

void SoftmaxLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                 const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& yt = top[0]->data;
  const Tensor& dyt = top[0]->diff;
  Tensor& dxt = bottom[0]->diff;
  check_same_storage("Softmax backward", {&yt, &dyt, &dxt});
  if (yt.dtype() != DType::kF32) {
    return cuda::softmax_channels_backward_stored(geom_.outer, geom_.channels, geom_.inner, yt.raw_data(),
                                                  dyt.raw_data(), dxt.raw_data(), yt.dtype());
  }
  cuda::softmax_channels_backward(geom_.outer, geom_.channels, geom_.inner, yt.device_data<float>(),
                                  dyt.device_data<float>(), dxt.device_data<float>());
}

}  // namespace strata
