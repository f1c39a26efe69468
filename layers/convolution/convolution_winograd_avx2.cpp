// The AVX2 Winograd transforms (convolution_winograd_kernels.h): 8 tiles of a
// tile row at once (then 4 with SSE, then one at a time), the stride-2 walk
// over a padded row as even/odd shuffles. No masked loads or stores (AMD CPUs
// may fault on masked-off lanes): a row's last tiles go through a small
// zero-filled buffer or the one-tile loop.
#include <cstring>

#include "framework/cpu/gemm_avx2.h"
#include "layers/convolution/convolution_winograd_kernels.h"

#if defined(STRATA_WINOGRAD_VECTOR) && defined(STRATA_GEMM_AVX2)

namespace strata {
namespace winograd {
namespace detail {

namespace {

// 8 lanes (AVX) and 4 lanes (SSE) behind one interface, so each transform's
// block is written once for both widths.
struct Lanes8 {
  using V = __m256;
  static constexpr int kWidth = 8;
  STRATA_AVX2 static V load(const float* p) { return _mm256_loadu_ps(p); }
  STRATA_AVX2 static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  STRATA_AVX2 static V add(V a, V b) { return _mm256_add_ps(a, b); }
  STRATA_AVX2 static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  STRATA_AVX2 static V neg(V a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  STRATA_AVX2 static V set1(float x) { return _mm256_set1_ps(x); }
  // even[j] = p[2j], odd[j] = p[2j + 1] for j < 8 (reads p[0..15]).
  STRATA_AVX2 static void split(const float* p, V& even, V& odd) { gemm_internal::split_even_odd8(p, even, odd); }
  // p[2j] = a[j], p[2j + 1] = b[j] for j < 8 (writes p[0..15]).
  STRATA_AVX2 static void interleave(float* p, V a, V b) {
    const __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
    _mm256_storeu_ps(p, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
};

struct Lanes4 {
  using V = __m128;
  static constexpr int kWidth = 4;
  STRATA_AVX2 static V load(const float* p) { return _mm_loadu_ps(p); }
  STRATA_AVX2 static void store(float* p, V v) { _mm_storeu_ps(p, v); }
  STRATA_AVX2 static V add(V a, V b) { return _mm_add_ps(a, b); }
  STRATA_AVX2 static V sub(V a, V b) { return _mm_sub_ps(a, b); }
  STRATA_AVX2 static V neg(V a) { return _mm_xor_ps(a, _mm_set1_ps(-0.0f)); }
  STRATA_AVX2 static V set1(float x) { return _mm_set1_ps(x); }
  STRATA_AVX2 static void split(const float* p, V& even, V& odd) {
    const __m128 lo = _mm_loadu_ps(p), hi = _mm_loadu_ps(p + 4);
    even = _mm_shuffle_ps(lo, hi, 0x88);
    odd = _mm_shuffle_ps(lo, hi, 0xDD);
  }
  STRATA_AVX2 static void interleave(float* p, V a, V b) {
    _mm_storeu_ps(p, _mm_unpacklo_ps(a, b));
    _mm_storeu_ps(p + 4, _mm_unpackhi_ps(a, b));
  }
};

// V[.][tx .. tx + W) of one tile row from its row sums t[k] (B^T d): the same
// combinations of each tile's 4 columns. Reads t[k][2tx .. 2tx + 2W + 1].
template <class L>
STRATA_AVX2 void input_columns(float* const* t, int64_t tx, float* dst, int64_t xs) {
  using V = typename L::V;
  for (int k = 0; k < 4; ++k) {
    V e0, o0, e1, o1;  // columns 2tx, 2tx + 1, 2tx + 2, 2tx + 3 of each tile
    L::split(t[k] + 2 * tx, e0, o0);
    L::split(t[k] + 2 * tx + 2, e1, o1);
    float* d = dst + 4 * k * xs + tx;
    L::store(d, L::sub(e0, e1));
    L::store(d + xs, L::add(o0, e1));
    L::store(d + 2 * xs, L::sub(e1, o0));
    L::store(d + 3 * xs, L::sub(o0, o1));
  }
}

// The outputs of tiles tx .. tx + W of one tile row (the two output rows,
// 2W columns from 2tx, cut to the image) from M.
template <class L>
STRATA_AVX2 void output_tiles(const float* mt, int64_t xs, float bias, bool row1, int64_t cols_left, float* y0,
                              int64_t out_w) {
  using V = typename L::V;
  constexpr int W = L::kWidth;
  V s0[4], s1[4];
  for (int j = 0; j < 4; ++j) {  // A^T M: rows (1, 1, 1, 0) and (0, 1, -1, -1)
    const V m0 = L::load(mt + j * xs), m1 = L::load(mt + (4 + j) * xs);
    const V m2 = L::load(mt + (8 + j) * xs), m3 = L::load(mt + (12 + j) * xs);
    s0[j] = L::add(L::add(m0, m1), m2);
    s1[j] = L::sub(L::sub(m1, m2), m3);
  }
  const V b = L::set1(bias);
  for (int r = 0; r < (row1 ? 2 : 1); ++r) {
    const V* s = r == 0 ? s0 : s1;
    const V even = L::add(L::add(L::add(s[0], s[1]), s[2]), b);
    const V odd = L::add(L::sub(L::sub(s[1], s[2]), s[3]), b);
    float* dst = y0 + r * out_w;
    if (cols_left >= 2 * W) {
      L::interleave(dst, even, odd);
    } else {  // an odd width's last tile: its second column is not stored
      float buf[2 * W];
      L::interleave(buf, even, odd);
      std::memcpy(dst, buf, sizeof(float) * cols_left);
    }
  }
}

// even[j] = src[2j], odd[j] = src[2j + 1] for the first W tiles' columns,
// zero from cols_left on (reads no further).
template <class L>
STRATA_AVX2 void split_row(const float* src, int64_t cols_left, typename L::V& even, typename L::V& odd) {
  constexpr int W = L::kWidth;
  if (cols_left >= 2 * W) return L::split(src, even, odd);
  float buf[2 * W] = {};
  std::memcpy(buf, src, sizeof(float) * cols_left);
  L::split(buf, even, odd);
}

// dM[.][tx .. tx + W) of one tile row from the top gradient's two rows g0 and
// (row1) g0 + out_w, zero past the image's right edge and bottom.
template <class L>
STRATA_AVX2 void output_grad_tiles(const float* g0, bool row1, int64_t cols_left, int64_t out_w, float* dt,
                                   int64_t xs) {
  using V = typename L::V;
  V a, b, c = L::set1(0.0f), e = L::set1(0.0f);  // a, b: row 0's even and odd columns; c, e: row 1's
  split_row<L>(g0, cols_left, a, b);
  if (row1) split_row<L>(g0 + out_w, cols_left, c, e);
  // A dy: rows d0, d0 + d1, d0 - d1, -d1; then the same on columns.
  const V r[4][2] = {{a, b}, {L::add(a, c), L::add(b, e)}, {L::sub(a, c), L::sub(b, e)}, {L::neg(c), L::neg(e)}};
  for (int k = 0; k < 4; ++k) {
    float* q = dt + 4 * k * xs;
    L::store(q, r[k][0]);
    L::store(q + xs, L::add(r[k][0], r[k][1]));
    L::store(q + 2 * xs, L::sub(r[k][0], r[k][1]));
    L::store(q + 3 * xs, L::neg(r[k][1]));
  }
}

}  // namespace

STRATA_AVX2 void transform_input_avx2(const Planes& p, TileGrid grid, float* v, float* scratch) {
  const int64_t per_image = grid.count();
  const int64_t T = p.n * per_image;
  const int64_t xs = p.channels * T;  // floats between transformed points
  const int64_t rows = plane_rows(grid), cols = plane_cols(grid);
  const InputScratch in = input_scratch(grid, scratch);
  float* const* t = in.t;
  const int64_t tw = grid.tiles_w;
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t c = 0; c < p.channels; ++c) {
      pad_plane(p.x + i * p.image_stride + c * p.height * p.width, p.height, p.width, p.pad_h, p.pad_w, rows, cols,
                in.plane);
      float* vc = v + c * T + i * per_image;
      for (int64_t ty = 0; ty < grid.tiles_h; ++ty) {
        const float* r0 = in.plane + 2 * ty * cols;
        const float* r1 = r0 + cols;
        const float* r2 = r1 + cols;
        const float* r3 = r2 + cols;
        // B^T d: the rows' combinations, 8 columns at a time.
        int64_t x = 0;
        for (; x + 8 <= cols; x += 8) {
          const __m256 a = _mm256_loadu_ps(r0 + x), b = _mm256_loadu_ps(r1 + x);
          const __m256 e = _mm256_loadu_ps(r2 + x), f = _mm256_loadu_ps(r3 + x);
          _mm256_storeu_ps(t[0] + x, _mm256_sub_ps(a, e));
          _mm256_storeu_ps(t[1] + x, _mm256_add_ps(b, e));
          _mm256_storeu_ps(t[2] + x, _mm256_sub_ps(e, b));
          _mm256_storeu_ps(t[3] + x, _mm256_sub_ps(b, f));
        }
        input_row_sums(r0, cols, x, t);
        // (B^T d) B: 8 tiles at a time, then 4, then one.
        float* dst = vc + ty * tw;
        int64_t tx = 0;
        for (; tx + 8 <= tw; tx += 8) input_columns<Lanes8>(t, tx, dst, xs);
        if (tx + 4 <= tw) {
          input_columns<Lanes4>(t, tx, dst, xs);
          tx += 4;
        }
        for (; tx < tw; ++tx) input_tile(t, tx, dst, xs);
      }
    }
  }
}

STRATA_AVX2 void transform_output_avx2(const float* m, int64_t out, int64_t n, TileGrid grid, int64_t out_h,
                                       int64_t out_w, const float* bias, float* y, int64_t image_stride) {
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
        const float* mt = mo + ty * tw;
        float* y0 = yo + 2 * ty * out_w;
        const bool row1 = 2 * ty + 1 < out_h;
        int64_t tx = 0;
        for (; tx + 8 <= tw; tx += 8) output_tiles<Lanes8>(mt + tx, xs, b, row1, out_w - 2 * tx, y0 + 2 * tx, out_w);
        if (tx + 4 <= tw) {
          output_tiles<Lanes4>(mt + tx, xs, b, row1, out_w - 2 * tx, y0 + 2 * tx, out_w);
          tx += 4;
        }
        for (; tx < tw; ++tx) output_tile(mt, xs, tx, b, row1, out_w, y0);
      }
    }
  }
}

STRATA_AVX2 void transform_output_grad_avx2(const float* dy, int64_t out, int64_t n, TileGrid grid, int64_t out_h,
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
        const float* g0 = g + 2 * ty * out_w;
        const bool row1 = 2 * ty + 1 < out_h;
        float* dt = d + ty * tw;
        int64_t tx = 0;
        for (; tx + 8 <= tw; tx += 8) output_grad_tiles<Lanes8>(g0 + 2 * tx, row1, out_w - 2 * tx, out_w, dt + tx, xs);
        if (tx + 4 <= tw) {
          output_grad_tiles<Lanes4>(g0 + 2 * tx, row1, out_w - 2 * tx, out_w, dt + tx, xs);
          tx += 4;
        }
        for (; tx < tw; ++tx) output_grad_tile(g0, tx, row1, out_w, dt, xs);
      }
    }
  }
}

}  // namespace detail
}  // namespace winograd
}  // namespace strata
#endif  // STRATA_WINOGRAD_VECTOR && STRATA_GEMM_AVX2
