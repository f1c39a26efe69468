#include <string>

#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/hinge_loss.h"
#include "layers/loss_layer.h"

namespace strata {

struct HingeLossLayer::CudaState {
  Tensor labels;   // i32 per sample: class index, -1 = invalid (flagged)
  Tensor terms;    // per element: t or t^2
  Tensor divisor;  // device scalar (backward uses the host's N)
  cuda::DeferredIndexCheck bad_label;
  int64_t checked_classes = 0;  // classes of the batch bad_label checks
};

namespace {

__global__ void hinge_labels_kernel(int64_t num, int64_t dim, const float* label, int32_t* labels,
                                    unsigned long long* bad) {
  STRATA_CUDA_LOOP(j, num) {
    labels[j] = device_class_label(label[j], dim, false, 0.0f, j, bad);
  }
}

__global__ void hinge_forward_kernel(int64_t n, int64_t dim, const float* s, const int32_t* labels, int l2,
                                     float* terms) {
  STRATA_CUDA_LOOP(i, n) {
    const float t = hinge_margin(s[i], labels[i / dim] == i % dim);
    terms[i] = l2 ? t * t : t;
  }
}

__global__ void hinge_backward_kernel(int64_t n, int64_t dim, const float* s, const int32_t* labels, int l2,
                                      const float* loss_weight, float divisor, float* dx) {
  const float scale = loss_weight[0] / divisor;
  STRATA_CUDA_LOOP(i, n) dx[i] = scale * hinge_grad(s[i], labels[i / dim] == i % dim, l2 != 0);
}

}  // namespace

void HingeLossLayer::before_replay() {
  if (!cuda_) return;
  report_bad_label_of_previous_batch(where(), cuda_->bad_label.before_replay(), 1, cuda_->checked_classes, {});
}

void HingeLossLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  // Labels are checked on the device; a bad one is reported at the next
  // forward, so that no step waits for the GPU.
  report_bad_label_of_previous_batch(where(), st.bad_label.previous(), 1, st.checked_classes, {});
  const int64_t n = num_ * dim_;
  cuda::ensure_on_device(st.labels, {num_}, DType::kI32, device());
  cuda::ensure_on_device(st.terms, {n}, DType::kF32, device());
  cuda::ensure_on_device(st.divisor, {1}, DType::kF32, device());
  unsigned long long* bad_slot = st.bad_label.arm();
  st.checked_classes = dim_;
  if (num_ > 0) {
    hinge_labels_kernel<<<cuda::blocks_for(num_), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        num_, dim_, bottom[1]->data.device_data<float>(), st.labels.device_data<int32_t>(), bad_slot);
    STRATA_KERNEL_CHECK();
  }
  st.bad_label.record();
  if (n > 0) {
    hinge_forward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n, dim_, bottom[0]->data.device_data<float>(), st.labels.device_data<int32_t>(), norm_ == Norm::kL2 ? 1 : 0,
        st.terms.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
  cuda::loss_total(n, st.terms.device_data<float>(), nullptr, static_cast<float>(divisor()),
                   top[0]->data.device_data<float>(), st.divisor.device_data<float>());
}

void HingeLossLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                   const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  STRATA_CHECK(cuda_ != nullptr, where(), ": backward before forward");
  const int64_t n = num_ * dim_;
  if (n == 0) return;
  hinge_backward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, dim_, bottom[0]->data.device_data<float>(), cuda_->labels.device_data<int32_t>(), norm_ == Norm::kL2 ? 1 : 0,
      top[0]->diff.device_data<float>(), static_cast<float>(divisor()), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
