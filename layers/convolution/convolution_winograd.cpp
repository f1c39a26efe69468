// Winograd F(2x2, 3x3) transforms (convolution_winograd.h): the portable
// loops, and the choice between them and the AVX2 and AVX-512 versions
// (convolution_winograd_avx2.cpp, convolution_winograd_avx512.cpp).
#include "layers/convolution/convolution_winograd.h"

#include <atomic>
#include <cstring>

#include "framework/cpu/cpu_isa.h"
#include "layers/convolution/convolution_winograd_kernels.h"

namespace strata {
namespace winograd {

TileGrid tile_grid(int64_t out_h, int64_t out_w) { return TileGrid{(out_h + 1) / 2, (out_w + 1) / 2}; }

// The padded plane, then 4 rows of row sums; each with room for the vector
// loads that read past its end (the lanes they fill are never stored).
int64_t input_scratch_floats(TileGrid grid) {
  return detail::plane_rows(grid) * detail::plane_cols(grid) + 5 * (detail::plane_cols(grid) + 48);
}

namespace detail {

void pad_plane(const float* src, int64_t height, int64_t width, int64_t pad_h, int64_t pad_w, int64_t rows,
               int64_t cols, float* dst) {
  const int64_t c_lo = pad_w > 0 ? (pad_w < cols ? pad_w : cols) : 0;
  int64_t c_hi = width + pad_w < cols ? width + pad_w : cols;
  if (c_hi < c_lo) c_hi = c_lo;
  for (int64_t r = 0; r < rows; ++r, dst += cols) {
    const int64_t ih = r - pad_h;
    if (ih < 0 || ih >= height || c_hi == c_lo) {
      std::memset(dst, 0, sizeof(float) * cols);
      continue;
    }
    for (int64_t c = 0; c < c_lo; ++c) dst[c] = 0.0f;
    std::memcpy(dst + c_lo, src + ih * width + (c_lo - pad_w), sizeof(float) * (c_hi - c_lo));
    for (int64_t c = c_hi; c < cols; ++c) dst[c] = 0.0f;
  }
}

InputScratch input_scratch(TileGrid grid, float* scratch) {
  const int64_t rows = plane_rows(grid), cols = plane_cols(grid);
  InputScratch in{scratch, {}};
  for (int k = 0; k < 4; ++k) in.t[k] = scratch + rows * cols + 48 + k * (cols + 48);
  return in;
}

}  // namespace detail

namespace {

using detail::InputScratch;
using detail::input_scratch;
using detail::pad_plane;
using detail::plane_cols;
using detail::plane_rows;

// The portable versions (any CPU; the compiler vectorises what it can).
void transform_filters_scalar(const float* w, int64_t out, int64_t in, float* u) {
  const int64_t xs = out * in;  // floats between transformed points
  for (int64_t oc = 0; oc < out * in; ++oc) {
    const float* g = w + oc * 9;
    // Gg: 4 rows of 3.
    float a[4][3];
    for (int j = 0; j < 3; ++j) {
      a[0][j] = g[j];
      a[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
      a[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
      a[3][j] = g[6 + j];
    }
    for (int i = 0; i < 4; ++i) {
      float* d = u + 4 * i * xs + oc;
      d[0] = a[i][0];
      d[xs] = 0.5f * (a[i][0] + a[i][1] + a[i][2]);
      d[2 * xs] = 0.5f * (a[i][0] - a[i][1] + a[i][2]);
      d[3 * xs] = a[i][2];
    }
  }
}

void transform_input_scalar(const Planes& p, TileGrid grid, float* v, float* scratch) {
  const int64_t per_image = grid.count();
  const int64_t T = p.n * per_image;
  const int64_t xs = p.channels * T;  // floats between transformed points
  const int64_t rows = plane_rows(grid), cols = plane_cols(grid);
  const InputScratch in = input_scratch(grid, scratch);
  const int64_t tw = grid.tiles_w;
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t c = 0; c < p.channels; ++c) {
      pad_plane(p.x + i * p.image_stride + c * p.height * p.width, p.height, p.width, p.pad_h, p.pad_w, rows, cols,
                in.plane);
      float* vc = v + c * T + i * per_image;
      for (int64_t ty = 0; ty < grid.tiles_h; ++ty) {
        detail::input_row_sums(in.plane + 2 * ty * cols, cols, 0, in.t);
        for (int64_t tx = 0; tx < tw; ++tx) detail::input_tile(in.t, tx, vc + ty * tw, xs);
      }
    }
  }
}

void transform_output_scalar(const float* m, int64_t out, int64_t n, TileGrid grid, int64_t out_h, int64_t out_w,
                             const float* bias, float* y, int64_t image_stride) {
  const int64_t per_image = grid.count();
  const int64_t T = n * per_image;
  const int64_t xs = out * T;
  const int64_t tw = grid.tiles_w;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      const float* mo = m + o * T + i * per_image;
      float* yo = y + i * image_stride + o * out_h * out_w;
      const float b = bias ? bias[o] : 0.0f;
      for (int64_t ty = 0; ty < grid.tiles_h; ++ty) {
        const bool row1 = 2 * ty + 1 < out_h;
        float* y0 = yo + 2 * ty * out_w;
        for (int64_t tx = 0; tx < tw; ++tx) detail::output_tile(mo + ty * tw, xs, tx, b, row1, out_w, y0);
      }
    }
  }
}

void transform_output_grad_scalar(const float* dy, int64_t out, int64_t n, TileGrid grid, int64_t out_h,
                                  int64_t out_w, int64_t image_stride, float* dm) {
  const int64_t per_image = grid.count();
  const int64_t T = n * per_image;
  const int64_t xs = out * T;
  const int64_t tw = grid.tiles_w;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      const float* g = dy + i * image_stride + o * out_h * out_w;
      float* d = dm + o * T + i * per_image;
      for (int64_t ty = 0; ty < grid.tiles_h; ++ty) {
        const bool row1 = 2 * ty + 1 < out_h;
        const float* g0 = g + 2 * ty * out_w;
        for (int64_t tx = 0; tx < tw; ++tx) detail::output_grad_tile(g0, tx, row1, out_w, d + ty * tw, xs);
      }
    }
  }
}

void transform_filter_grad_scalar(const float* du, int64_t out, int64_t in, float beta, float* dw) {
  const int64_t xs = out * in;
  for (int64_t oc = 0; oc < out * in; ++oc) {
    // G^T dU: 3 rows of 4.
    float q[3][4];
    for (int j = 0; j < 4; ++j) {
      const float u0 = du[j * xs + oc], u1 = du[(4 + j) * xs + oc];
      const float u2 = du[(8 + j) * xs + oc], u3 = du[(12 + j) * xs + oc];
      q[0][j] = u0 + 0.5f * (u1 + u2);
      q[1][j] = 0.5f * (u1 - u2);
      q[2][j] = 0.5f * (u1 + u2) + u3;
    }
    float* g = dw + oc * 9;
    for (int i = 0; i < 3; ++i) {
      const float v[3] = {q[i][0] + 0.5f * (q[i][1] + q[i][2]), 0.5f * (q[i][1] - q[i][2]),
                          0.5f * (q[i][1] + q[i][2]) + q[i][3]};
      for (int j = 0; j < 3; ++j) g[3 * i + j] = beta == 0.0f ? v[j] : beta * g[3 * i + j] + v[j];
    }
  }
}

}  // namespace


namespace {

std::atomic<Kernels> g_kernels{Kernels::kAuto};

// The transforms' path: the CPU path's (cpu_isa()) unless the portable loops
// are forced.
CpuIsa path() {
  if (g_kernels.load(std::memory_order_relaxed) == Kernels::kPortable) return CpuIsa::kPortable;
#ifdef STRATA_WINOGRAD_VECTOR
  return cpu_isa();
#else
  return CpuIsa::kPortable;
#endif
}

}  // namespace

void force_kernels_for_testing(Kernels k) { g_kernels.store(k, std::memory_order_relaxed); }

bool vector_transforms() { return path() != CpuIsa::kPortable; }

// The filter transforms run once per layer and step, not per image: AVX2
// takes the portable loops for them.
void transform_filters(const float* w, int64_t out, int64_t in, float* u) {
#ifdef STRATA_WINOGRAD_VECTOR
  if (path() == CpuIsa::kAvx512) return detail::transform_filters_avx512(w, out, in, u);
#endif
  transform_filters_scalar(w, out, in, u);
}

void transform_input(const Planes& p, TileGrid grid, float* v, float* scratch) {
#ifdef STRATA_WINOGRAD_VECTOR
  switch (path()) {
    case CpuIsa::kAvx512: return detail::transform_input_avx512(p, grid, v, scratch);
    case CpuIsa::kAvx2: return detail::transform_input_avx2(p, grid, v, scratch);
    case CpuIsa::kPortable: break;
  }
#endif
  transform_input_scalar(p, grid, v, scratch);
}

void transform_output(const float* m, int64_t out, int64_t n, TileGrid grid, int64_t out_h, int64_t out_w,
                      const float* bias, float* y, int64_t image_stride) {
#ifdef STRATA_WINOGRAD_VECTOR
  switch (path()) {
    case CpuIsa::kAvx512: return detail::transform_output_avx512(m, out, n, grid, out_h, out_w, bias, y, image_stride);
    case CpuIsa::kAvx2: return detail::transform_output_avx2(m, out, n, grid, out_h, out_w, bias, y, image_stride);
    case CpuIsa::kPortable: break;
  }
#endif
  transform_output_scalar(m, out, n, grid, out_h, out_w, bias, y, image_stride);
}

void transform_output_grad(const float* dy, int64_t out, int64_t n, TileGrid grid, int64_t out_h, int64_t out_w,
                           int64_t image_stride, float* dm) {
#ifdef STRATA_WINOGRAD_VECTOR
  switch (path()) {
    case CpuIsa::kAvx512:
      return detail::transform_output_grad_avx512(dy, out, n, grid, out_h, out_w, image_stride, dm);
    case CpuIsa::kAvx2: return detail::transform_output_grad_avx2(dy, out, n, grid, out_h, out_w, image_stride, dm);
    case CpuIsa::kPortable: break;
  }
#endif
  transform_output_grad_scalar(dy, out, n, grid, out_h, out_w, image_stride, dm);
}

void transform_filter_grad(const float* du, int64_t out, int64_t in, float beta, float* dw) {
#ifdef STRATA_WINOGRAD_VECTOR
  if (path() == CpuIsa::kAvx512) return detail::transform_filter_grad_avx512(du, out, in, beta, dw);
#endif
  transform_filter_grad_scalar(du, out, in, beta, dw);
}

}  // namespace winograd
}  // namespace strata
