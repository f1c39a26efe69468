// Deconvolution (Caffe "Deconvolution", PyTorch ConvTranspose2d): the
// transpose of Convolution, read from the same convolution_param. Weight
// [channels, num_output / group, kernel_h, kernel_w] (Caffe's and PyTorch's
// layout: input channels first), bias [num_output]. Output size
//   H_out = stride_h * (H - 1) + dilation_h * (kernel_h - 1) + 1 - 2 * pad_h
// (and so for W), so that a Convolution with the same settings maps
// [H_out, W_out] back to [H, W].
//
// The CPU reuses Convolution's machinery backwards: forward is W^T x
// folded by col2im (a convolution's input gradient), backward unrolls the
// top gradient by im2col for the weight and input gradients. The GPU
// computes each output, input-gradient and weight-gradient element directly
// with the functions below (gathers: no atomics, deterministic), which
// tests/caffe_layers_test.cpp checks against the CPU path.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/filler.h"
#include "framework/layer.h"
#include "layers/host_device.h"

namespace strata {

struct DeconvGeometry {
  int64_t channels, height, width;        // bottom (per image)
  int64_t out_channels, out_h, out_w;     // top (per image)
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int64_t group;

  int64_t in_per_group() const { return channels / group; }
  int64_t out_per_group() const { return out_channels / group; }
  // Index of weight [c, o_g, ki, kj].
  STRATA_HOST_DEVICE int64_t weight_at(int64_t c, int64_t og, int64_t ki, int64_t kj) const {
    return ((c * (out_channels / group) + og) * kernel_h + ki) * kernel_w + kj;
  }
};

// Top element t of [N, out_channels, out_h, out_w]: the sum over the bottom
// pixels (ih, iw) and taps (ki, kj) with ih * stride - pad + ki * dilation == oh
// (and likewise for w), plus the bias (when not null).
STRATA_HOST_DEVICE float deconv_forward_at(const DeconvGeometry& g, int64_t t, const float* x, const float* w,
                                           const float* bias) {
  const int64_t ow = t % g.out_w;
  const int64_t oh = (t / g.out_w) % g.out_h;
  const int64_t o = (t / (g.out_w * g.out_h)) % g.out_channels;
  const int64_t n = t / (g.out_w * g.out_h * g.out_channels);
  const int64_t out_g = g.out_channels / g.group, in_g = g.channels / g.group;
  const int64_t grp = o / out_g, og = o % out_g;
  float s = bias ? bias[o] : 0.0f;
  for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
    const int64_t hh = oh + g.pad_h - ki * g.dil_h;
    if (hh < 0 || hh % g.stride_h != 0 || hh / g.stride_h >= g.height) continue;
    const int64_t ih = hh / g.stride_h;
    for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
      const int64_t ww = ow + g.pad_w - kj * g.dil_w;
      if (ww < 0 || ww % g.stride_w != 0 || ww / g.stride_w >= g.width) continue;
      const int64_t iw = ww / g.stride_w;
      for (int64_t c = grp * in_g; c < (grp + 1) * in_g; ++c) {
        s += x[((n * g.channels + c) * g.height + ih) * g.width + iw] * w[g.weight_at(c, og, ki, kj)];
      }
    }
  }
  return s;
}

// Gradient of bottom element i of [N, channels, height, width]: a
// convolution of the top gradient with the weights.
STRATA_HOST_DEVICE float deconv_input_grad_at(const DeconvGeometry& g, int64_t i, const float* dy, const float* w) {
  const int64_t iw = i % g.width;
  const int64_t ih = (i / g.width) % g.height;
  const int64_t c = (i / (g.width * g.height)) % g.channels;
  const int64_t n = i / (g.width * g.height * g.channels);
  const int64_t out_g = g.out_channels / g.group, in_g = g.channels / g.group;
  const int64_t grp = c / in_g;
  float s = 0.0f;
  for (int64_t og = 0; og < out_g; ++og) {
    const float* dyo = dy + (n * g.out_channels + grp * out_g + og) * g.out_h * g.out_w;
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      const int64_t oh = ih * g.stride_h - g.pad_h + ki * g.dil_h;
      if (oh < 0 || oh >= g.out_h) continue;
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const int64_t ow = iw * g.stride_w - g.pad_w + kj * g.dil_w;
        if (ow < 0 || ow >= g.out_w) continue;
        s += dyo[oh * g.out_w + ow] * w[g.weight_at(c, og, ki, kj)];
      }
    }
  }
  return s;
}

// Gradient of weight element k = [c, o_g, ki, kj] over `num` images.
STRATA_HOST_DEVICE float deconv_weight_grad_at(const DeconvGeometry& g, int64_t k, int64_t num, const float* x,
                                               const float* dy) {
  const int64_t out_g = g.out_channels / g.group, in_g = g.channels / g.group;
  const int64_t kj = k % g.kernel_w;
  const int64_t ki = (k / g.kernel_w) % g.kernel_h;
  const int64_t og = (k / (g.kernel_w * g.kernel_h)) % out_g;
  const int64_t c = k / (g.kernel_w * g.kernel_h * out_g);
  const int64_t o = c / in_g * out_g + og;
  float s = 0.0f;
  for (int64_t n = 0; n < num; ++n) {
    const float* xc = x + (n * g.channels + c) * g.height * g.width;
    const float* dyo = dy + (n * g.out_channels + o) * g.out_h * g.out_w;
    for (int64_t ih = 0; ih < g.height; ++ih) {
      const int64_t oh = ih * g.stride_h - g.pad_h + ki * g.dil_h;
      if (oh < 0 || oh >= g.out_h) continue;
      for (int64_t iw = 0; iw < g.width; ++iw) {
        const int64_t ow = iw * g.stride_w - g.pad_w + kj * g.dil_w;
        if (ow < 0 || ow >= g.out_w) continue;
        s += xc[ih * g.width + iw] * dyo[oh * g.out_w + ow];
      }
    }
  }
  return s;
}

class DeconvolutionLayer : public Layer {
 public:
  DeconvolutionLayer(const LayerSpec& spec, const LayerContext& ctx);
  static LayerSchema schema();
  // The weight gradient reads the input; nothing reads the output.
  BackwardReads backward_reads() const override { return {true, false}; }

  void setup(const BlobVec& bottom, const BlobVec& top) override;
  // A convolution run backwards: its GEMMs run over the input positions.
  ForwardCost forward_cost(const BlobVec& bottom, const BlobVec& top) const override;
  STRATA_CPU_METHODS;
  STRATA_CUDA_METHODS;  // in deconvolution.cu
  bool replays_in_a_graph() const override { return true; }

  // The geometry of the current shapes (after reshape), for tests.
  const DeconvGeometry& geometry() const { return geom_; }

 private:
  enum class Bias { kNo, kYes };
  void check_bottom(const Shape& s) const;

  DeconvGeometry geom_{};  // sizes from reshape()
  int64_t num_ = 0;
  Bias bias_;
  FillerSpec weight_filler_;
  FillerSpec bias_filler_;
  Tensor col_;  // [num_output * kh * kw, H * W] of one image (CPU)
};

}  // namespace strata
