// GELU on the GPU: the functors of gelu.h, element by element.
#include "layers/gelu.h"
#include "layers/neuron_layer.cuh"

namespace strata {

void GELULayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  // In place the input is gone after forward; backward needs it (stored as the blob is).
  if (top[0] == bottom[0]) {
    cuda::ensure_on_device(input_copy_, bottom[0]->shape(), bottom[0]->data.dtype(), device());
    input_copy_.copy_from(bottom[0]->data);  // queued on the compute stream
  }
  const Tensor& x = bottom[0]->data;
  Tensor& y = top[0]->data;
  if (approximate_ == Approximate::kTanh) {
    neuron_forward_cuda(GELUTanhOp{}, x, y);
  } else {
    neuron_forward_cuda(GELUErfOp{}, x, y);
  }
}

void GELULayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Tensor& x = saved_input(top, bottom);
  const Tensor& dy = top[0]->diff;
  Tensor& dx = bottom[0]->diff;
  if (approximate_ == Approximate::kTanh) {
    neuron_backward_cuda(GELUTanhOp{}, x, dy, dx);
  } else {
    neuron_backward_cuda(GELUErfOp{}, x, dy, dx);
  }
}

}  // namespace strata
