// The GPU side of layers/neuron_layer.h: kernels that apply an elementwise
// functor (the same one the layer's .cpp applies on the CPU), one element
// per thread of a grid-stride loop, on the compute stream. For .cu files only.
#pragma once

#include <cstdint>

#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "framework/error.h"
#include "layers/neuron_layer.h"

namespace strata {

// y may equal x: each element is read before the same thread writes it.
template <class Op>
__global__ void neuron_forward_kernel(Op op, int64_t n, const float* x, float* y) {
  STRATA_CUDA_LOOP(i, n) y[i] = op.forward(x[i]);
}

// dx may equal dy or saved, likewise.
template <class Op>
__global__ void neuron_backward_kernel(Op op, int64_t n, const float* saved, const float* dy, float* dx) {
  STRATA_CUDA_LOOP(i, n) dx[i] = op.backward(saved[i], dy[i]);
}

// y[i] = op.forward(x[i]) for i < n (device pointers); nothing for n == 0.
template <class Op>
void neuron_forward_cuda(const Op& op, int64_t n, const float* x, float* y) {
  if (n == 0) return;
  neuron_forward_kernel<Op><<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(op, n, x, y);
  STRATA_KERNEL_CHECK();
}

// dx[i] = op.backward(saved[i], dy[i]) for i < n (device pointers).
template <class Op>
void neuron_backward_cuda(const Op& op, int64_t n, const float* saved, const float* dy, float* dx) {
  if (n == 0) return;
  neuron_backward_kernel<Op>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(op, n, saved, dy, dx);
  STRATA_KERNEL_CHECK();
}

// The Tensor forms (layers/neuron_layer.h): blobs stored in f32, bf16 or f16,
// each element widened to f32, computed and rounded to the nearest even, as
// the CPU's Tensor forms do.
template <class T> __device__ __forceinline__ float neuron_load(T v) { return cuda::load_element(v); }
template <class T> __device__ __forceinline__ T neuron_store(float f) { return cuda::store_element<T>(f); }

template <class Op, class T>
__global__ void neuron_forward_stored_kernel(Op op, int64_t n, const T* x, T* y) {
  STRATA_CUDA_LOOP(i, n) y[i] = neuron_store<T>(op.forward(neuron_load(x[i])));
}

template <class Op, class T>
__global__ void neuron_backward_stored_kernel(Op op, int64_t n, const T* saved, const T* dy, T* dx) {
  STRATA_CUDA_LOOP(i, n) dx[i] = neuron_store<T>(op.backward(neuron_load(saved[i]), neuron_load(dy[i])));
}

using cuda::with_device_element;

// y = op.forward(x) on the device; y may be x.
template <class Op>
void neuron_forward_cuda(const Op& op, const Tensor& x, Tensor& y) {
  check_same_storage("neuron forward", {&x, &y});
  const int64_t n = x.numel();
  if (n == 0) return;
  with_device_element(x.dtype(), "neuron forward", [&](auto e) {
    using T = decltype(e);
    const T* in = static_cast<const T*>(x.raw_data());
    T* out = static_cast<T*>(y.raw_data());
    neuron_forward_stored_kernel<Op, T>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(op, n, in, out);
    STRATA_KERNEL_CHECK();
  });
}

// dx = op.backward(saved, dy) on the device; dx may be dy or saved.
template <class Op>
void neuron_backward_cuda(const Op& op, const Tensor& saved, const Tensor& dy, Tensor& dx) {
  check_same_storage("neuron backward", {&saved, &dy, &dx});
  const int64_t n = dx.numel();
  if (n == 0) return;
  with_device_element(dx.dtype(), "neuron backward", [&](auto e) {
    using T = decltype(e);
    neuron_backward_stored_kernel<Op, T><<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        op, n, static_cast<const T*>(saved.raw_data()), static_cast<const T*>(dy.raw_data()),
        static_cast<T*>(dx.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata
