// NeuronLayer: the base of the elementwise layers (Caffe's NeuronLayer):
// one bottom, one top of the same shape, and the option to run in place.
// Not a layer type of its own (nothing registers it).
//
// An elementwise formula is written once, as a functor whose members are
// STRATA_HOST_DEVICE, in the layer's header:
//   struct SigmoidOp {
//     STRATA_HOST_DEVICE float forward(float x) const;
//     STRATA_HOST_DEVICE float backward(float saved, float dy) const;  // dx
//   };
// The .cpp applies it with neuron_forward_cpu()/neuron_backward_cpu() below,
// the .cu with the kernels of layers/neuron_layer.cuh, so the CPU reference
// and the GPU compute every element with the same expression. `saved` is
// whatever the layer's backward reads per element: the output y for
// Sigmoid and TanH (which therefore run in place for free), the input x
// for GELU (which keeps a copy of it when in place).
#pragma once

#include <cmath>  // expf, tanhf, erff for the functors
#include <cstdint>

#include "framework/layer.h"
#include "layers/host_device.h"  // STRATA_HOST_DEVICE for the functors
#ifndef __CUDACC__
#include "framework/cpu/threads.h"
#endif

namespace strata {

class NeuronLayer : public Layer {
 public:
  using Layer::Layer;

  bool supports_in_place() const override { return true; }
  // The top takes the bottom's shape; in place it already has it.
  void reshape(const BlobVec& bottom, const BlobVec& top) override {
    if (top[0] != bottom[0]) top[0]->reshape_like(*bottom[0]);
  }
};

// The CPU loops, for the .cpp files. nvcc compiles only the GPU side of a
// layer (layers/neuron_layer.cuh), and parallel_for's OpenMP is not for it.
#ifndef __CUDACC__

// Below this many elements per thread the loops stay on one thread: thread
// start-up would cost more than the arithmetic. A costlier formula (GELU's)
// passes a smaller chunk.
constexpr int64_t kNeuronMinChunk = 32768;

// y[i] = op.forward(x[i]) for i < n; y may equal x (each element is read
// before it is written).
// The loops copy the functor first: read through a reference, its members
// could alias y, so each iteration would reload them and the loop would not
// be vectorised.
template <class Op>
void neuron_forward_cpu(const Op& op, int64_t n, const float* x, float* y, int64_t min_chunk = kNeuronMinChunk) {
  parallel_for(n, min_chunk, [&](int64_t begin, int64_t end) {
    const Op f = op;
    for (int64_t i = begin; i < end; ++i) y[i] = f.forward(x[i]);
  });
}

// dx[i] = op.backward(saved[i], dy[i]) for i < n; dx may equal dy or saved.
template <class Op>
void neuron_backward_cpu(const Op& op, int64_t n, const float* saved, const float* dy, float* dx,
                         int64_t min_chunk = kNeuronMinChunk) {
  parallel_for(n, min_chunk, [&](int64_t begin, int64_t end) {
    const Op f = op;
    for (int64_t i = begin; i < end; ++i) dx[i] = f.backward(saved[i], dy[i]);
  });
}

#endif  // !__CUDACC__

}  // namespace strata
