// LRN (Caffe "LRN"): local response normalisation, as in AlexNet and
// GoogLeNet. For NCHW input x, with n = local_size (odd) and a window of n
// centred on each element, zero outside the input:
//   ACROSS_CHANNELS: s = k + alpha / n   * sum over n channels       of x^2
//   WITHIN_CHANNEL:  s = 1 + alpha / n^2 * sum over an n x n patch   of x^2
//   y = x * s^-beta
// ACROSS_CHANNELS is PyTorch's LocalResponseNorm. WITHIN_CHANNEL is what
// Caffe computes with AVE pooling (stride 1, pad (n - 1) / 2, so every
// window counts n^2 cells) and a Power layer whose shift is fixed at 1: k
// has no effect there, in Caffe and here.
//
// Backward (the window is symmetric, so the elements whose window holds x_i
// are those in x_i's own window):
//   dx_i = dy_i * s_i^-beta - 2 * beta * (alpha / n or n^2) * x_i * sum_{j in window(i)} dy_j * y_j / s_j
//
// The per-element formulas below are shared by lrn.cpp and lrn.cu.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "framework/layer.h"
#include "layers/host_device.h"

namespace strata {

struct LrnGeometry {
  int64_t channels, height, width;
  int64_t size;     // local_size
  int64_t pre_pad;  // (size - 1) / 2: the window of c is [c - pre_pad, c - pre_pad + size)
  float alpha_over_n;  // alpha / n (across) or alpha / n^2 (within)
  float beta;
  float k;          // 1 within channels
  int within;       // 1: WITHIN_CHANNEL, 0: ACROSS_CHANNELS

  // sum of f(j) over the window of flat index i of [N, C, H, W].
  template <class F>
  STRATA_HOST_DEVICE float window_sum(int64_t i, const F& f) const {
    const int64_t plane = height * width;
    float s = 0.0f;
    if (!within) {
      const int64_t c = (i / plane) % channels;
      const int64_t base = i - c * plane;  // channel 0 of this pixel
      const int64_t c0 = c - pre_pad < 0 ? 0 : c - pre_pad;
      const int64_t c1 = c - pre_pad + size < channels ? c - pre_pad + size : channels;
      for (int64_t cc = c0; cc < c1; ++cc) s += f(base + cc * plane);
      return s;
    }
    const int64_t w = i % width;
    const int64_t h = (i / width) % height;
    const int64_t base = i - h * width - w;  // (0, 0) of this plane
    const int64_t h0 = h - pre_pad < 0 ? 0 : h - pre_pad;
    const int64_t h1 = h - pre_pad + size < height ? h - pre_pad + size : height;
    const int64_t w0 = w - pre_pad < 0 ? 0 : w - pre_pad;
    const int64_t w1 = w - pre_pad + size < width ? w - pre_pad + size : width;
    for (int64_t hh = h0; hh < h1; ++hh) {
      for (int64_t ww = w0; ww < w1; ++ww) s += f(base + hh * width + ww);
    }
    return s;
  }
};

struct LrnSquare {
  const float* x;
  STRATA_HOST_DEVICE float operator()(int64_t j) const { return x[j] * x[j]; }
};

struct LrnRatio {  // dy * y / s
  const float* dy;
  const float* y;
  const float* s;
  STRATA_HOST_DEVICE float operator()(int64_t j) const { return dy[j] * y[j] / s[j]; }
};

// s_i and y_i; writes both.
STRATA_HOST_DEVICE void lrn_forward_at(const LrnGeometry& g, int64_t i, const float* x, float* s, float* y) {
  const float si = g.k + g.alpha_over_n * g.window_sum(i, LrnSquare{x});
  s[i] = si;
  y[i] = x[i] * powf(si, -g.beta);
}

STRATA_HOST_DEVICE float lrn_backward_at(const LrnGeometry& g, int64_t i, const float* x, const float* y,
                                         const float* s, const float* dy) {
  const float r = g.window_sum(i, LrnRatio{dy, y, s});
  return dy[i] * powf(s[i], -g.beta) - 2.0f * g.beta * g.alpha_over_n * x[i] * r;
}

class LRNLayer : public Layer {
 public:
  LRNLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in lrn.cu
  bool replays_in_a_graph() const override { return true; }

 private:
  void check_bottom(const Shape& s) const;

  LrnGeometry geom_{};  // channels/height/width set by reshape()
  int64_t count_ = 0;
  Tensor scale_;        // s of every element, kept for backward
};

}  // namespace strata
