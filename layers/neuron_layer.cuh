// The GPU side of layers/neuron_layer.h: kernels that apply an elementwise
// functor (the same one the layer's .cpp applies on the CPU), one element
// per thread of a grid-stride loop, on the compute stream. For .cu files only.
#pragma once

#include <cstdint>

#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
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

}  // namespace strata
