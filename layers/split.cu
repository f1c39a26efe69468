#include "framework/cuda/math.h"
#include "layers/split.h"

namespace strata {

void SplitLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  for (Blob* t : top)
    cuda::copy(bottom[0]->numel(), bottom[0]->data.device_data<float>(), t->data.device_data<float>());
}

void SplitLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = bottom[0]->numel();
  float* dx = bottom[0]->diff.device_data<float>();
  cuda::copy(n, top[0]->diff.device_data<float>(), dx);
  for (size_t i = 1; i < top.size(); ++i) cuda::axpy(n, 1.0f, top[i]->diff.device_data<float>(), dx);
}

}  // namespace strata
