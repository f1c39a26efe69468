// Internal to the Convolution layer (layers/convolution/convolution_winograd_path.cpp):
// the transforms of Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray,
// "Fast Algorithms for Convolutional Neural Networks", 2015) for 3x3,
// stride-1, undilated convolutions.
//
// Each 2x2 block ("tile") of outputs comes from a 4x4 window of the padded
// input. In the transformed domain the convolution is 16 independent
// products, one per point xi of the 4x4 tile:
//
//   M[xi][o][t] = sum_c U[xi][o][c] * V[xi][c][t]        (16 GEMMs)
//   U = G g G^T (filters), V = B^T d B (input windows), y = A^T M A (outputs)
//
// which needs 16 multiplications per tile and channel pair where the direct
// convolution needs 36 (2.25x fewer). The transforms' coefficients are 0,
// +-1 and 1/2, so rounding stays that of a direct convolution's sums.
// Backward: the input gradient of a stride-1 convolution is the convolution
// of the top gradient (padded by 2 - pad) with the flipped kernel, so it is a
// forward; the weight gradient is dU[xi] = dM[xi] * V[xi]^T with dM = A dy
// A^T, then dg = G^T dU G.
//
// Layouts: a chunk of n images has T = n * tiles_h * tiles_w tiles, numbered
// image-major then row-major. V is [16][channels][T], M and dM [16][out][T],
// U and dU [16][out][in].
#pragma once

#include <cstdint>

namespace strata {
namespace winograd {

constexpr int kPoints = 16;  // 4x4 transformed tile

// The tiles covering an out_h x out_w output grid (the last row or column of
// tiles may stick out by one; those outputs are dropped).
struct TileGrid {
  int64_t tiles_h = 0, tiles_w = 0;
  int64_t count() const { return tiles_h * tiles_w; }
};
TileGrid tile_grid(int64_t out_h, int64_t out_w);

// A chunk of n images of `channels` planes of height x width, `image_stride`
// floats apart (the first plane of the first image at `x`), read through
// zero padding pad_h / pad_w (negative crops).
struct Planes {
  const float* x;
  int64_t n, image_stride, channels, height, width, pad_h, pad_w;
};

// Floats of scratch transform_input needs for a grid.
int64_t input_scratch_floats(TileGrid grid);

// U[xi][o][c] = (G g G^T)[xi] for weights w [out][in][3][3].
void transform_filters(const float* w, int64_t out, int64_t in, float* u);

// V[xi][c][t] = (B^T d B)[xi] for every tile t of the chunk (V row length T).
void transform_input(const Planes& p, TileGrid grid, float* v, float* scratch);

// Images of [out][out_h][out_w] (image_stride floats apart, from y) = A^T M A
// (+ bias[o] when bias is not null).
void transform_output(const float* m, int64_t out, int64_t n, TileGrid grid, int64_t out_h, int64_t out_w,
                      const float* bias, float* y, int64_t image_stride);

// dM[xi][o][t] = (A dy A^T)[xi] for the tiles of the top gradient dy (images
// of [out][out_h][out_w], image_stride apart; zero past its edges).
void transform_output_grad(const float* dy, int64_t out, int64_t n, TileGrid grid, int64_t out_h, int64_t out_w,
                           int64_t image_stride, float* dm);

// dw[o][c] (3x3) = G^T dU[.][o][c] G + beta * dw (beta == 0 never reads dw).
void transform_filter_grad(const float* du, int64_t out, int64_t in, float beta, float* dw);

// Whether the transforms run vectorised (the AVX2 or AVX-512 path of
// cpu_isa()); the Convolution layer takes Winograd by itself only then.
bool vector_transforms();

// kAuto: the transforms of the CPU path (cpu_isa(): AVX-512, AVX2 or the
// portable loops, all giving the same bits); kPortable forces the loops (to
// test them on any CPU).
enum class Kernels { kAuto, kPortable };
void force_kernels_for_testing(Kernels k);

}  // namespace winograd
}  // namespace strata
