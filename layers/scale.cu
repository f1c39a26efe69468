#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/scale.h"

namespace strata {

namespace {

// x viewed as [outer, dim, inner]; y may equal x.
__global__ void scale_forward(int64_t total, int64_t dim, int64_t inner, const float* x, const float* scale,
                              const float* bias, float* y) {
  STRATA_CUDA_LOOP(k, total) {
    const int64_t c = (k / inner) % dim;
    y[k] = x[k] * scale[c] + (bias ? bias[c] : 0.0f);
  }
}

__global__ void scale_backward(int64_t total, int64_t dim, int64_t inner, const float* dy, const float* scale,
                               float* dx) {
  STRATA_CUDA_LOOP(k, total) dx[k] = dy[k] * scale[(k / inner) % dim];
}

}  // namespace

void ScaleLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t total = outer_ * dim_ * inner_;
  if (top[0] == bottom[0]) {
    // In place: the scale gradient needs the input the top overwrites.
    cuda::ensure_on_device(x_copy_, bottom[0]->shape(), DType::kF32, device());
    cuda::copy(total, bottom[0]->data.device_data<float>(), x_copy_.device_data<float>());
  }
  if (total == 0) return;
  const Blob* bias = bias_blob();
  scale_forward<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      total, dim_, inner_, bottom[0]->data.device_data<float>(), scale_blob(bottom).data.device_data<float>(),
      bias ? bias->data.device_data<float>() : nullptr, top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void ScaleLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  const bool in_place = top[0] == bottom[0];
  const float* dy = top[0]->diff.device_data<float>();
  const float* x = in_place ? x_copy_.device_data<float>() : bottom[0]->data.device_data<float>();
  const bool two_bottoms = bottom.size() > 1;

  // Scale and bias gradients first: when in place, dx below overwrites dy.
  float* dscale = nullptr;
  float beta = 1.0f;  // params accumulate, bottom gradients are overwritten
  if (two_bottoms) {
    if (propagate_down[1]) {
      dscale = bottom[1]->diff.device_data<float>();
      beta = 0.0f;
    }
  } else {
    dscale = param(0).diff.device_data<float>();
  }
  Blob* bias = bias_blob();
  if (dscale) cuda::channel_sums(outer_, dim_, inner_, dy, x, beta, dscale);
  if (bias) cuda::channel_sums(outer_, dim_, inner_, dy, nullptr, 1.0f, bias->diff.device_data<float>());

  const int64_t total = outer_ * dim_ * inner_;
  if (propagate_down[0] && total > 0) {
    scale_backward<<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        total, dim_, inner_, dy, scale_blob(bottom).data.device_data<float>(), bottom[0]->diff.device_data<float>());
    STRATA_KERNEL_CHECK();
  }
}

}  // namespace strata
