// Deconvolution on the GPU: one thread per output, input-gradient or
// weight-gradient element, each a gather with the functions of
// layers/deconvolution.h, so nothing is shared between threads (no atomics,
// deterministic). The bias gradient is a per-channel sum.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/deconvolution.h"

namespace strata {

namespace {

__global__ void deconv_forward_kernel(DeconvGeometry g, int64_t n, const float* x, const float* w, const float* bias,
                                      float* y) {
  STRATA_CUDA_LOOP(t, n) y[t] = deconv_forward_at(g, t, x, w, bias);
}

__global__ void deconv_input_grad_kernel(DeconvGeometry g, int64_t n, const float* dy, const float* w, float* dx) {
  STRATA_CUDA_LOOP(i, n) dx[i] = deconv_input_grad_at(g, i, dy, w);
}

// Parameter gradients accumulate.
__global__ void deconv_weight_grad_kernel(DeconvGeometry g, int64_t n, int64_t num, const float* x, const float* dy,
                                          float* dw) {
  STRATA_CUDA_LOOP(k, n) dw[k] += deconv_weight_grad_at(g, k, num, x, dy);
}

}  // namespace

void DeconvolutionLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = top[0]->numel();
  if (n == 0) return;
  deconv_forward_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, n, bottom[0]->data.device_data<float>(), param(0).data.device_data<float>(),
      bias_ == Bias::kYes ? param(1).data.device_data<float>() : nullptr, top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void DeconvolutionLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                       const BlobVec& bottom) {
  if (num_ == 0) return;  // nothing to add to the parameter gradients, no input gradient
  const float* dy = top[0]->diff.device_data<float>();
  if (bias_ == Bias::kYes) {
    cuda::channel_sums(num_, geom_.out_channels, geom_.out_h * geom_.out_w, dy, nullptr, 1.0f,
                       param(1).diff.device_data<float>());
  }
  const int64_t nw = param(0).numel();
  deconv_weight_grad_kernel<<<cuda::blocks_for(nw), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, nw, num_, bottom[0]->data.device_data<float>(), dy, param(0).diff.device_data<float>());
  STRATA_KERNEL_CHECK();
  if (!propagate_down[0]) return;
  const int64_t nx = bottom[0]->numel();
  deconv_input_grad_kernel<<<cuda::blocks_for(nx), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      geom_, nx, dy, param(0).data.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
