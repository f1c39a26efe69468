#include <string>

#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/loss_layer.h"
#include "layers/multinomial_logistic_loss.h"

namespace strata {

struct MultinomialLogisticLossLayer::CudaState {
  Tensor labels;   // i32 per sample: class index, -1 = invalid (flagged)
  Tensor terms;    // per sample: -log max(p, threshold)
  Tensor divisor;  // device scalar (backward uses the host's N)
  cuda::DeferredIndexCheck bad_label;
  int64_t checked_classes = 0;
};

namespace {

__global__ void mll_forward_kernel(int64_t num, int64_t dim, const float* p, const float* label, int32_t* labels,
                                   float* terms, unsigned long long* bad) {
  STRATA_CUDA_LOOP(j, num) {
    const int32_t l = device_class_label(label[j], dim, false, 0.0f, j, bad);
    labels[j] = l;
    terms[j] = 0.0f;
    if (l < 0) continue;
    terms[j] = static_cast<float>(-log(static_cast<double>(fmaxf(p[j * dim + l], kLossLogThreshold))));
  }
}

__global__ void mll_backward_kernel(int64_t n, int64_t dim, const float* p, const int32_t* labels,
                                    const float* loss_weight, float divisor, float* dx) {
  const float scale = -loss_weight[0] / divisor;
  STRATA_CUDA_LOOP(i, n) dx[i] = labels[i / dim] == i % dim ? scale / fmaxf(p[i], kLossLogThreshold) : 0.0f;
}

}  // namespace

void MultinomialLogisticLossLayer::before_replay() {
  if (!cuda_) return;
  report_bad_label_of_previous_batch(where(), cuda_->bad_label.before_replay(), 1, cuda_->checked_classes, {});
}

void MultinomialLogisticLossLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  report_bad_label_of_previous_batch(where(), st.bad_label.previous(), 1, st.checked_classes, {});
  cuda::ensure_on_device(st.labels, {num_}, DType::kI32, device());
  cuda::ensure_on_device(st.terms, {num_}, DType::kF32, device());
  cuda::ensure_on_device(st.divisor, {1}, DType::kF32, device());
  unsigned long long* bad_slot = st.bad_label.arm();
  st.checked_classes = dim_;
  if (num_ > 0) {
    mll_forward_kernel<<<cuda::blocks_for(num_), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        num_, dim_, bottom[0]->data.device_data<float>(), bottom[1]->data.device_data<float>(),
        st.labels.device_data<int32_t>(), st.terms.device_data<float>(), bad_slot);
    STRATA_KERNEL_CHECK();
  }
  st.bad_label.record();
  cuda::loss_total(num_, st.terms.device_data<float>(), nullptr, static_cast<float>(divisor()),
                   top[0]->data.device_data<float>(), st.divisor.device_data<float>());
}

void MultinomialLogisticLossLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                                 const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  STRATA_CHECK(cuda_ != nullptr, where(), ": backward before forward");
  const int64_t n = num_ * dim_;
  if (n == 0) return;
  mll_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, dim_, bottom[0]->data.device_data<float>(), cuda_->labels.device_data<int32_t>(),
      top[0]->diff.device_data<float>(), static_cast<float>(divisor()), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
