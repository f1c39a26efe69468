#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/sigmoid_cross_entropy_loss.h"

namespace strata {

struct SigmoidCrossEntropyLossLayer::CudaState {
  Tensor terms;    // per element: its loss, 0 when ignored
  Tensor valid;    // per element: 1 when its target counts
  Tensor divisor;  // device scalar, for backward
};

namespace {

__global__ void sce_forward_kernel(int64_t n, const float* x, const float* t, int has_ignore, float ignore,
                                   float* terms, float* valid) {
  STRATA_CUDA_LOOP(i, n) {
    const bool skip = has_ignore && t[i] == ignore;
    terms[i] = skip ? 0.0f : sigmoid_cross_entropy(x[i], t[i]);
    valid[i] = skip ? 0.0f : 1.0f;
  }
}

__global__ void sce_backward_kernel(int64_t n, const float* x, const float* t, int has_ignore, float ignore,
                                    const float* loss_weight, const float* divisor, float* dx) {
  const float scale = loss_weight[0] / divisor[0];
  STRATA_CUDA_LOOP(i, n) {
    dx[i] = has_ignore && t[i] == ignore ? 0.0f : sigmoid_cross_entropy_grad(x[i], t[i]) * scale;
  }
}

}  // namespace

void SigmoidCrossEntropyLossLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  const int64_t n = bottom[0]->numel();
  cuda::ensure_on_device(st.terms, {n}, DType::kF32, device());
  cuda::ensure_on_device(st.valid, {n}, DType::kF32, device());
  cuda::ensure_on_device(st.divisor, {1}, DType::kF32, device());
  if (n > 0) {
    sce_forward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, bottom[0]->data.device_data<float>(), bottom[1]->data.device_data<float>(), ignore_label_ ? 1 : 0,
        ignore_label_ ? static_cast<float>(*ignore_label_) : 0.0f, st.terms.device_data<float>(),
        st.valid.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
  const bool by_valid = normalization_ == LossNormalization::kValid;
  cuda::loss_total(n, st.terms.device_data<float>(), by_valid ? st.valid.device_data<float>() : nullptr,
                   static_cast<float>(fixed_divisor(bottom)), top[0]->data.device_data<float>(),
                   st.divisor.device_data<float>());
}

void SigmoidCrossEntropyLossLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                                 const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  STRATA_CHECK(cuda_ != nullptr, where(), ": backward before forward");
  const int64_t n = bottom[0]->numel();
  if (n == 0) return;
  sce_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, bottom[0]->data.device_data<float>(), bottom[1]->data.device_data<float>(), ignore_label_ ? 1 : 0,
      ignore_label_ ? static_cast<float>(*ignore_label_) : 0.0f, top[0]->diff.device_data<float>(),
      cuda_->divisor.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
