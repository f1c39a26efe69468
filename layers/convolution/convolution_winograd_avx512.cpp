// The AVX-512 Winograd transforms (convolution_winograd_kernels.h): 16 tiles
// of a tile row at once, the stride-2 walk over a padded row as two lane
// permutations (even and odd columns), masks for the last tiles of a row.
#include "layers/convolution/convolution_winograd_kernels.h"

#include "framework/cpu/gemm_avx512.h"

#ifdef STRATA_GEMM_AVX512
namespace strata {
namespace winograd {
namespace detail {

// GCC 12 warns inside its own AVX-512 intrinsics (their deliberately
// undefined pass-through operand).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

STRATA_AVX512 inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n > 0 ? n : 0)) - 1u);
}

// even[j] = p[2j], odd[j] = p[2j + 1] for j < 16 (reads p[0..31]).
STRATA_AVX512 inline void split_even_odd(const float* p, __m512& even, __m512& odd) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
  even = _mm512_permutex2var_ps(lo, ie, hi);
  odd = _mm512_permutex2var_ps(lo, io, hi);
}

}  // namespace

STRATA_AVX512 void transform_filters_avx512(const float* w, int64_t out, int64_t in, float* u) {
  const int64_t xs = out * in;
  const __m512i nine = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(9));
  const __m512 half = _mm512_set1_ps(0.5f);
  for (int64_t oc = 0; oc < xs; oc += 16) {
    const __mmask16 m = first_lanes(xs - oc);
    __m512 g[9];
    for (int k = 0; k < 9; ++k) {
      g[k] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, nine, w + oc * 9 + k, 4);
    }
    __m512 a[4][3];
    for (int j = 0; j < 3; ++j) {
      a[0][j] = g[j];
      a[1][j] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(g[j], g[3 + j]), g[6 + j]));
      a[2][j] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(g[j], g[3 + j]), g[6 + j]));
      a[3][j] = g[6 + j];
    }
    for (int i = 0; i < 4; ++i) {
      float* d = u + 4 * i * xs + oc;
      _mm512_mask_storeu_ps(d, m, a[i][0]);
      _mm512_mask_storeu_ps(d + xs, m,
                            _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(a[i][0], a[i][1]), a[i][2])));
      _mm512_mask_storeu_ps(d + 2 * xs, m,
                            _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(a[i][0], a[i][1]), a[i][2])));
      _mm512_mask_storeu_ps(d + 3 * xs, m, a[i][2]);
    }
  }
}

STRATA_AVX512 void transform_input_avx512(const Planes& p, TileGrid grid, float* v, float* scratch) {
  const int64_t per_image = grid.count();
  const int64_t T = p.n * per_image;
  const int64_t xs = p.channels * T;
  const int64_t rows = plane_rows(grid), cols = plane_cols(grid);
  const InputScratch in = input_scratch(grid, scratch);
  float* plane = in.plane;
  float* const* t = in.t;
  const int64_t tw = grid.tiles_w;
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t c = 0; c < p.channels; ++c) {
      pad_plane(p.x + i * p.image_stride + c * p.height * p.width, p.height, p.width, p.pad_h, p.pad_w, rows, cols,
                plane);
      float* vc = v + c * T + i * per_image;
      for (int64_t ty = 0; ty < grid.tiles_h; ++ty) {
        const float* r0 = plane + 2 * ty * cols;
        for (int64_t x = 0; x < cols; x += 16) {
          const __mmask16 m = first_lanes(cols - x);
          const __m512 a = _mm512_maskz_loadu_ps(m, r0 + x), b = _mm512_maskz_loadu_ps(m, r0 + cols + x);
          const __m512 e = _mm512_maskz_loadu_ps(m, r0 + 2 * cols + x);
          const __m512 f = _mm512_maskz_loadu_ps(m, r0 + 3 * cols + x);
          _mm512_storeu_ps(t[0] + x, _mm512_sub_ps(a, e));
          _mm512_storeu_ps(t[1] + x, _mm512_add_ps(b, e));
          _mm512_storeu_ps(t[2] + x, _mm512_sub_ps(e, b));
          _mm512_storeu_ps(t[3] + x, _mm512_sub_ps(b, f));
        }
        for (int64_t tx = 0; tx < tw; tx += 16) {
          const __mmask16 m = first_lanes(tw - tx);
          float* dst = vc + ty * tw + tx;
          for (int k = 0; k < 4; ++k) {
            __m512 e0, o0, e1, o1;  // columns 2tx, 2tx + 1, 2tx + 2, 2tx + 3 of each tile
            split_even_odd(t[k] + 2 * tx, e0, o0);
            split_even_odd(t[k] + 2 * tx + 2, e1, o1);
            float* d = dst + 4 * k * xs;
            _mm512_mask_storeu_ps(d, m, _mm512_sub_ps(e0, e1));
            _mm512_mask_storeu_ps(d + xs, m, _mm512_add_ps(o0, e1));
            _mm512_mask_storeu_ps(d + 2 * xs, m, _mm512_sub_ps(e1, o0));
            _mm512_mask_storeu_ps(d + 3 * xs, m, _mm512_sub_ps(o0, o1));
          }
        }
      }
    }
  }
}

STRATA_AVX512 void transform_output_avx512(const float* m, int64_t out, int64_t n, TileGrid grid, int64_t out_h,
                                           int64_t out_w, const float* bias, float* y, int64_t image_stride) {
  const int64_t per_image = grid.count();
  const int64_t T = n * per_image;
  const int64_t xs = out * T;
  const int64_t tw = grid.tiles_w;
  // Interleave two rows of 16 (a[j], b[j] -> a0 b0 a1 b1 ...).
  const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      const float* mo = m + o * T + i * per_image;
      float* yo = y + i * image_stride + o * out_h * out_w;
      const __m512 b = _mm512_set1_ps(bias ? bias[o] : 0.0f);
      for (int64_t ty = 0; ty < grid.tiles_h; ++ty) {
        const bool row1 = 2 * ty + 1 < out_h;
        for (int64_t tx = 0; tx < tw; tx += 16) {
          const __mmask16 lanes = first_lanes(tw - tx);
          const float* mt = mo + ty * tw + tx;
          __m512 s0[4], s1[4];
          for (int j = 0; j < 4; ++j) {
            const __m512 m0 = _mm512_maskz_loadu_ps(lanes, mt + j * xs);
            const __m512 m1 = _mm512_maskz_loadu_ps(lanes, mt + (4 + j) * xs);
            const __m512 m2 = _mm512_maskz_loadu_ps(lanes, mt + (8 + j) * xs);
            const __m512 m3 = _mm512_maskz_loadu_ps(lanes, mt + (12 + j) * xs);
            s0[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
            s1[j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
          }
          const int64_t x = 2 * tx;
          const int64_t nx = out_w - x < 32 ? out_w - x : 32;  // outputs of this segment
          const __mmask16 lo = first_lanes(nx), hi = first_lanes(nx - 16);
          for (int r = 0; r < (row1 ? 2 : 1); ++r) {
            const __m512* sr = r == 0 ? s0 : s1;
            const __m512 y0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(sr[0], sr[1]), sr[2]), b);
            const __m512 y1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(sr[1], sr[2]), sr[3]), b);
            float* dst = yo + (2 * ty + r) * out_w + x;
            _mm512_mask_storeu_ps(dst, lo, _mm512_permutex2var_ps(y0, il, y1));
            if (hi) _mm512_mask_storeu_ps(dst + 16, hi, _mm512_permutex2var_ps(y0, ih, y1));
          }
        }
      }
    }
  }
}

STRATA_AVX512 void transform_output_grad_avx512(const float* dy, int64_t out, int64_t n, TileGrid grid,
                                                int64_t out_h, int64_t out_w, int64_t image_stride, float* dm) {
  const int64_t per_image = grid.count();
  const int64_t T = n * per_image;
  const int64_t xs = out * T;
  const int64_t tw = grid.tiles_w;
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 zero = _mm512_setzero_ps();
  // -x as the portable loops' unary minus gives it, signed zeros included
  // (0 - x would turn -(+0) into +0): -0 - x.
  const __m512 minus_zero = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      const float* g = dy + i * image_stride + o * out_h * out_w;
      float* d = dm + o * T + i * per_image;
      for (int64_t ty = 0; ty < grid.tiles_h; ++ty) {
        const float* g0 = g + 2 * ty * out_w;
        const bool row1 = 2 * ty + 1 < out_h;
        for (int64_t tx = 0; tx < tw; tx += 16) {
          const __mmask16 lanes = first_lanes(tw - tx);
          const int64_t x = 2 * tx;
          const int64_t nx = out_w - x < 32 ? out_w - x : 32;
          const __mmask16 lo = first_lanes(nx), hi = first_lanes(nx - 16);
          // Zero past the right edge: an odd width's last tile has no second column.
          const __m512 a0 = _mm512_maskz_loadu_ps(lo, g0 + x), a1 = _mm512_maskz_loadu_ps(hi, g0 + x + 16);
          const __m512 a = _mm512_permutex2var_ps(a0, ie, a1), b = _mm512_permutex2var_ps(a0, io, a1);
          __m512 c = zero, e = zero;
          if (row1) {
            const __m512 c0 = _mm512_maskz_loadu_ps(lo, g0 + out_w + x);
            const __m512 c1 = _mm512_maskz_loadu_ps(hi, g0 + out_w + x + 16);
            c = _mm512_permutex2var_ps(c0, ie, c1);
            e = _mm512_permutex2var_ps(c0, io, c1);
          }
          const __m512 r[4][2] = {{a, b},
                                  {_mm512_add_ps(a, c), _mm512_add_ps(b, e)},
                                  {_mm512_sub_ps(a, c), _mm512_sub_ps(b, e)},
                                  {_mm512_sub_ps(minus_zero, c), _mm512_sub_ps(minus_zero, e)}};
          float* dt = d + ty * tw + tx;
          for (int k = 0; k < 4; ++k) {
            float* q = dt + 4 * k * xs;
            _mm512_mask_storeu_ps(q, lanes, r[k][0]);
            _mm512_mask_storeu_ps(q + xs, lanes, _mm512_add_ps(r[k][0], r[k][1]));
            _mm512_mask_storeu_ps(q + 2 * xs, lanes, _mm512_sub_ps(r[k][0], r[k][1]));
            _mm512_mask_storeu_ps(q + 3 * xs, lanes, _mm512_sub_ps(minus_zero, r[k][1]));
          }
        }
      }
    }
  }
}

STRATA_AVX512 void transform_filter_grad_avx512(const float* du, int64_t out, int64_t in, float beta, float* dw) {
  const int64_t xs = out * in;
  const __m512i nine = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(9));
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512 vb = _mm512_set1_ps(beta);
  for (int64_t oc = 0; oc < xs; oc += 16) {
    const __mmask16 m = first_lanes(xs - oc);
    __m512 q[3][4];
    for (int j = 0; j < 4; ++j) {
      const __m512 u0 = _mm512_maskz_loadu_ps(m, du + j * xs + oc);
      const __m512 u1 = _mm512_maskz_loadu_ps(m, du + (4 + j) * xs + oc);
      const __m512 u2 = _mm512_maskz_loadu_ps(m, du + (8 + j) * xs + oc);
      const __m512 u3 = _mm512_maskz_loadu_ps(m, du + (12 + j) * xs + oc);
      const __m512 h = _mm512_mul_ps(half, _mm512_add_ps(u1, u2));
      q[0][j] = _mm512_add_ps(u0, h);
      q[1][j] = _mm512_mul_ps(half, _mm512_sub_ps(u1, u2));
      q[2][j] = _mm512_add_ps(h, u3);
    }
    float* g = dw + oc * 9;
    for (int i = 0; i < 3; ++i) {
      const __m512 h = _mm512_mul_ps(half, _mm512_add_ps(q[i][1], q[i][2]));
      const __m512 v[3] = {_mm512_add_ps(q[i][0], h), _mm512_mul_ps(half, _mm512_sub_ps(q[i][1], q[i][2])),
                           _mm512_add_ps(h, q[i][3])};
      for (int j = 0; j < 3; ++j) {
        __m512 r = v[j];
        if (beta != 0.0f) {
          const __m512 old = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, nine, g + 3 * i + j, 4);
          r = _mm512_add_ps(_mm512_mul_ps(vb, old), r);
        }
        _mm512_mask_i32scatter_ps(g + 3 * i + j, m, nine, r, 4);
      }
    }
  }
}

#pragma GCC diagnostic pop

}  // namespace detail
}  // namespace winograd
}  // namespace strata
#endif  // STRATA_GEMM_AVX512
