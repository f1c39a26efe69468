// SoftmaxWithLoss's kernels; the rest is the softmax-loss core (layers/softmax_loss.cu).
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/softmax_loss.cuh"
#include "layers/softmax_with_loss.h"

namespace strata {
namespace {

__global__ void label_loss_kernel(int64_t positions, int64_t channels, int64_t inner, const float* x,
                                  const float* label, const float* row_max, const float* row_sum, int has_ignore,
                                  float ignore, int32_t* labels, float* loss, float* valid, unsigned long long* bad) {
  STRATA_CUDA_LOOP(pos, positions) {
    const int32_t l = device_class_label(label[pos], channels, has_ignore != 0, ignore, pos, bad);
    labels[pos] = l;
    loss[pos] = 0.0f;
    valid[pos] = l < 0 ? 0.0f : 1.0f;
    if (l < 0) continue;
    const int64_t o = pos / inner, i = pos - o * inner;
    const float logit = x[(o * channels + l) * inner + i];
    // log p = x - max - log(sum exp(x - max)): finite even when p underflows.
    loss[pos] = static_cast<float>(-(static_cast<double>(logit - row_max[pos]) - log(static_cast<double>(row_sum[pos]))));
  }
}

__global__ void label_gradient_kernel(int64_t total, int64_t channels, int64_t inner, const float* prob,
                                      const int32_t* labels, const float* loss_weight, const float* divisor,
                                      float* dx) {
  const float scale = loss_weight[0] / divisor[0];
  STRATA_CUDA_LOOP(k, total) {
    const int64_t i = k % inner;
    const int64_t oc = k / inner;
    const int64_t c = oc % channels, o = oc / channels;
    const int32_t l = labels[o * inner + i];
    // d(-log p_l)/dx_c = p_c - [c == l]; ignored positions get no loss gradient.
    dx[k] = l < 0 ? 0.0f : (prob[k] - (l == c ? 1.0f : 0.0f)) * scale;
  }
}

}  // namespace

void SoftmaxWithLossLayer::position_loss_cuda(const BlobVec& bottom, const float* x, CudaScratch& st,
                                    unsigned long long* bad) {
  const int64_t positions = geom_.outer * geom_.inner;
  label_loss_kernel<<<cuda::blocks_for(positions), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      positions, geom_.channels, geom_.inner, x,
      bottom[1]->data.device_data<float>(), row_max_.device_data<float>(), row_sum_.device_data<float>(),
      ignore_label_ ? 1 : 0, ignore_label_ ? static_cast<float>(*ignore_label_) : 0.0f,
      st.labels.device_data<int32_t>(), st.terms.device_data<float>(), st.valid.device_data<float>(), bad);
  STRATA_KERNEL_CHECK();
}

void SoftmaxWithLossLayer::position_gradient_cuda(const BlobVec& /*bottom*/, const float* loss_weight,
                                                  CudaScratch& st, float* dx) {
  const int64_t total = geom_.outer * geom_.channels * geom_.inner;
  label_gradient_kernel<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      total, geom_.channels, geom_.inner, prob_.device_data<float>(), st.labels.device_data<int32_t>(), loss_weight,
      st.divisor.device_data<float>(), dx);
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
