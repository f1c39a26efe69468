// AdaptivePooling on the GPU, as adaptive_pooling.cpp: one thread per output
// value forward; backward gathers, one thread per input value over the bins
// that cover it in the CPU's order (bins may overlap), so it needs no atomics
// and writes every input gradient.
#include "framework/cuda/elements.cuh"
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/adaptive_pooling.h"
#include "layers/neuron_layer.h"  // check_same_storage

namespace strata {
namespace {

// torch's adaptive bin [start, end) of output index i over `in` inputs.
__device__ int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
__device__ int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// The output indices whose bins contain input index p: [first, last].
// Candidates come from inverting the bin bounds, widened by one on each side
// and then checked exactly, so rounding cannot drop a bin.
__device__ void covering_bins(int64_t p, int64_t in, int64_t out, int64_t* first, int64_t* last) {
  int64_t lo = (p * out) / in - 1;
  int64_t hi = ((p + 1) * out + in - 1) / in;
  if (lo < 0) lo = 0;
  if (hi > out - 1) hi = out - 1;
  while (lo <= hi && bin_end(lo, in, out) <= p) ++lo;
  while (hi >= lo && bin_start(hi, in, out) > p) --hi;
  *first = lo;
  *last = hi;
}

struct Geom {
  int64_t h, w, oh, ow;
};

// T: the blobs' element (f32, bf16 or f16), widened to f32; each output rounded once.
template <class T>
__global__ void adaptive_max_forward(int64_t total, Geom g, const T* x, T* y, int32_t* arg) {
  STRATA_CUDA_LOOP(k, total) {
    const int64_t j = k % g.ow, i = (k / g.ow) % g.oh, plane = k / (g.ow * g.oh);
    const T* xp = x + plane * g.h * g.w;
    const int64_t h0 = bin_start(i, g.h, g.oh), h1 = bin_end(i, g.h, g.oh);
    const int64_t w0 = bin_start(j, g.w, g.ow), w1 = bin_end(j, g.w, g.ow);
    float best = -INFINITY;
    int64_t best_at = h0 * g.w + w0;
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t w = w0; w < w1; ++w) {
        const float v = cuda::load_element(xp[h * g.w + w]);
        if (v > best || v != v) {  // as the CPU: NaN wins
          best = v;
          best_at = h * g.w + w;
        }
      }
    }
    y[k] = cuda::store_element<T>(best);
    arg[k] = static_cast<int32_t>(best_at);
  }
}

template <class T>
__global__ void adaptive_ave_forward(int64_t total, Geom g, const T* x, T* y) {
  STRATA_CUDA_LOOP(k, total) {
    const int64_t j = k % g.ow, i = (k / g.ow) % g.oh, plane = k / (g.ow * g.oh);
    const T* xp = x + plane * g.h * g.w;
    const int64_t h0 = bin_start(i, g.h, g.oh), h1 = bin_end(i, g.h, g.oh);
    const int64_t w0 = bin_start(j, g.w, g.ow), w1 = bin_end(j, g.w, g.ow);
    double sum = 0.0;
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t w = w0; w < w1; ++w) sum += cuda::load_element(xp[h * g.w + w]);
    }
    y[k] = cuda::store_element<T>(static_cast<float>(sum / static_cast<double>((h1 - h0) * (w1 - w0))));
  }
}

// arg == nullptr: AVE. Bins are visited row-major, as the CPU accumulates.
template <class T>
__global__ void adaptive_backward(int64_t total, Geom g, const T* dy, const int32_t* arg, T* dx) {
  STRATA_CUDA_LOOP(k, total) {
    const int64_t w = k % g.w, h = (k / g.w) % g.h, plane = k / (g.w * g.h);
    const T* dyp = dy + plane * g.oh * g.ow;
    const int32_t* argp = arg ? arg + plane * g.oh * g.ow : nullptr;
    const int64_t at = h * g.w + w;
    int64_t i0, i1, j0, j1;
    covering_bins(h, g.h, g.oh, &i0, &i1);
    covering_bins(w, g.w, g.ow, &j0, &j1);
    float sum = 0.0f;
    for (int64_t i = i0; i <= i1; ++i) {
      const int64_t rows = bin_end(i, g.h, g.oh) - bin_start(i, g.h, g.oh);
      for (int64_t j = j0; j <= j1; ++j) {
        const int64_t o = i * g.ow + j;
        if (argp) {
          if (argp[o] == at) sum += cuda::load_element(dyp[o]);
        } else {
          const int64_t cols = bin_end(j, g.w, g.ow) - bin_start(j, g.w, g.ow);
          sum += cuda::load_element(dyp[o]) / static_cast<float>(rows * cols);
        }
      }
    }
    dx[k] = cuda::store_element<T>(sum);
  }
}

}  // namespace

void AdaptivePoolingLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const Geom g{h_, w_, out_h_, out_w_};
  const int64_t total = n_ * c_ * out_h_ * out_w_;
  if (pool_ == Pool::kMax) cuda::ensure_on_device(argmax_, {n_, c_, out_h_, out_w_}, DType::kI32, device());
  if (total == 0) return;
  const Tensor& xt = bottom[0]->data;
  Tensor& yt = top[0]->data;
  if (xt.dtype() != yt.dtype()) check_same_storage("AdaptivePooling forward", {&xt, &yt});  // names both dtypes
  cudaStream_t s = cuda::compute_stream();
  cuda::with_device_element(xt.dtype(), "AdaptivePooling forward", [&](auto e) {
    using T = decltype(e);
    const T* x = static_cast<const T*>(xt.raw_data());
    T* y = static_cast<T*>(yt.raw_data());
    if (pool_ == Pool::kMax) {
      adaptive_max_forward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, s>>>(
          total, g, x, y, argmax_.device_data<int32_t>());
    } else {
      adaptive_ave_forward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, s>>>(total, g, x, y);
    }
    STRATA_KERNEL_CHECK();
  });
}

void AdaptivePoolingLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                         const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const Geom g{h_, w_, out_h_, out_w_};
  const int64_t total = n_ * c_ * h_ * w_;
  if (total == 0) return;
  const Tensor& dyt = top[0]->diff;
  Tensor& dxt = bottom[0]->diff;
  if (dyt.dtype() != dxt.dtype()) check_same_storage("AdaptivePooling backward", {&dyt, &dxt});
  const int32_t* arg = pool_ == Pool::kMax ? argmax_.device_data<int32_t>() : nullptr;
  cuda::with_device_element(dyt.dtype(), "AdaptivePooling backward", [&](auto e) {
    using T = decltype(e);
    adaptive_backward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        total, g, static_cast<const T*>(dyt.raw_data()), arg, static_cast<T*>(dxt.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata
