#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/sigmoid.h"

namespace strata {
namespace {

// exp() only sees a non-positive argument (as on the CPU), so large |x|
// saturate cleanly to 0 or 1.
__global__ void sigmoid_forward(int64_t n, const float* x, float* y) {
  STRATA_CUDA_LOOP(i, n) {
    const float v = x[i];
    if (v >= 0.0f) {
      y[i] = 1.0f / (1.0f + expf(-v));
    } else {
      const float e = expf(v);
      y[i] = e / (1.0f + e);
    }
  }
}

__global__ void sigmoid_backward(int64_t n, const float* y, const float* dy, float* dx) {
  STRATA_CUDA_LOOP(i, n) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

}  // namespace

void SigmoidLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = bottom[0]->numel();
  if (n == 0) return;
  sigmoid_forward<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void SigmoidLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                 const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = top[0]->numel();
  if (n == 0) return;
  sigmoid_backward<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, top[0]->data.device_data<float>(), top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
