// Pooling on the GPU with our own kernels: cuDNN cannot express Caffe's ceil
// rounding (the last window overhanging the padded image) nor its AVE
// divisor clipped to the padded image, so these follow pooling.cpp exactly.
// Backward gathers (one thread per input pixel, over the windows covering
// it, in the CPU's order): no atomics, deterministic. Either layout
// (Layer::call_layout): the kernels find a plane's pixels `pixel_step` apart. T is the blobs'
// element type (float, __nv_bfloat16, __half); every sum and comparison is
// in f32, each output rounded once, as pooling.cpp's 16-bit path.
#include "framework/cuda/math.h"
#include "framework/cuda/runtime.h"
#include "layers/neuron_layer.cuh"  // neuron_load/neuron_store, with_device_element
#include "layers/pooling.h"

namespace strata {

namespace {

struct PoolGeom {
  int64_t channels, height, width, out_h, out_w;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  int nhwc;  // the blobs' layout (Layer::call_layout); the mask is [N, C, out_h, out_w] in both
};

// Element k of a blob of `rows` x `cols` pixels: its plane n * C + c, and
// the pixel's index r * cols + q in the plane.
struct PixelAt {
  int64_t plane, pixel;
};
__device__ inline PixelAt pixel_at(int64_t k, const PoolGeom& g, int64_t pixels) {
  if (g.nhwc) {
    const int64_t c = k % g.channels, rest = k / g.channels;  // rest = n * pixels + pixel
    return {(rest / pixels) * g.channels + c, rest % pixels};
  }
  return {k / pixels, k % pixels};
}
// Where plane p's pixel 0 lies, and the distance between its pixels.
__device__ inline int64_t plane_first(int64_t p, const PoolGeom& g, int64_t pixels) {
  return g.nhwc ? (p / g.channels) * pixels * g.channels + p % g.channels : p * pixels;
}
__device__ inline int64_t pixel_step(const PoolGeom& g) { return g.nhwc ? g.channels : 1; }

template <class T>
__global__ void max_pool_forward(int64_t total, PoolGeom g, const T* x, T* y, int32_t* mask) {
  STRATA_CUDA_LOOP(k, total) {
    const PixelAt at = pixel_at(k, g, g.out_h * g.out_w);
    const int64_t pw = at.pixel % g.out_w;
    const int64_t ph = at.pixel / g.out_w;
    const T* xp = x + plane_first(at.plane, g, g.height * g.width);
    const int64_t step = pixel_step(g);
    const PoolSpan sh = pool_span(ph, g.kernel_h, g.stride_h, g.pad_h, g.height);
    const PoolSpan sw = pool_span(pw, g.kernel_w, g.stride_w, g.pad_w, g.width);
    int64_t idx = sh.begin * g.width + sw.begin;
    float m = neuron_load(xp[idx * step]);
    for (int64_t h = sh.begin; h < sh.end; ++h) {
      for (int64_t w = sw.begin; w < sw.end; ++w) {
        const float v = neuron_load(xp[(h * g.width + w) * step]);
        // NaN propagates; otherwise the first maximum wins.
        if (v > m || (v != v && m == m)) {
          m = v;
          idx = h * g.width + w;
        }
      }
    }
    y[k] = neuron_store<T>(m);
    mask[at.plane * g.out_h * g.out_w + at.pixel] = static_cast<int32_t>(idx);
  }
}

template <class T>
__global__ void ave_pool_forward(int64_t total, PoolGeom g, const T* x, T* y) {
  STRATA_CUDA_LOOP(k, total) {
    const PixelAt at = pixel_at(k, g, g.out_h * g.out_w);
    const int64_t pw = at.pixel % g.out_w;
    const int64_t ph = at.pixel / g.out_w;
    const T* xp = x + plane_first(at.plane, g, g.height * g.width);
    const int64_t step = pixel_step(g);
    const PoolSpan sh = pool_span(ph, g.kernel_h, g.stride_h, g.pad_h, g.height);
    const PoolSpan sw = pool_span(pw, g.kernel_w, g.stride_w, g.pad_w, g.width);
    float s = 0.0f;
    for (int64_t h = sh.begin; h < sh.end; ++h) {
      for (int64_t w = sw.begin; w < sw.end; ++w) s += neuron_load(xp[(h * g.width + w) * step]);
    }
    y[k] = neuron_store<T>(s / static_cast<float>(sh.extent * sw.extent));
  }
}

// Outputs whose window [o * stride - pad, o * stride - pad + kernel) holds
// input coordinate `i`: o in [first, last], clipped to [0, out).
__device__ inline void covering(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t out, int64_t* first,
                                int64_t* last) {
  const int64_t a = i + pad - kernel + 1;  // o * stride >= a
  *first = a <= 0 ? 0 : (a + stride - 1) / stride;
  const int64_t b = (i + pad) / stride;  // o * stride <= i + pad
  *last = b < out - 1 ? b : out - 1;
}

template <class T>
__global__ void pool_backward(int64_t total, PoolGeom g, int max_pool, const T* dy, const int32_t* mask, T* dx) {
  STRATA_CUDA_LOOP(k, total) {
    const PixelAt at = pixel_at(k, g, g.height * g.width);
    const int64_t w = at.pixel % g.width;
    const int64_t h = at.pixel / g.width;
    const int64_t plane = at.plane;
    const T* dyp = dy + plane_first(plane, g, g.out_h * g.out_w);
    const int64_t step = pixel_step(g);
    int64_t ph0, ph1, pw0, pw1;
    covering(h, g.kernel_h, g.stride_h, g.pad_h, g.out_h, &ph0, &ph1);
    covering(w, g.kernel_w, g.stride_w, g.pad_w, g.out_w, &pw0, &pw1);
    float grad = 0.0f;
    if (max_pool) {
      const int32_t* mp = mask + plane * g.out_h * g.out_w;
      const int32_t me = static_cast<int32_t>(h * g.width + w);
      for (int64_t ph = ph0; ph <= ph1; ++ph) {
        for (int64_t pw = pw0; pw <= pw1; ++pw) {
          if (mp[ph * g.out_w + pw] == me) grad += neuron_load(dyp[(ph * g.out_w + pw) * step]);
        }
      }
    } else {
      for (int64_t ph = ph0; ph <= ph1; ++ph) {
        const int64_t extent_h = pool_span(ph, g.kernel_h, g.stride_h, g.pad_h, g.height).extent;
        for (int64_t pw = pw0; pw <= pw1; ++pw) {
          const int64_t extent_w = pool_span(pw, g.kernel_w, g.stride_w, g.pad_w, g.width).extent;
          grad += neuron_load(dyp[(ph * g.out_w + pw) * step]) / static_cast<float>(extent_h * extent_w);
        }
      }
    }
    dx[k] = neuron_store<T>(grad);
  }
}

}  // namespace

void PoolingLayer::forward_cuda(const BlobVec& bottom, const BlobVec& top) {
  const PoolGeom g{channels_, height_, width_, out_h_,   out_w_, kernel_h_, kernel_w_,
                   stride_h_, stride_w_, pad_h_,  pad_w_,  call_layout() == Layout::kNHWC ? 1 : 0};
  const int64_t total = num_ * channels_ * out_h_ * out_w_;
  Tensor mask = method_ == Method::kMax ? take_mask() : Tensor();
  if (total == 0) return;
  const Tensor& x = bottom[0]->data;
  Tensor& y = top[0]->data;
  if (x.dtype() != y.dtype()) check_same_storage("Pooling forward", {&x, &y});  // names both dtypes
  with_device_element(x.dtype(), "Pooling forward", [&](auto e) {
    using T = decltype(e);
    const T* xs = static_cast<const T*>(x.raw_data());
    T* ys = static_cast<T*>(y.raw_data());
    if (method_ == Method::kMax) {
      max_pool_forward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
          total, g, xs, ys, mask.device_data<int32_t>());
    } else {
      ave_pool_forward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(total, g,
                                                                                                        xs, ys);
    }
    STRATA_KERNEL_CHECK();
  });
}

void PoolingLayer::backward_cuda(const BlobVec& top, const std::vector<bool>& propagate_down,
                                 const BlobVec& bottom) {
  if (!propagate_down[0]) return;
  const PoolGeom g{channels_, height_, width_, out_h_,   out_w_, kernel_h_, kernel_w_,
                   stride_h_, stride_w_, pad_h_,  pad_w_,  call_layout() == Layout::kNHWC ? 1 : 0};
  const int64_t total = num_ * channels_ * height_ * width_;
  if (total == 0) return;
  const bool max_pool = method_ == Method::kMax;
  const Tensor mask = max_pool ? take_mask() : Tensor();  // as forward left it
  const Tensor& dy = top[0]->diff;
  Tensor& dx = bottom[0]->diff;
  if (dx.dtype() != dy.dtype()) check_same_storage("Pooling backward", {&dy, &dx});
  with_device_element(dy.dtype(), "Pooling backward", [&](auto e) {
    using T = decltype(e);
    pool_backward<T><<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, cuda::compute_stream()>>>(
        total, g, max_pool ? 1 : 0, static_cast<const T*>(dy.raw_data()),
        max_pool ? mask.device_data<int32_t>() : nullptr, static_cast<T*>(dx.raw_data()));
    STRATA_KERNEL_CHECK();
  });
}

}  // namespace strata
