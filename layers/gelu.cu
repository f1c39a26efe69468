// GELU on the GPU: the functors of gelu.h, element by element.
#include "layers/gelu.h"
#include "layers/neuron_layer.cuh"

namespace strata {

void GELULayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = bottom[0]->numel();
  // In place the input is gone after forward; backward needs it.
  if (top[0] == bottom[0]) {
    cuda::ensure_on_device(input_copy_, bottom[0]->shape(), DType::kF32, device());
    cuda::copy(n, bottom[0]->data.device_data<float>(), input_copy_.device_data<float>());
  }
  const float* x = bottom[0]->data.device_data<float>();
  float* y = top[0]->data.device_data<float>();
  if (approximate_ == Approximate::kTanh) {
    neuron_forward_cuda(GELUTanhOp{}, n, x, y);
  } else {
    neuron_forward_cuda(GELUErfOp{}, n, x, y);
  }
}

void GELULayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = bottom[0]->numel();
  const float* x = saved_input(top, bottom).device_data<float>();
  const float* dy = top[0]->diff.device_data<float>();
  float* dx = bottom[0]->diff.device_data<float>();
  if (approximate_ == Approximate::kTanh) {
    neuron_backward_cuda(GELUTanhOp{}, n, x, dy, dx);
  } else {
    neuron_backward_cuda(GELUErfOp{}, n, x, dy, dx);
  }
}

}  // namespace strata
