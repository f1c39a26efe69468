#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/tanh.h"

namespace strata {
namespace {

__global__ void tanh_forward(int64_t n, const float* x, float* y) {
  STRATA_CUDA_LOOP(i, n) y[i] = tanhf(x[i]);
}

__global__ void tanh_backward(int64_t n, const float* y, const float* dy, float* dx) {
  STRATA_CUDA_LOOP(i, n) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

}  // namespace

void TanHLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = bottom[0]->numel();
  if (n == 0) return;
  tanh_forward<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void TanHLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = top[0]->numel();
  if (n == 0) return;
  tanh_backward<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, top[0]->data.device_data<float>(), top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
