// The CPU convolution over blobs stored in bf16 or f16 (Layer::call_dtype)
// or laid out NHWC (Layer::call_layout): each chunk of images is widened
// (and gathered into NCHW) into its worker's f32 scratch (Workspace::wide_x,
// wide_y, wide_dx), run by the f32 code as images 0..n-1, and its outputs
// rounded once (and scattered back), so the copies span one chunk, not the
// batch.
#include <cstdint>
#include <vector>

#include "layers/convolution/convolution.h"
#include "layers/epilogue.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

namespace {

// n images of `channels` x `pixels` elements at `src`, laid out NCHW or NHWC,
// widened into f32 NCHW at `dst`; narrow_images the other way, rounding once.
template <class E>
void widen_images(const typename E::T* src, int64_t n, int64_t channels, int64_t pixels, Layout layout, float* dst) {
  if (layout == Layout::kNCHW) {
    for (int64_t k = 0; k < n * channels * pixels; ++k) dst[k] = E::load(src[k]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const typename E::T* s = src + i * pixels * channels;
    float* d = dst + i * channels * pixels;
    for (int64_t p = 0; p < pixels; ++p) {
      for (int64_t c = 0; c < channels; ++c) d[c * pixels + p] = E::load(s[p * channels + c]);
    }
  }
}

template <class E>
void narrow_images(const float* src, int64_t n, int64_t channels, int64_t pixels, Layout layout, typename E::T* dst) {
  if (layout == Layout::kNCHW) {
    for (int64_t k = 0; k < n * channels * pixels; ++k) dst[k] = E::store(src[k]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* s = src + i * channels * pixels;
    typename E::T* d = dst + i * pixels * channels;
    for (int64_t p = 0; p < pixels; ++p) {
      for (int64_t c = 0; c < channels; ++c) d[p * channels + c] = E::store(s[c * pixels + p]);
    }
  }
}

}  // namespace

void ConvolutionLayer::forward_stored(const Tensor& x, Tensor& y, std::vector<Workspace>& workspaces) {
  const int64_t image = channels_ * height_ * width_;
  const int64_t out_image = num_output_ * out_h_ * out_w_;
  const int64_t in_pixels = height_ * width_, out_pixels = out_h_ * out_w_;
  const Layout layout = call_layout();
  with_float_element(x.dtype(), "Convolution forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    for_each_chunk([&](int64_t i0, int64_t n, int worker) {
      Workspace& ws = workspaces[static_cast<size_t>(worker)];
      float* wx = ws.wide_x.data<float>();
      float* wy = ws.wide_y.data<float>();
      widen_images<E>(xs + i0 * image, n, channels_, in_pixels, layout, wx);
      forward_chunk(wx, wy, 0, n, ws);
      apply_epilogue(epilogue(), wy, n * out_image);  // a fused ReLU, before the one rounding
      narrow_images<E>(wy, n, num_output_, out_pixels, layout, ys + i0 * out_image);
    });
  });
}

void ConvolutionLayer::backward_stored(const Tensor& x, const Tensor& dy, Tensor* dx,
                                       std::vector<Workspace>& workspaces, const BackwardChunk& chunk) {
  const int64_t image = channels_ * height_ * width_;
  const int64_t out_image = num_output_ * out_h_ * out_w_;
  const int64_t in_pixels = height_ * width_, out_pixels = out_h_ * out_w_;
  const Layout layout = call_layout();
  with_float_element(dy.dtype(), "Convolution backward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* xs = x.data<T>();
    const T* dys = dy.data<T>();
    T* dxs = dx ? dx->data<T>() : nullptr;
    for_each_chunk([&](int64_t i0, int64_t n, int worker) {
      Workspace& ws = workspaces[static_cast<size_t>(worker)];
      float* wx = ws.wide_x.data<float>();
      float* wdy = ws.wide_y.data<float>();
      float* wdx = ws.wide_dx.data<float>();
      widen_images<E>(xs + i0 * image, n, channels_, in_pixels, layout, wx);
      widen_images<E>(dys + i0 * out_image, n, num_output_, out_pixels, layout, wdy);
      chunk(wx, wdy, dxs ? wdx : nullptr, 0, n, worker);
      if (dxs) narrow_images<E>(wdx, n, channels_, in_pixels, layout, dxs + i0 * image);
    });
  });
}

}  // namespace strata
