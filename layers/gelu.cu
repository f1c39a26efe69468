// GELU on the GPU: the formulas of gelu.cpp, element by element.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/gelu.h"

namespace strata {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kTanhCoeff = 0.044715f;

__device__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }
__device__ float gelu_erf_grad(float x) {
  return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
}
__device__ float gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kTanhCoeff * x * x * x))); }
__device__ float gelu_tanh_grad(float x) {
  const float t = tanhf(kSqrt2OverPi * (x + kTanhCoeff * x * x * x));
  // (1 - t) (1 + t), and no tail once tanh saturates: see gelu.cpp.
  const float sech2 = (1.0f - t) * (1.0f + t);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kTanhCoeff * x * x);
  const float tail = sech2 == 0.0f ? 0.0f : 0.5f * x * sech2 * du;
  return 0.5f * (1.0f + t) + tail;
}

// y may equal x: each element is read before the same thread writes it.
__global__ void gelu_forward(int64_t n, int tanh_form, const float* x, float* y) {
  STRATA_CUDA_LOOP(i, n) y[i] = tanh_form ? gelu_tanh(x[i]) : gelu_erf(x[i]);
}

// dx may equal dy, likewise.
__global__ void gelu_backward(int64_t n, int tanh_form, const float* x, const float* dy, float* dx) {
  STRATA_CUDA_LOOP(i, n) dx[i] = dy[i] * (tanh_form ? gelu_tanh_grad(x[i]) : gelu_erf_grad(x[i]));
}

}  // namespace

void GELULayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t n = bottom[0]->numel();
  // In place the input is gone after forward; backward needs it.
  if (top[0] == bottom[0]) {
    cuda::ensure_on_device(input_copy_, bottom[0]->shape(), DType::kF32, device());
    cuda::copy(n, bottom[0]->data.device_data<float>(), input_copy_.device_data<float>());
  }
  if (n == 0) return;
  gelu_forward<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, approximate_ == Approximate::kTanh ? 1 : 0, bottom[0]->data.device_data<float>(), top[0]->data.device_data<float>());
  STRATA_KERNEL_CHECK();
}

void GELULayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down, const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = bottom[0]->numel();
  if (n == 0) return;
  const float* x = top[0] == bottom[0] ? input_copy_.device_data<float>() : bottom[0]->data.device_data<float>();
  gelu_backward<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
      n, approximate_ == Approximate::kTanh ? 1 : 0, x, top[0]->diff.device_data<float>(), bottom[0]->diff.device_data<float>());
  STRATA_KERNEL_CHECK();
}

}  // namespace strata
