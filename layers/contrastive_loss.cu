#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/contrastive_loss.h"
#include "layers/loss_layer.h"

namespace strata {

struct ContrastiveLossLayer::CudaState {
  Tensor diff;     // a - b
  Tensor dist_sq;  // per pair
  Tensor terms;    // per pair: its loss term
  Tensor divisor;  // device scalar (unused by backward: 2 N is known on the host)
};

namespace {

// One thread per pair: the same order of summation as the CPU, in double.
__global__ void contrastive_forward_kernel(int64_t num, int64_t dim, const float* a, const float* b,
                                           const float* label, float margin, int legacy, float* diff,
                                           float* dist_sq, float* terms) {
  STRATA_CUDA_LOOP(j, num) {
    double sq = 0.0;
    for (int64_t c = 0; c < dim; ++c) {
      const int64_t i = j * dim + c;
      const float d = a[i] - b[i];
      diff[i] = d;
      sq += static_cast<double>(d) * d;
    }
    dist_sq[j] = static_cast<float>(sq);
    terms[j] = contrastive_term(static_cast<float>(sq), static_cast<int>(label[j]) != 0, margin, legacy != 0);
  }
}

__global__ void contrastive_backward_kernel(int64_t n, int64_t dim, float sign, const float* loss_weight,
                                            float divisor, const float* label, const float* dist_sq, float margin,
                                            int legacy, const float* diff, float* dx) {
  const float scale = sign * loss_weight[0] / divisor;
  STRATA_CUDA_LOOP(i, n) {
    const int64_t j = i / dim;
    dx[i] = scale * contrastive_grad_factor(dist_sq[j], static_cast<int>(label[j]) != 0, margin, legacy != 0) * diff[i];
  }
}

}  // namespace

void ContrastiveLossLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  cuda::ensure_on_device(st.diff, {num_ * dim_}, DType::kF32, device());
  cuda::ensure_on_device(st.dist_sq, {num_}, DType::kF32, device());
  cuda::ensure_on_device(st.terms, {num_}, DType::kF32, device());
  cuda::ensure_on_device(st.divisor, {1}, DType::kF32, device());
  if (num_ > 0) {
    contrastive_forward_kernel<<<cuda::blocks_for(num_), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        num_, dim_, bottom[0]->data.device_data<float>(), bottom[1]->data.device_data<float>(),
        bottom[2]->data.device_data<float>(), margin_, version_ == Version::kLegacy ? 1 : 0,
        st.diff.device_data<float>(), st.dist_sq.device_data<float>(), st.terms.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
  cuda::loss_total(num_, st.terms.device_data<float>(), nullptr, static_cast<float>(divisor()),
                   top[0]->data.device_data<float>(), st.divisor.device_data<float>());
}

void ContrastiveLossLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                         const BlobVec& bottom) {
  STRATA_CHECK(cuda_ != nullptr, where(), ": backward before forward");
  const int64_t n = num_ * dim_;
  for (int k = 0; k < 2; ++k) {
    if (!propagate_down[k] || n == 0) continue;
    contrastive_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, dim_, k == 0 ? 1.0f : -1.0f, top[0]->diff.device_data<float>(), static_cast<float>(divisor()),
        bottom[2]->data.device_data<float>(), cuda_->dist_sq.device_data<float>(), margin_,
        version_ == Version::kLegacy ? 1 : 0, cuda_->diff.device_data<float>(), bottom[k]->diff.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
}

}  // namespace strata
