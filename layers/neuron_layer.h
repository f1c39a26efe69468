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
//
// The Tensor forms below apply a functor to blobs stored in f32, bf16 or
// f16 (all of one call's in the same dtype): each element is widened to f32,
// computed, and rounded back to the nearest even, the same bits as the Net's
// f32 copies around a layer that takes f32 alone would give. A layer that
// uses them for every blob declares takes_storage for any float dtype
// (takes_float_storage below), and the Net hands it the 16-bit blobs as they are.
#pragma once

#include <cmath>  // expf, tanhf, erff for the functors
#include <cstdint>
#include <initializer_list>

#include "framework/error.h"
#include "framework/layer.h"
#include "layers/host_device.h"  // STRATA_HOST_DEVICE for the functors
#ifndef __CUDACC__
#include "framework/cpu/threads.h"
#endif

namespace strata {

// takes_storage for a layer whose every call goes through the Tensor forms.
inline bool takes_float_storage(DType dtype) { return is_float_dtype(dtype); }

// The Tensor forms' check, on the CPU and the GPU: every tensor of one call
// in one dtype and of one element count; ShapeError naming `what` otherwise.
inline void check_same_storage(const char* what, std::initializer_list<const Tensor*> tensors) {
  const Tensor& first = **tensors.begin();
  for (const Tensor* t : tensors) {
    if (t->dtype() != first.dtype() || t->numel() != first.numel()) {
      fail<ShapeError>(what, ": ", shape_str(t->shape()), " ", dtype_name(t->dtype()), " beside ",
                       shape_str(first.shape()), " ", dtype_name(first.dtype()),
                       "; one call's blobs must be of one dtype and element count");
    }
  }
}

class NeuronLayer : public Layer {
 public:
  using Layer::Layer;

  bool supports_in_place() const override { return true; }
  // Element by element: either layout (a Dropout's mask follows memory order).
  ChannelsLast channels_last() const override { return ChannelsLast::kTakes; }
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

// One element of a blob in its storage: f32 as it is; bf16 and f16 (their
// raw bits) widened on load and rounded to the nearest even on store.
struct F32Element {
  using T = float;
  static constexpr bool kIsF32 = true;
  static float load(T v) { return v; }
  static T store(float f) { return f; }
};
struct Bf16Element {
  using T = uint16_t;
  static constexpr bool kIsF32 = false;
  static float load(T v) { return bf16_to_float(v); }
  static T store(float f) { return float_to_bf16(f); }
};
struct F16Element {
  using T = uint16_t;
  static constexpr bool kIsF32 = false;
  static float load(T v) { return f16_to_float(v); }
  static T store(float f) { return float_to_f16(f); }
};

// Calls body(E{}) with the element type of `dtype` (f32, bf16 or f16);
// Error naming `what` for another dtype.
template <class Body>
void with_float_element(DType dtype, const char* what, const Body& body) {
  switch (dtype) {
    case DType::kF32: return body(F32Element{});
    case DType::kBF16: return body(Bf16Element{});
    case DType::kF16: return body(F16Element{});
    default: break;
  }
  fail<Error>(what, ": blobs stored in ", dtype_name(dtype), " (f32, bf16 and f16 only)");
}

// dst[i] = src[i] widened to f32, for n elements stored as E, on the threads:
// a 16-bit path's block of rows on its way to an f32 GEMM.
template <class E>
void widen_elements(const typename E::T* src, int64_t n, float* dst) {
  parallel_for(n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = E::load(src[i]);
  });
}

// dst[i] = src[i] rounded once to E's type (nearest even), on the threads.
template <class E>
void round_elements(const float* src, int64_t n, typename E::T* dst) {
  parallel_for(n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = E::store(src[i]);
  });
}

// Rows [r0, r0 + rows) of a [*, width] tensor of E's type as f32: a pointer
// into it for f32, else widened into `wide` (on the threads).
template <class E>
const float* rows_as_f32(const typename E::T* src, int64_t r0, int64_t rows, int64_t width, float* wide) {
  const typename E::T* from = src + r0 * width;
  if constexpr (E::kIsF32) {
    return from;
  } else {
    widen_elements<E>(from, rows * width, wide);
    return wide;
  }
}

// Where f32 results for rows [r0, ...) of a [*, width] tensor of E's type
// go: the tensor itself for f32, else `wide` (then round_rows stores them).
template <class E>
float* rows_out_f32(typename E::T* dst, int64_t r0, int64_t width, float* wide) {
  if constexpr (E::kIsF32) {
    return dst + r0 * width;
  } else {
    return wide;
  }
}

template <class E>
void round_rows(const float* wide, int64_t r0, int64_t rows, int64_t width, typename E::T* dst) {
  if constexpr (!E::kIsF32) round_elements<E>(wide, rows * width, dst + r0 * width);
}

// For every channel c of g and x, both [outer, channels, inner] stored as
// E: body(c, sum of g, sum of g * x), summed in double in (outer, inner)
// order, channels on the threads. A normalisation's or a scale's backward
// (BatchNorm, Scale).
template <class E, class Body>
void channel_gradient_sums(int64_t outer, int64_t channels, int64_t inner, const typename E::T* g,
                           const typename E::T* x, const Body& body) {
  parallel_for(channels, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t o = 0; o < outer; ++o) {
        const int64_t off = (o * channels + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const float v = E::load(g[off + i]);
          sum_g += v;
          sum_gx += static_cast<double>(v) * E::load(x[off + i]);
        }
      }
      body(c, sum_g, sum_gx);
    }
  });
}

// y = op.forward(x) over blobs stored in f32, bf16 or f16 (both the same);
// y may be x.
template <class Op>
void neuron_forward_cpu(const Op& op, const Tensor& x, Tensor& y, int64_t min_chunk = kNeuronMinChunk) {
  check_same_storage("neuron forward", {&x, &y});
  // f32: the pointer form's loop itself (the generic one below ran 12% slower on f32).
  if (x.dtype() == DType::kF32) return neuron_forward_cpu(op, x.numel(), x.data<float>(), y.data<float>(), min_chunk);
  with_float_element(x.dtype(), "neuron forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    parallel_for(x.numel(), min_chunk, [&](int64_t begin, int64_t end) {
      const Op f = op;
      for (int64_t i = begin; i < end; ++i) out[i] = E::store(f.forward(E::load(in[i])));
    });
  });
}

// dx = op.backward(saved, dy) over blobs stored in one of f32, bf16 or f16;
// dx may be dy or saved.
template <class Op>
void neuron_backward_cpu(const Op& op, const Tensor& saved, const Tensor& dy, Tensor& dx,
                         int64_t min_chunk = kNeuronMinChunk) {
  check_same_storage("neuron backward", {&saved, &dy, &dx});
  if (dx.dtype() == DType::kF32) {
    return neuron_backward_cpu(op, dx.numel(), saved.data<float>(), dy.data<float>(), dx.data<float>(), min_chunk);
  }
  with_float_element(dx.dtype(), "neuron backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* s = saved.data<T>();
    const T* g = dy.data<T>();
    T* out = dx.data<T>();
    parallel_for(dx.numel(), min_chunk, [&](int64_t begin, int64_t end) {
      const Op f = op;
      for (int64_t i = begin; i < end; ++i) out[i] = E::store(f.backward(E::load(s[i]), E::load(g[i])));
    });
  });
}

#endif  // !__CUDACC__

}  // namespace strata
