// The CPU convolution over blobs stored in bf16 or f16 (Layer::call_dtype):
// each chunk of images is widened into its worker's f32 scratch
// (Workspace::wide_x, wide_y, wide_dx), run by the f32 code as images
// 0..n-1, and its outputs rounded once, so the f32 copies span one chunk,
// not the batch.
#include <cstdint>
#include <vector>

#include "layers/convolution/convolution.h"
#include "layers/epilogue.h"
#include "layers/neuron_layer.h"  // the 16-bit elements (with_float_element)

namespace strata {

void ConvolutionLayer::forward_stored(const Tensor& x, Tensor& y, std::vector<Workspace>& workspaces) {
  const int64_t image = channels_ * height_ * width_;
  const int64_t out_image = num_output_ * out_h_ * out_w_;
  with_float_element(x.dtype(), "Convolution forward", [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    for_each_chunk([&](int64_t i0, int64_t n, int worker) {
      Workspace& ws = workspaces[static_cast<size_t>(worker)];
      float* wx = ws.wide_x.data<float>();
      float* wy = ws.wide_y.data<float>();
      for (int64_t k = 0; k < n * image; ++k) wx[k] = E::load(xs[i0 * image + k]);
      forward_chunk(wx, wy, 0, n, ws);
      apply_epilogue(epilogue(), wy, n * out_image);  // a fused ReLU, before the one rounding
      for (int64_t k = 0; k < n * out_image; ++k) ys[i0 * out_image + k] = E::store(wy[k]);
    });
  });
}

void ConvolutionLayer::backward_stored(const Tensor& x, const Tensor& dy, Tensor* dx,
                                       std::vector<Workspace>& workspaces, const BackwardChunk& chunk) {
  const int64_t image = channels_ * height_ * width_;
  const int64_t out_image = num_output_ * out_h_ * out_w_;
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
      for (int64_t k = 0; k < n * image; ++k) wx[k] = E::load(xs[i0 * image + k]);
      for (int64_t k = 0; k < n * out_image; ++k) wdy[k] = E::load(dys[i0 * out_image + k]);
      chunk(wx, wdy, dxs ? wdx : nullptr, 0, n, worker);
      if (dxs) {
        for (int64_t k = 0; k < n * image; ++k) dxs[i0 * image + k] = E::store(wdx[k]);
      }
    });
  });
}

}  // namespace strata
