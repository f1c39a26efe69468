// TokenPool on the GPU: one thread per output value (forward) and per input
// value (backward), summing tokens in the CPU's order.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/token_pool.h"

namespace strata {
namespace {

__global__ void token_pool_forward(int64_t n, int64_t t, int64_t d, int mean, const float* x, float* y) {
  STRATA_CUDA_LOOP(i, n * d) {
    const int64_t s = i / d, j = i - s * d;
    const float* xs = x + s * t * d + j;
    if (!mean) {
      y[i] = xs[0];
      continue;
    }
    float sum = 0.0f;
    for (int64_t k = 0; k < t; ++k) sum += xs[k * d];
    y[i] = sum * (1.0f / static_cast<float>(t));
  }
}

__global__ void token_pool_backward(int64_t n, int64_t t, int64_t d, int mean, const float* dy, float* dx) {
  STRATA_CUDA_LOOP(i, n * t * d) {
    const int64_t j = i % d;
    const int64_t k = (i / d) % t;
    const int64_t s = i / (t * d);
    const float g = dy[s * d + j];
    dx[i] = mean ? g * (1.0f / static_cast<float>(t)) : (k == 0 ? g : 0.0f);
  }
}

}  // namespace

void TokenPoolLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t total = n_ * d_;
  if (total == 0) return;
  token_pool_forward<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n_, t_, d_, pool_ == Pool::kMean ? 1 : 0, bottom[0]->data.device_data<float>(),
      top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void TokenPoolLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                   const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t total = n_ * t_ * d_;
  if (total == 0) return;
  token_pool_backward<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n_, t_, d_, pool_ == Pool::kMean ? 1 : 0, top[0]->diff.device_data<float>(),
      bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
