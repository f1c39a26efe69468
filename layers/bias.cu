#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/bias.h"

namespace strata {

namespace {

// x viewed as [outer, dim, inner]; y may equal x.
__global__ void bias_forward_kernel(int64_t total, int64_t dim, int64_t inner, const float* x, const float* b,
                                    float* y) {
  STRATA_CUDA_LOOP(k, total) y[k] = x[k] + b[(k / inner) % dim];
}

}  // namespace

void BiasLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t total = outer_ * dim_ * inner_;
  if (total == 0) return;
  bias_forward_kernel<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      total, dim_, inner_, bottom[0]->data.device_data<float>(), bias_blob(bottom).data.device_data<float>(),
      top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void BiasLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  const float* dy = top[0]->diff.device_data<float>();
  // The bias gradient first: in place, dx is dy's own buffer.
  if (bottom.size() > 1) {
    if (propagate_down[1]) cuda::channel_sums(outer_, dim_, inner_, dy, nullptr, 0.0f, bottom[1]->diff.device_data<float>());
  } else {
    cuda::channel_sums(outer_, dim_, inner_, dy, nullptr, 1.0f, param(0).diff.device_data<float>());
  }
  if (propagate_down[0]) cuda::copy(bottom[0]->numel(), dy, bottom[0]->diff.device_data<float>());
}

}  // namespace strata
