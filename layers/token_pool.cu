// TokenPool on the GPU: one thread per output value (forward) and per input
// value (backward), summing tokens in the CPU's order.
#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/neuron_layer.h"  // check_same_storage
#include "layers/token_pool.h"

namespace strata {
namespace {

// T: the blobs' element (f32, bf16 or f16); sums in f32, each output rounded once.
template <class T>
__global__ void token_pool_forward(int64_t n, int64_t t, int64_t d, int mean, const T* x, T* y) {
  STRATA_CUDA_LOOP(i, n * d) {
    const int64_t s = i / d, j = i - s * d;
    const T* xs = x + s * t * d + j;
    if (!mean) {
      y[i] = xs[0];
      continue;
    }
    float sum = 0.0f;
    for (int64_t k = 0; k < t; ++k) sum += cuda::load_element(xs[k * d]);
    y[i] = cuda::store_element<T>(sum * (1.0f / static_cast<float>(t)));
  }
}

template <class T>
__global__ void token_pool_backward(int64_t n, int64_t t, int64_t d, int mean, const T* dy, T* dx) {
  STRATA_CUDA_LOOP(i, n * t * d) {
    const int64_t j = i % d;
    const int64_t k = (i / d) % t;
    const int64_t s = i / (t * d);
    const float g = cuda::load_element(dy[s * d + j]);
    dx[i] = cuda::store_element<T>(mean ? g * (1.0f / static_cast<float>(t)) : (k == 0 ? g : 0.0f));
  }
}

}  // namespace

void TokenPoolLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const int64_t total = n_ * d_;
  if (total == 0) return;
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  if (xt.dtype() != yt.dtype()) check_same_storage("TokenPool forward", {&xt, &yt});  // names both dtypes
  cuda::with_device_element(xt.dtype(), "TokenPool forward", [&](auto e) {
    using T = decltype(e);
    token_pool_forward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n_, t_, d_, pool_ == Pool::kMean ? 1 : 0, static_cast<const T*>(xt.raw_data()), static_cast<T*>(yt.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

void TokenPoolLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                   const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const int64_t total = n_ * t_ * d_;
  if (total == 0) return;
  const Tensor& dyt = top[0]->diff;
  Tensor& dxt = bottom[0]->diff;
  if (dyt.dtype() != dxt.dtype()) check_same_storage("TokenPool backward", {&dyt, &dxt});
  cuda::with_device_element(dyt.dtype(), "TokenPool backward", [&](auto e) {
    using T = decltype(e);
    token_pool_backward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        n_, t_, d_, pool_ == Pool::kMean ? 1 : 0, static_cast<const T*>(dyt.raw_data()),
        static_cast<T*>(dxt.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata
