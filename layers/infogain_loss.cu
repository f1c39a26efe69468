#include <cmath>
#include <string>

#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/infogain_loss.h"

namespace strata {

struct InfogainLossLayer::CudaState {
  Tensor labels;    // i32 per position: class index, -1 = ignored (or invalid)
  Tensor terms;     // f32 per position: its weighted log loss, 0 when ignored
  Tensor valid;     // f32 per position: 1 when the label counts
  Tensor sum_rows;  // f32 per class: sum_k H[c, k]
  Tensor divisor;   // device scalar, for backward
  cuda::DeferredIndexCheck bad_label;
  int64_t checked_inner = 1, checked_classes = 0;  // geometry of the batch bad_label checks
};

namespace {

__global__ void infogain_forward_kernel(int64_t positions, int64_t channels, int64_t inner, const float* x,
                                        const float* label, const float* row_max, const float* row_sum,
                                        const float* H, int has_ignore, float ignore, double log_floor,
                                        int32_t* labels, float* terms, float* valid, unsigned long long* bad) {
  STRATA_CUDA_LOOP(pos, positions) {
    const float v = label[pos];
    labels[pos] = -1;
    terms[pos] = 0.0f;
    valid[pos] = 0.0f;
    if (has_ignore && v == ignore) continue;
    if (!(v >= 0.0f && v < static_cast<float>(channels)) || v != floorf(v)) {
      atomicMin(bad, static_cast<unsigned long long>(pos));
      continue;
    }
    const int32_t l = static_cast<int32_t>(v);
    const int64_t o = pos / inner, i = pos - o * inner;
    const double log_sum = log(static_cast<double>(row_sum[pos]));
    double acc = 0.0;
    for (int64_t c = 0; c < channels; ++c) {
      const double lp = static_cast<double>(x[(o * channels + c) * inner + i] - row_max[pos]) - log_sum;
      acc -= static_cast<double>(H[l * channels + c]) * (lp > log_floor ? lp : log_floor);
    }
    labels[pos] = l;
    terms[pos] = static_cast<float>(acc);
    valid[pos] = 1.0f;
  }
}

__global__ void infogain_sum_rows_kernel(int64_t channels, const float* H, float* sum_rows) {
  STRATA_CUDA_LOOP(c, channels) {
    double s = 0.0;
    for (int64_t k = 0; k < channels; ++k) s += H[c * channels + k];
    sum_rows[c] = static_cast<float>(s);
  }
}

__global__ void infogain_backward_kernel(int64_t total, int64_t channels, int64_t inner, const float* prob,
                                         const int32_t* labels, const float* H, const float* sum_rows,
                                         const float* loss_weight, const float* divisor, float* dx) {
  const float scale = loss_weight[0] / divisor[0];
  STRATA_CUDA_LOOP(k, total) {
    const int64_t i = k % inner;
    const int64_t oc = k / inner;
    const int64_t c = oc % channels, o = oc / channels;
    const int32_t l = labels[o * inner + i];
    dx[k] = l < 0 ? 0.0f : (prob[k] * sum_rows[l] - H[l * channels + c]) * scale;
  }
}

// A gradient on the probabilities top, through the softmax: dx += p * (dp - sum(dp * p)).
__global__ void infogain_prob_backward_kernel(int64_t outer, int64_t channels, int64_t inner, const float* prob,
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

void InfogainLossLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  if (!cuda_) cuda_ = std::make_shared<CudaState>();
  CudaState& st = *cuda_;
  // Labels are checked on the device; a bad one is reported here, at the
  // next forward, so that no step waits for the GPU.
  const int64_t bad = st.bad_label.previous();
  if (bad >= 0) {
    fail<Error>(where(), ": the label at index ", bad, " (sample ", bad / st.checked_inner,
                ") of the previous batch is not a class index in [0, ", st.checked_classes, ")",
                ignore_label_ ? " or the ignore_label " + std::to_string(*ignore_label_) : std::string(),
                "; check the labels or the number of scores (", st.checked_classes, " on the class axis)");
  }
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

  const float* x = bottom[0]->data.device_data<float>();
  float* prob = prob_.device_data<float>();
  cuda::softmax_channels(outer, C, inner, x, prob, row_max_.device_data<float>(), row_sum_.device_data<float>());
  unsigned long long* bad_slot = st.bad_label.arm();
  st.checked_inner = inner > 0 ? inner : 1;
  st.checked_classes = C;
  if (positions > 0) {
    infogain_forward_kernel<<<cuda::blocks_for(positions), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        positions, C, inner, x, bottom[1]->data.device_data<float>(), row_max_.device_data<float>(),
        row_sum_.device_data<float>(), h_of(bottom).device_data<float>(), ignore_label_ ? 1 : 0,
        ignore_label_ ? static_cast<float>(*ignore_label_) : 0.0f, std::log(static_cast<double>(kLossLogThreshold)),
        st.labels.device_data<int32_t>(), st.terms.device_data<float>(), st.valid.device_data<float>(), bad_slot);
    STRATA_KERNEL_CHECK();
  }
  st.bad_label.record();
  const bool by_valid = normalization_ == LossNormalization::kValid;
  cuda::loss_total(positions, st.terms.device_data<float>(), by_valid ? st.valid.device_data<float>() : nullptr,
                   static_cast<float>(loss_divisor(normalization_, outer, positions, positions)),
                   top[0]->data.device_data<float>(), st.divisor.device_data<float>());
  if (top.size() > 1) cuda::copy(prob_.numel(), prob, top[1]->data.device_data<float>());
}

void InfogainLossLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                      const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  STRATA_CHECK(cuda_ != nullptr, where(), ": backward before forward");
  const int64_t C = geom_.channels, inner = geom_.inner, outer = geom_.outer;
  const int64_t total = outer * C * inner;
  if (total == 0) return;  // nothing to write, and H may be empty
  CudaState& st = *cuda_;
  const float* H = h_of(bottom).device_data<float>();
  cuda::ensure_on_device(st.sum_rows, {C}, DType::kF32, device());
  infogain_sum_rows_kernel<<<cuda::blocks_for(C), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      C, H, st.sum_rows.device_data<float>());
  STRATA_KERNEL_CHECK();
  float* dx = bottom[0]->diff.device_data<float>();
  const float* prob = prob_.device_data<float>();
  infogain_backward_kernel<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      total, C, inner, prob, st.labels.device_data<int32_t>(), H, st.sum_rows.device_data<float>(),
      top[0]->diff.device_data<float>(), st.divisor.device_data<float>(), dx);
  STRATA_KERNEL_CHECK();
  if (top.size() > 1) {
    const int64_t positions = outer * inner;
    infogain_prob_backward_kernel<<<cuda::blocks_for(positions), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        outer, C, inner, prob, top[1]->diff.device_data<float>(), dx);
    STRATA_KERNEL_CHECK();
  }
}

}  // namespace strata
