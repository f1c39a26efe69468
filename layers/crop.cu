// Crop on the GPU: one thread per top element, with the index map of
// layers/crop.h. Backward zeros the bottom gradient, then scatters; every
// top element has its own source, so no two threads write one element.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/crop.h"

namespace strata {

namespace {

__global__ void crop_forward_kernel(CropGeometry g, int64_t n, const float* x, float* y) {
  STRATA_CUDA_LOOP(t, n) y[t] = x[g.source(t)];
}

__global__ void crop_backward_kernel(CropGeometry g, int64_t n, const float* dy, float* dx) {
  STRATA_CUDA_LOOP(t, n) dx[g.source(t)] = dy[t];
}

}  // namespace

void CropLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = top[0]->numel();
  if (n == 0) return;
  crop_forward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, n, bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void CropLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  cuda::fill(bottom[0]->numel(), 0.0f, bottom[0]->diff.device_data<float>());
  const int64_t n = top[0]->numel();
  if (n == 0) return;
  crop_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, n, top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
