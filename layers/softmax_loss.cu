// The softmax-loss core on a GPU: the softmax, the subclass's per-position
// loss kernel, one deterministic block for the total (cuda::loss_total), and
// the subclass's gradient kernel followed by the probabilities' gradient
// through the softmax. Nothing waits for the GPU: a bad label is reported at
// the next forward.
#include <string>

#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "framework/scratch.h"
#include "layers/softmax_loss.cuh"

namespace strata {
namespace {

// A gradient on the probabilities top, through the softmax: dx += p * (dp - sum(dp * p)).
__global__ void probability_backward_kernel(int64_t outer, int64_t channels, int64_t inner, const float* prob,
                                            const float* dprob, float* dx) {
  STRATA_CUDA_LOOP(pos, outer * inner) {
    const int64_t o = pos / inner, i = pos - o * inner;
    const int64_t base = o * channels * inner + i;
    double dot = 0.0;
    for (int64_t c = 0; c < channels; ++c) dot += static_cast<double>(dprob[base + c * inner]) * prob[base + c * inner];
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t k = base + c * inner;
      dx[k] += prob[k] * (dprob[k] - static_cast<float>(dot));
    }
  }
}

}  // namespace

void SoftmaxLossLayer::before_replay() {
  if (!cuda_) return;
  CudaScratch& st = *cuda_;
  report_bad_label_of_previous_batch(where(), st.bad_label.before_replay(), st.checked_inner, st.checked_classes,
                                     ignore_label_);
}

void SoftmaxLossLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaScratch>();
  CudaScratch& st = *cuda_;
  report_bad_label_of_previous_batch(where(), st.bad_label.previous(), st.checked_inner, st.checked_classes,
                                     ignore_label_);
  const int64_t C = geom_.channels, inner = geom_.inner, outer = geom_.outer;
  const int64_t positions = outer * inner;
  const Device dev = device();
  cuda::ensure_on_device(prob_, bottom[0]->shape(), DType::kF32, dev);
  cuda::ensure_on_device(row_max_, {positions}, DType::kF32, dev);
  cuda::ensure_on_device(row_sum_, {positions}, DType::kF32, dev);
  cuda::ensure_on_device(st.labels, {positions}, DType::kI32, dev);
  cuda::ensure_on_device(st.terms, {positions}, DType::kF32, dev);
  cuda::ensure_on_device(st.valid, {positions}, DType::kF32, dev);
  cuda::ensure_on_device(st.divisor, {1}, DType::kF32, dev);

  const bool wide = bottom[0]->data.dtype() != DType::kF32;
  ScratchCarver carve = wide ? ScratchCarver(scratch(f32_scratch(1))) : ScratchCarver();
  const Tensor xt = carve.f32_of(bottom[0]->data);  // 16-bit scores widened on the stream
  const float* x = xt.device_data<float>();
  float* prob = prob_.device_data<float>();
  cuda::softmax_channels(outer, C, inner, x, prob, row_max_.device_data<float>(), row_sum_.device_data<float>());
  unsigned long long* bad_slot = st.bad_label.arm();
  st.checked_inner = inner > 0 ? inner : 1;
  st.checked_classes = C;
  if (positions > 0) position_loss_cuda(bottom, x, st, bad_slot);
  st.bad_label.record();
  const bool by_valid = normalization_ == LossNormalization::kValid;
  cuda::loss_total(positions, st.terms.device_data<float>(), by_valid ? st.valid.device_data<float>() : nullptr,
                   static_cast<float>(loss_divisor(normalization_, outer, positions, positions)),
                   top[0]->data.device_data<float>(), st.divisor.device_data<float>());
  if (probability_top_) cast_into(top[1]->data, prob_);
}

void SoftmaxLossLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                     const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  STRATA_CHECK(cuda_ != nullptr, where(), ": backward before forward");
  const int64_t C = geom_.channels, inner = geom_.inner, outer = geom_.outer;
  if (outer * C * inner == 0) return;  // nothing to write
  const bool wide = bottom[0]->diff.dtype() != DType::kF32;
  ScratchCarver carve = wide ? ScratchCarver(scratch(f32_scratch(probability_top_ ? 2 : 1))) : ScratchCarver();
  Tensor dxt = carve.f32_for(bottom[0]->diff);
  float* dx = dxt.device_data<float>();
  // The loss weight is top[0]'s diff, read on the device.
  position_gradient_cuda(bottom, top[0]->diff.device_data<float>(), *cuda_, dx);
  if (probability_top_) {
    const Tensor dprob = carve.f32_of(top[1]->diff);
    const int64_t positions = outer * inner;
    probability_backward_kernel<<<cuda::blocks_for(positions), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        outer, C, inner, prob_.device_data<float>(), dprob.device_data<float>(), dx);
    STRATA_KERNEL_CHECK();
  }
  if (wide) cast_into(bottom[0]->diff, dxt);  // rounded once, on the stream
}

}  // namespace strata
