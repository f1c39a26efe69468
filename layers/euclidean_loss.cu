#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/euclidean_loss.h"
#include "layers/loss_layer.h"

namespace strata {

struct EuclideanLossLayer::CudaState {
  Tensor diff;     // a - b
  Tensor terms;    // (a - b)^2
  Tensor divisor;  // device scalar: 2 N, for backward
};

namespace {

__global__ void euclidean_forward_kernel(int64_t n, const float* a, const float* b, float* diff, float* terms) {
  STRATA_CUDA_LOOP(i, n) {
    const float d = a[i] - b[i];
    diff[i] = d;
    terms[i] = d * d;
  }
}

// dx = sign * 2 * loss_weight / divisor * (a - b).
__global__ void euclidean_backward_kernel(int64_t n, float sign, const float* loss_weight, const float* divisor,
                                          const float* diff, float* dx) {
  const float s = sign * 2.0f * loss_weight[0] / divisor[0];
  STRATA_CUDA_LOOP(i, n) dx[i] = s * diff[i];
}

}  // namespace

void EuclideanLossLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  const int64_t n = bottom[0]->numel();
  cuda::ensure_on_device(st.diff, {n}, DType::kF32, device());
  cuda::ensure_on_device(st.terms, {n}, DType::kF32, device());
  cuda::ensure_on_device(st.divisor, {1}, DType::kF32, device());
  if (n > 0) {
    euclidean_forward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, bottom[0]->data.device_data<float>(), bottom[1]->data.device_data<float>(), st.diff.device_data<float>(),
        st.terms.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
  cuda::loss_total(n, st.terms.device_data<float>(), nullptr, static_cast<float>(divisor(bottom)),
                   top[0]->data.device_data<float>(), st.divisor.device_data<float>());
}

void EuclideanLossLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                       const BlobVec& bottom) {
  STRATA_CHECK(cuda_ != nullptr, where(), ": backward before forward");
  const int64_t n = bottom[0]->numel();
  for (int k = 0; k < 2; ++k) {
    if (!propagate_down[k] || n == 0) continue;
    euclidean_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, k == 0 ? 1.0f : -1.0f, top[0]->diff.device_data<float>(), cuda_->divisor.device_data<float>(),
        cuda_->diff.device_data<float>(), bottom[k]->diff.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
}

}  // namespace strata
