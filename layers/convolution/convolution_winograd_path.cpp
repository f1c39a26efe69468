// The Convolution layer's members on the Winograd F(2x2, 3x3) path
// (layers/convolution/convolution_winograd.h): 3x3 stride-1 undilated convolutions.
// Part of layers/convolution.*.
//
// Per chunk of n images and per group, forward is
//   V = transform_input(x), M[xi] = U[xi] * V[xi] (16 GEMMs), y = transform_output(M) + bias;
// backward is
//   dM = transform_output_grad(dy), dU[xi] = dM[xi] * V[xi]^T, dw += G^T dU G,
//   and dx = the same forward on dy padded by 2 - pad with the flipped filters.
#include <cstdint>

#include "layers/convolution/convolution_patches.h"
#include "layers/convolution/convolution_winograd.h"
#include "framework/cpu/math.h"
#include "layers/convolution/convolution.h"
#include "framework/scratch.h"

namespace strata {

namespace {

// A chunk aims at this many tiles (the GEMMs' width): fewer make the 16 GEMMs
// repack their filters too often for the work they do.
constexpr int64_t kTargetTiles = 512;
// Upper bound on one worker's transformed inputs (floats).
constexpr int64_t kMaxTransformFloats = int64_t{4} << 20;  // 16 MiB

}  // namespace

int64_t ConvolutionLayer::winograd_chunk_images() const {
  const int64_t tiles = winograd::tile_grid(height_, width_).count() > winograd::tile_grid(out_h_, out_w_).count()
                            ? winograd::tile_grid(height_, width_).count()
                            : winograd::tile_grid(out_h_, out_w_).count();
  const int64_t widest = channels_ > num_output_ ? channels_ : num_output_;
  int64_t n_img = (kTargetTiles + tiles - 1) / tiles;
  const int64_t by_memory = kMaxTransformFloats / (winograd::kPoints * widest * tiles);
  if (n_img > by_memory) n_img = by_memory;
  return n_img < 1 ? 1 : n_img;
}

void ConvolutionLayer::lay_out_winograd_workspace(ScratchCarver& c, Workspace& ws) const {
  const winograd::TileGrid out_grid = winograd::tile_grid(out_h_, out_w_);
  const winograd::TileGrid in_grid = winograd::tile_grid(height_, width_);
  const int64_t tiles = chunk_images_ * (out_grid.count() > in_grid.count() ? out_grid.count() : in_grid.count());
  const int64_t in_g = channels_ / group_, out_g = num_output_ / group_;
  const int64_t widest = in_g > out_g ? in_g : out_g;
  ws.wino_v = c.take({winograd::kPoints * widest * tiles});
  ws.wino_m = c.take({winograd::kPoints * widest * tiles});
  ws.wino_du = c.take({winograd::kPoints * out_g * in_g});
  const int64_t a = winograd::input_scratch_floats(out_grid), b = winograd::input_scratch_floats(in_grid);
  ws.wino_scratch = c.take({a > b ? a : b});
}

void ConvolutionLayer::winograd_transform_filters(const float* w, int64_t out_g, int64_t in_g, Tensor& u) const {
  u.resize({group_ * winograd::kPoints * out_g * in_g});
  for (int64_t g = 0; g < group_; ++g) {
    winograd::transform_filters(w + g * out_g * in_g * 9, out_g, in_g,
                                u.data<float>() + g * winograd::kPoints * out_g * in_g);
  }
}

namespace {

// out[xi] (rows x T) = u[xi] (rows x inner) * v[xi] (inner x T) for the 16 points.
void multiply_points(const float* u, const float* v, int64_t rows, int64_t inner, int64_t T, float* out) {
  for (int xi = 0; xi < winograd::kPoints; ++xi) {
    gemm(Transpose::kNo, Transpose::kNo, rows, T, inner, 1.0f, u + xi * rows * inner, v + xi * inner * T, 0.0f,
         out + xi * rows * T);
  }
}

}  // namespace

void ConvolutionLayer::winograd_forward_chunk(const float* x, float* y, int64_t i0, int64_t n, Workspace& ws) const {
  const winograd::TileGrid grid = winograd::tile_grid(out_h_, out_w_);
  const int64_t T = n * grid.count();
  const int64_t in_g = channels_ / group_, out_g = num_output_ / group_;
  const int64_t image = channels_ * height_ * width_;
  const int64_t out_image = num_output_ * out_h_ * out_w_;
  const float* bias = bias_ == Bias::kYes ? param(1).data.data<float>() : nullptr;
  float* v = ws.wino_v.data<float>();
  float* m = ws.wino_m.data<float>();
  for (int64_t g = 0; g < group_; ++g) {
    const winograd::Planes planes{x + i0 * image + g * in_g * height_ * width_, n, image, in_g, height_, width_,
                                  pad_.h, pad_.w};
    winograd::transform_input(planes, grid, v, ws.wino_scratch.data<float>());
    multiply_points(ws.wino_u.data<float>() + g * winograd::kPoints * out_g * in_g, v, out_g, in_g, T, m);
    winograd::transform_output(m, out_g, n, grid, out_h_, out_w_, bias ? bias + g * out_g : nullptr,
                               y + i0 * out_image + g * out_g * out_h_ * out_w_, out_image);
  }
}

void ConvolutionLayer::winograd_backward_chunk(const float* x, const float* dy, float* dx, int64_t i0, int64_t n,
                                               float* dw, float* db, float dw_beta, Workspace& ws) const {
  const winograd::TileGrid grid = winograd::tile_grid(out_h_, out_w_);
  const int64_t T = n * grid.count();
  const int64_t in_g = channels_ / group_, out_g = num_output_ / group_;
  const int64_t hw = out_h_ * out_w_;
  const int64_t image = channels_ * height_ * width_;
  const int64_t out_image = num_output_ * hw;
  float* v = ws.wino_v.data<float>();
  float* m = ws.wino_m.data<float>();
  float* du = ws.wino_du.data<float>();
  float* scratch = ws.wino_scratch.data<float>();
  if (db) {
    for (int64_t o = 0; o < num_output_; ++o) {
      float s = 0.0f;
      for (int64_t i = 0; i < n; ++i) s += conv_patches::row_sum(dy + (i0 + i) * out_image + o * hw, hw);
      db[o] = dw_beta == 0.0f ? s : db[o] + s;
    }
  }
  for (int64_t g = 0; g < group_; ++g) {
    // Weight gradient: dU[xi] = dM[xi] * V[xi]^T over the chunk's tiles.
    const winograd::Planes planes{x + i0 * image + g * in_g * height_ * width_, n, image, in_g, height_, width_,
                                  pad_.h, pad_.w};
    winograd::transform_input(planes, grid, v, scratch);
    winograd::transform_output_grad(dy + i0 * out_image + g * out_g * hw, out_g, n, grid, out_h_, out_w_, out_image,
                                    m);
    for (int xi = 0; xi < winograd::kPoints; ++xi) {
      gemm(Transpose::kNo, Transpose::kYes, out_g, in_g, T, 1.0f, m + xi * out_g * T, v + xi * in_g * T, 0.0f,
           du + xi * out_g * in_g);
    }
    winograd::transform_filter_grad(du, out_g, in_g, dw_beta, dw + g * out_g * in_g * 9);
    if (!dx) continue;
    // Input gradient: the top gradient, padded by 2 - pad, convolved with the
    // flipped filters (input and output channels swapped).
    const winograd::TileGrid in_grid = winograd::tile_grid(height_, width_);
    const int64_t in_T = n * in_grid.count();
    const winograd::Planes grads{dy + i0 * out_image + g * out_g * hw, n, out_image, out_g, out_h_, out_w_,
                                 2 - pad_.h, 2 - pad_.w};
    winograd::transform_input(grads, in_grid, v, scratch);
    multiply_points(ws.wino_u_flipped.data<float>() + g * winograd::kPoints * in_g * out_g, v, in_g, out_g, in_T, m);
    winograd::transform_output(m, in_g, n, in_grid, height_, width_, nullptr,
                               dx + i0 * image + g * in_g * height_ * width_, image);
  }
}

}  // namespace strata
