// InfogainLoss's kernels; the rest is the softmax-loss core (layers/softmax_loss.cu).
#include <cmath>

#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/infogain_loss.h"
#include "layers/softmax_loss.cuh"

namespace strata {
namespace {

__global__ void infogain_loss_kernel(int64_t positions, int64_t channels, int64_t inner, const float* x,
                                     const float* label, const float* row_max, const float* row_sum, const float* H,
                                     int has_ignore, float ignore, double log_floor, int32_t* labels, float* terms,
                                     float* valid, unsigned long long* bad) {
  STRATA_CUDA_LOOP(pos, positions) {
    const int32_t l = device_class_label(label[pos], channels, has_ignore != 0, ignore, pos, bad);
    labels[pos] = l;
    terms[pos] = 0.0f;
    valid[pos] = l < 0 ? 0.0f : 1.0f;
    if (l < 0) continue;
    const int64_t o = pos / inner, i = pos - o * inner;
    const double log_sum = log(static_cast<double>(row_sum[pos]));
    double acc = 0.0;
    for (int64_t c = 0; c < channels; ++c) {
      const double lp = static_cast<double>(x[(o * channels + c) * inner + i] - row_max[pos]) - log_sum;
      acc -= static_cast<double>(H[l * channels + c]) * (lp > log_floor ? lp : log_floor);
    }
    terms[pos] = static_cast<float>(acc);
  }
}

__global__ void infogain_sum_rows_kernel(int64_t channels, const float* H, float* sum_rows) {
  STRATA_CUDA_LOOP(c, channels) {
    double s = 0.0;
    for (int64_t k = 0; k < channels; ++k) s += H[c * channels + k];
    sum_rows[c] = static_cast<float>(s);
  }
}

__global__ void infogain_gradient_kernel(int64_t total, int64_t channels, int64_t inner, const float* prob,
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

}  // namespace

void InfogainLossLayer::position_loss_cuda(const BlobVec& bottom, const float* x, CudaScratch& st,
                                           unsigned long long* bad) {
  const int64_t positions = geom_.outer * geom_.inner;
  infogain_loss_kernel<<<cuda::blocks_for(positions), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      positions, geom_.channels, geom_.inner, x,
      bottom[1]->data.device_data<float>(), row_max_.device_data<float>(), row_sum_.device_data<float>(),
      h_of(bottom).device_data<float>(), ignore_label_ ? 1 : 0,
      ignore_label_ ? static_cast<float>(*ignore_label_) : 0.0f, std::log(static_cast<double>(kLossLogThreshold)),
      st.labels.device_data<int32_t>(), st.terms.device_data<float>(), st.valid.device_data<float>(), bad);
  STRATA_KERNEL_CHECK();
}

void InfogainLossLayer::position_gradient_cuda(const BlobVec& bottom, const float* loss_weight, CudaScratch& st,
                                               float* dx) {
  const int64_t C = geom_.channels, total = geom_.outer * C * geom_.inner;
  const float* H = h_of(bottom).device_data<float>();
  cuda::ensure_on_device(st.per_class, {C}, DType::kF32, device());
  infogain_sum_rows_kernel<<<cuda::blocks_for(C), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      C, H, st.per_class.device_data<float>());
  STRATA_KERNEL_CHECK();
  infogain_gradient_kernel<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      total, C, geom_.inner, prob_.device_data<float>(), st.labels.device_data<int32_t>(), H,
      st.per_class.device_data<float>(), loss_weight, st.divisor.device_data<float>(), dx);
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
