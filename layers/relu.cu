#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/relu.h"

namespace strata {
namespace {

__global__ void relu_forward(int64_t n, float slope, const float* x, float* y) {
  STRATA_CUDA_LOOP(i, n) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : slope * v;
  }
}

__global__ void relu_backward(int64_t n, float slope, const float* sign_src, const float* dy, float* dx) {
  STRATA_CUDA_LOOP(i, n) dx[i] = sign_src[i] > 0.0f ? dy[i] : slope * dy[i];
}

}  // namespace

void ReLULayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = bottom[0]->numel();
  if (n == 0) return;
  relu_forward<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, negative_slope_, bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void ReLULayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = top[0]->numel();
  if (n == 0) return;
  // As on the CPU: the output's sign equals the input's unless the slope is
  // negative (which setup() forbids in place).
  const float* sign_src = negative_slope_ < 0.0f ? bottom[0]->data.device_data<float>() : top[0]->data.device_data<float>();
  relu_backward<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, negative_slope_, sign_src, top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
