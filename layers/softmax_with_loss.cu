#include <string>

#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/softmax_with_loss.h"

namespace strata {

struct SoftmaxWithLossLayer::CudaState {
  Tensor labels;     // i32 per position: class index, -1 = ignored (or invalid)
  Tensor loss;       // f32 per position: -log p[label], 0 when ignored
  Tensor valid;      // f32 per position: 1 when the label counts
  Tensor normalizer; // f32 scalar: divisor of the summed loss, kept for backward
  cuda::DeferredIndexCheck bad_label;
  int64_t checked_inner = 1, checked_classes = 0;  // geometry of the batch bad_label checks
};

namespace {

enum NormCode : int { kValid = 0, kBatchSize = 1, kFull = 2, kNone = 3 };

__global__ void label_loss_kernel(int64_t positions, int64_t channels, int64_t inner, const float* x,
                                  const float* label, const float* row_max, const float* row_sum, int has_ignore,
                                  float ignore, int32_t* labels_out, float* loss, float* valid,
                                  unsigned long long* bad) {
  STRATA_CUDA_LOOP(pos, positions) {
    const float v = label[pos];
    labels_out[pos] = -1;
    loss[pos] = 0.0f;
    valid[pos] = 0.0f;
    if (has_ignore && v == ignore) continue;
    if (!(v >= 0.0f && v < static_cast<float>(channels)) || v != floorf(v)) {
      atomicMin(bad, static_cast<unsigned long long>(pos));
      continue;
    }
    const int32_t l = static_cast<int32_t>(v);
    const int64_t o = pos / inner, i = pos - o * inner;
    const float logit = x[(o * channels + l) * inner + i];
    // log p = x - max - log(sum exp(x - max)): finite even when p underflows.
    loss[pos] = static_cast<float>(-(static_cast<double>(logit - row_max[pos]) - log(static_cast<double>(row_sum[pos]))));
    labels_out[pos] = l;
    valid[pos] = 1.0f;
  }
}

// One block: deterministic sums, then loss = total / normalizer.
__global__ void loss_reduce_kernel(int64_t positions, int64_t outer, int norm_code, const float* loss,
                                   const float* valid, float* top, float* normalizer) {
  double total = 0.0, count = 0.0;
  for (int64_t k = threadIdx.x; k < positions; k += blockDim.x) {
    total += loss[k];
    count += valid[k];
  }
  total = cuda::block_sum(total);
  count = cuda::block_sum(count);
  if (threadIdx.x == 0) {
    double n = 1.0;
    switch (norm_code) {
      case kValid: n = count; break;
      case kBatchSize: n = static_cast<double>(outer); break;
      case kFull: n = static_cast<double>(positions); break;
      default: n = 1.0; break;
    }
    if (n < 1.0) n = 1.0;  // an empty or fully ignored batch gives 0, not NaN
    top[0] = static_cast<float>(total / n);
    normalizer[0] = static_cast<float>(n);
  }
}

__global__ void loss_backward_kernel(int64_t total, int64_t channels, int64_t inner, const float* prob,
                                     const int32_t* labels, const float* loss_weight, const float* normalizer,
                                     float* dx) {
  const float scale = loss_weight[0] / normalizer[0];
  STRATA_CUDA_LOOP(k, total) {
    const int64_t i = k % inner;
    const int64_t oc = k / inner;
    const int64_t c = oc % channels, o = oc / channels;
    const int32_t l = labels[o * inner + i];
    // d(-log p_l)/dx_c = p_c - [c == l]; ignored positions get no loss gradient.
    dx[k] = l < 0 ? 0.0f : (prob[k] - (l == c ? 1.0f : 0.0f)) * scale;
  }
}

// A gradient on the probabilities top, through the softmax: dx += p * (dp - sum(dp * p)).
__global__ void prob_backward_kernel(int64_t outer, int64_t channels, int64_t inner, const float* prob,
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

void SoftmaxWithLossLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  // Labels are checked on the device; a bad one is reported here, at the
  // next forward, so that no step waits for the GPU.
  const int64_t bad = st.bad_label.previous();
  if (bad >= 0) {
    fail<Error>(where(), ": the label at index ", bad, " (sample ", bad / st.checked_inner,
                ") of the previous batch is not a class index in [0, ", st.checked_classes, ")",
                ignore_label_ ? " or the ignore_label " + std::to_string(*ignore_label_) : std::string(),
                "; check the labels or the number of scores (", st.checked_classes, " on the class axis)",
                ignore_label_ ? "" : ", or set loss_param { ignore_label: ... }");
  }
  const int64_t C = geom_.channels, inner = geom_.inner, outer = geom_.outer;
  const int64_t positions = outer * inner;
  const Device dev = device();
  cuda::ensure_on_device(prob_, bottom[0]->shape(), DType::kF32, dev);
  cuda::ensure_on_device(row_max_, {positions}, DType::kF32, dev);
  cuda::ensure_on_device(row_sum_, {positions}, DType::kF32, dev);
  cuda::ensure_on_device(st.labels, {positions}, DType::kI32, dev);
  cuda::ensure_on_device(st.loss, {positions}, DType::kF32, dev);
  cuda::ensure_on_device(st.valid, {positions}, DType::kF32, dev);
  cuda::ensure_on_device(st.normalizer, {1}, DType::kF32, dev);

  const float* x = bottom[0]->data.device_data<float>();
  float* prob = prob_.device_data<float>();
  cuda::softmax_channels(outer, C, inner, x, prob, row_max_.device_data<float>(), row_sum_.device_data<float>());
  unsigned long long* bad_slot = st.bad_label.arm();
  st.checked_inner = inner > 0 ? inner : 1;
  st.checked_classes = C;
  if (positions > 0) {
    label_loss_kernel<<<cuda::blocks_for(positions), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        positions, C, inner, x, bottom[1]->data.device_data<float>(), row_max_.device_data<float>(),
        row_sum_.device_data<float>(), ignore_label_ ? 1 : 0, ignore_label_ ? static_cast<float>(*ignore_label_) : 0.0f,
        st.labels.device_data<int32_t>(), st.loss.device_data<float>(), st.valid.device_data<float>(), bad_slot);
    STRATA_KERNEL_CHECK();
  }
  st.bad_label.record();
  const int code = normalization_ == Normalization::kValid       ? kValid
                   : normalization_ == Normalization::kBatchSize ? kBatchSize
                   : normalization_ == Normalization::kFull      ? kFull
                                                                 : kNone;
  loss_reduce_kernel<<<1, 1024, 0, cuda::compute_stream()>>>(
      positions, outer, code, st.loss.device_data<float>(), st.valid.device_data<float>(),
      top[0]->data.device_data<float>(), st.normalizer.device_data<float>());
  STRATA_KERNEL_CHECK();
  if (top.size() > 1) cuda::copy(prob_.numel(), prob, top[1]->data.device_data<float>());
}

void SoftmaxWithLossLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                         const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  STRATA_CHECK(cuda_ != nullptr, where(), ": backward before forward");
  const int64_t C = geom_.channels, inner = geom_.inner, outer = geom_.outer;
  const int64_t total = outer * C * inner;
  if (total == 0) return;
  float* dx = bottom[0]->diff.device_data<float>();
  const float* prob = prob_.device_data<float>();
  // The loss weight is top[0]'s diff, read on the device.
  loss_backward_kernel<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      total, C, inner, prob, cuda_->labels.device_data<int32_t>(), top[0]->diff.device_data<float>(),
      cuda_->normalizer.device_data<float>(), dx);
  STRATA_KERNEL_CHECK();
  if (top.size() > 1) {
    const int64_t positions = outer * inner;
    prob_backward_kernel<<<cuda::blocks_for(positions), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        outer, C, inner, prob, top[1]->diff.device_data<float>(), dx);
    STRATA_KERNEL_CHECK();
  }
}

}  // namespace strata
