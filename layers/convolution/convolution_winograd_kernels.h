// Internal to the Winograd transforms (convolution_winograd*.cpp): what their
// portable, AVX2 and AVX-512 versions share, and the vector versions' entry
// points (each with the contract of the transform of the same name in
// convolution_winograd.h). Every version computes the same additions and
// subtractions in the same order, so all three give the same bits.
#pragma once

#include <cstdint>

#include "layers/convolution/convolution_winograd.h"

namespace strata {
namespace winograd {
namespace detail {

// Padded plane rows and columns a grid reads: 2 per tile plus the 3x3 overlap.
inline int64_t plane_rows(TileGrid g) { return 2 * g.tiles_h + 2; }
inline int64_t plane_cols(TileGrid g) { return 2 * g.tiles_w + 2; }

// dst[r][c] = src[r - pad_h][c - pad_w], 0 outside the source.
void pad_plane(const float* src, int64_t height, int64_t width, int64_t pad_h, int64_t pad_w, int64_t rows,
               int64_t cols, float* dst);

// input_scratch_floats' layout: the padded plane, then 4 rows of row sums
// (B^T d for one tile row), each with room for vector loads past its end.
struct InputScratch {
  float* plane;
  float* t[4];
};
InputScratch input_scratch(TileGrid grid, float* scratch);

// One tile at a time: the portable loops, and the vector versions' last
// tiles of a row.

// B^T d for one tile row, columns x0 .. cols of the padded rows r0 .. r0 + 3 * cols.
inline void input_row_sums(const float* r0, int64_t cols, int64_t x0, float* const* t) {
  const float* r1 = r0 + cols;
  const float* r2 = r1 + cols;
  const float* r3 = r2 + cols;
  for (int64_t x = x0; x < cols; ++x) {
    t[0][x] = r0[x] - r2[x];
    t[1][x] = r1[x] + r2[x];
    t[2][x] = r2[x] - r1[x];
    t[3][x] = r1[x] - r3[x];
  }
}

// (B^T d) B for tile tx of a tile row: V[xi][tx] (xi = 4k + j) at dst + xi * xs + tx.
inline void input_tile(float* const* t, int64_t tx, float* dst, int64_t xs) {
  for (int k = 0; k < 4; ++k) {
    const float* s = t[k];
    const float a = s[2 * tx], b = s[2 * tx + 1], e = s[2 * tx + 2], f = s[2 * tx + 3];
    float* d = dst + 4 * k * xs + tx;
    d[0] = a - e;
    d[xs] = b + e;
    d[2 * xs] = e - b;
    d[3 * xs] = b - f;
  }
}

// A^T M A + b for tile tx of a tile row (M[xi][tx] at mt + xi * xs + tx): the
// outputs of rows y0 and (row1) y0 + out_w, columns 2tx and (inside the image) 2tx + 1.
inline void output_tile(const float* mt, int64_t xs, int64_t tx, float b, bool row1, int64_t out_w, float* y0) {
  float s0[4], s1[4];
  // A^T M: rows (1, 1, 1, 0) and (0, 1, -1, -1).
  for (int j = 0; j < 4; ++j) {
    const float m0 = mt[j * xs + tx], m1 = mt[(4 + j) * xs + tx];
    const float m2 = mt[(8 + j) * xs + tx], m3 = mt[(12 + j) * xs + tx];
    s0[j] = m0 + m1 + m2;
    s1[j] = m1 - m2 - m3;
  }
  const int64_t x = 2 * tx;
  float* y1 = y0 + out_w;
  y0[x] = s0[0] + s0[1] + s0[2] + b;
  if (row1) y1[x] = s1[0] + s1[1] + s1[2] + b;
  if (x + 1 < out_w) {
    y0[x + 1] = s0[1] - s0[2] - s0[3] + b;
    if (row1) y1[x + 1] = s1[1] - s1[2] - s1[3] + b;
  }
}

// A dy A^T for tile tx of a tile row of the top gradient (rows g0 and, with
// row1, g0 + out_w; zero past the right edge): dM[xi][tx] at dt + xi * xs + tx.
inline void output_grad_tile(const float* g0, int64_t tx, bool row1, int64_t out_w, float* dt, int64_t xs) {
  const int64_t x = 2 * tx;
  const bool col1 = x + 1 < out_w;
  const float a = g0[x], b = col1 ? g0[x + 1] : 0.0f;
  const float c = row1 ? g0[out_w + x] : 0.0f, e = row1 && col1 ? g0[out_w + x + 1] : 0.0f;
  // A d: rows d0, d0 + d1, d0 - d1, -d1; then the same on columns.
  const float r[4][2] = {{a, b}, {a + c, b + e}, {a - c, b - e}, {-c, -e}};
  for (int k = 0; k < 4; ++k) {
    float* q = dt + 4 * k * xs + tx;
    q[0] = r[k][0];
    q[xs] = r[k][0] + r[k][1];
    q[2 * xs] = r[k][0] - r[k][1];
    q[3 * xs] = -r[k][1];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define STRATA_WINOGRAD_VECTOR 1
void transform_input_avx2(const Planes& p, TileGrid grid, float* v, float* scratch);
void transform_output_avx2(const float* m, int64_t out, int64_t n, TileGrid grid, int64_t out_h, int64_t out_w,
                           const float* bias, float* y, int64_t image_stride);
void transform_output_grad_avx2(const float* dy, int64_t out, int64_t n, TileGrid grid, int64_t out_h,
                                int64_t out_w, int64_t image_stride, float* dm);

void transform_filters_avx512(const float* w, int64_t out, int64_t in, float* u);
void transform_input_avx512(const Planes& p, TileGrid grid, float* v, float* scratch);
void transform_output_avx512(const float* m, int64_t out, int64_t n, TileGrid grid, int64_t out_h, int64_t out_w,
                             const float* bias, float* y, int64_t image_stride);
void transform_output_grad_avx512(const float* dy, int64_t out, int64_t n, TileGrid grid, int64_t out_h,
                                  int64_t out_w, int64_t image_stride, float* dm);
void transform_filter_grad_avx512(const float* du, int64_t out, int64_t in, float beta, float* dw);
#endif

}  // namespace detail
}  // namespace winograd
}  // namespace strata
