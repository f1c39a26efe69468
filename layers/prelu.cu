// PReLU on the GPU: elementwise with layers/prelu.h's formulas; the slope
// gradient is a per-channel sum of dy * min(x, 0) (cuda::channel_sums).
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/prelu.h"

namespace strata {

namespace {

__global__ void prelu_forward_kernel(PReLUGeometry g, int64_t n, const float* x, const float* a, float* y) {
  STRATA_CUDA_LOOP(k, n) y[k] = g.forward(k, x[k], a);
}

__global__ void prelu_negative_part_kernel(int64_t n, const float* x, float* neg) {
  STRATA_CUDA_LOOP(k, n) neg[k] = x[k] <= 0.0f ? x[k] : 0.0f;
}

__global__ void prelu_backward_kernel(PReLUGeometry g, int64_t n, const float* x, const float* dy, const float* a,
                                      float* dx) {
  STRATA_CUDA_LOOP(k, n) dx[k] = g.backward(k, x[k], dy[k], a);
}

}  // namespace

void PReLULayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = bottom[0]->numel();
  if (top[0] == bottom[0]) {
    cuda::ensure_on_device(x_copy_, bottom[0]->shape(), DType::kF32, device());
    cuda::copy(n, bottom[0]->data.device_data<float>(), x_copy_.device_data<float>());
  }
  if (n == 0) return;
  prelu_forward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, n, bottom[0]->data.device_data<float>(), param(0).data.device_data<float>(),
      top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void PReLULayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  const int64_t n = bottom[0]->numel();
  const float* x = top[0] == bottom[0] ? x_copy_.device_data<float>() : bottom[0]->data.device_data<float>();
  const float* dy = top[0]->diff.device_data<float>();
  // The slope gradient first: in place, dx below overwrites dy.
  cuda::ensure_on_device(neg_, bottom[0]->shape(), DType::kF32, device());
  if (n > 0) {
    prelu_negative_part_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, x, neg_.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
  cuda::channel_sums(outer_, geom_.channels, geom_.inner, dy, neg_.device_data<float>(), 1.0f,
                     param(0).diff.device_data<float>());
  if (!propagate_down[0] || n == 0) return;
  prelu_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, n, x, dy, param(0).data.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
